"""The consistent-hashing index: hashing, routing, ring construction, JSON layout, storage."""

from __future__ import annotations

import json
import pickle
import struct
import uuid

import numpy as np
import pyarrow as pa
import pytest

from table.errors import HashingMetadataError
from table.index import consistent_hashing as ch
from table.index.consistent_hashing import HashingMetadata, HashingNode, NodeTag, Router
from table.storage.file_io import Storage

pytestmark = pytest.mark.unit

MASK = 0x7FFFFFFF

# ---- an independent xxHash32, written from the algorithm's specification --------------------

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_U32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _U32


def reference_xxh32(data: bytes, seed: int = 0) -> int:
    n, i = len(data), 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _U32, (seed + _P2) & _U32, seed & _U32, (seed - _P1) & _U32]
        while i + 16 <= n:
            for j in range(4):
                lane = int.from_bytes(data[i : i + 4], "little")
                i += 4
                v[j] = (_rotl((v[j] + lane * _P2) & _U32, 13) * _P1) & _U32
        acc = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _U32
    else:
        acc = (seed + _P5) & _U32
    acc = (acc + n) & _U32
    while i + 4 <= n:
        acc = (_rotl((acc + int.from_bytes(data[i : i + 4], "little") * _P3) & _U32, 17) * _P4) & _U32
        i += 4
    while i < n:
        acc = (_rotl((acc + data[i] * _P5) & _U32, 11) * _P1) & _U32
        i += 1
    acc ^= acc >> 15
    acc = (acc * _P2) & _U32
    acc ^= acc >> 13
    acc = (acc * _P3) & _U32
    acc ^= acc >> 16
    return acc


# Hash values computed with reference_xxh32 (masked), and the bucket each falls in on the
# default 4-bucket ring [536870912, 1073741824, 1610612736, 2147483647].
KNOWN = [
    ("", 46947589, 0),
    ("a", 1426945110, 2),
    ("abc", 852579327, 1),
    ("ab", 1234828371, 2),
    ("null", 171510893, 0),
    ("key-42", 1709838346, 3),
    ("séance", 252462857, 0),
    ("Nobody inspects the spammish repetition", 1646869295, 3),
    ("3eeb61f7-c2b0-4636-99bd-5d7a5a1d2c04", 1831542349, 3),
    ("e96c4396-3fad-413a-a942-4cb36106d721", 201186481, 0),
    ("1dced545-862b-4ceb-8b43-d2a568f6616b", 1014647843, 1),
]
RING4 = [536870912, 1073741824, 1610612736, 2147483647]


def ring(values, prefixes=None, partition="p") -> HashingMetadata:
    prefixes = prefixes or [f"{i:08d}-0000-0000-0000-000000000000" for i in range(len(values))]
    nodes = tuple(HashingNode(v, p) for v, p in zip(values, prefixes))
    return HashingMetadata(0, partition, ch.INIT_INSTANT_TS, len(values), 0, nodes)


def counter_prefixes():
    state = {"n": 0}

    def make() -> str:
        state["n"] += 1
        return f"child-{state['n']}"

    return make


# ---- hashing ---------------------------------------------------------------------------------


def test_reference_xxh32_reproduces_published_test_vectors():
    assert reference_xxh32(b"") == 0x02CC5D05
    assert reference_xxh32(b"a") == 0x550D7456
    assert reference_xxh32(b"abc") == 0x32D153FF
    assert reference_xxh32(b"Nobody inspects the spammish repetition") == 0xE2293B2F


@pytest.mark.parametrize("key,expected_hash,_bucket", KNOWN)
def test_hash_value_is_masked_xxh32_seed0_of_the_utf8_key(key, expected_hash, _bucket):
    assert reference_xxh32(key.encode("utf-8")) & MASK == expected_hash
    assert ch.hash_value(key) == expected_hash
    assert ch.hash_values(pa.array([key]))[0] == expected_hash


def test_hashing_a_whole_array_equals_hashing_each_key_whatever_their_lengths():
    import random

    from table.index.xxh32 import xxh32

    rng = random.Random(5)
    keys = ["".join(chr(rng.randint(32, 0x2FF)) for _ in range(rng.randint(0, 70))) for _ in range(3000)]
    array = pa.array(keys)
    expected = [reference_xxh32(k.encode("utf-8")) for k in keys]
    assert xxh32(array).tolist() == expected
    assert xxh32(array.slice(17, 900)).tolist() == expected[17:917]
    same_length = pa.array([f"ord-{i:010d}" for i in range(500)])
    assert xxh32(same_length.slice(3)).tolist() == [reference_xxh32(k.encode()) for k in same_length.to_pylist()[3:]]


def test_complex_keys_hash_alike_in_bulk_and_one_by_one():
    keys = ["id:7,region:emea", "id:__null__,region:x", "id:a:b,region:y", "plain", "region:apac,id:9", "id:,region:"]
    fields = ["id", "region"]
    assert ch.hash_values(pa.array(keys), fields).tolist() == [ch.hash_value(k, fields) for k in keys]
    assert ch.hash_values(pa.array(keys), ["id"]).tolist() == [ch.hash_value(k, ["id"]) for k in keys]


def test_routing_agrees_with_independently_computed_buckets_on_a_fixed_ring():
    router = Router(ring(RING4), index_key_fields=["uuid"])
    keys = [k for k, _, _ in KNOWN]
    assert router.route(pa.array(keys)).tolist() == [b for _, _, b in KNOWN]
    # and the definition itself: first node value >= hash, wrapping to the first
    for key in keys:
        h = reference_xxh32(key.encode()) & MASK
        expected = next((i for i, v in enumerate(RING4) if v >= h), 0)
        assert router.node_for_key(key) == router.nodes[expected]


def test_routing_wraps_hashes_above_the_last_node_to_the_first_node():
    router = Router(ring([100, 200]))
    hashes = np.array([0, 99, 100, 101, 200, 201, MASK])
    assert router.indices_for_hashes(hashes).tolist() == [0, 0, 0, 1, 1, 0, 0]
    # a real key whose hash is above the last node goes to the first node
    key = next(k for k, h, _ in KNOWN if h > 1_500_000_000)
    small = Router(ring([1_000, 1_500_000_000]))
    assert small.node_for_key(key).value == 1_000


def test_routing_is_by_node_value_whatever_the_order_nodes_are_listed_in():
    shuffled = ring([RING4[2], RING4[0], RING4[3], RING4[1]], prefixes=["c", "a", "d", "b"])
    router = Router(shuffled)
    assert [n.file_id_prefix for n in router.nodes] == ["a", "b", "c", "d"]
    assert router.file_ids(pa.array(["abc", "a"])).to_pylist() == ["b-0", "c-0"]


def test_vectorized_routing_matches_per_key_routing_for_simple_and_complex_keys():
    rng = np.random.default_rng(7)
    simple = [str(uuid.UUID(int=int(rng.integers(0, 2**62)))) for _ in range(300)]
    complex_ = [f"id:{i},ts:2024-01-0{i % 9 + 1} 10:00:0{i % 7},name:n{i}" for i in range(100)]
    complex_ += [f"id:{i},name:__null__" for i in range(20)] + [f"id:{i},name:a,b" for i in range(20)]
    router = Router(ch.initial_metadata("p", 16), index_key_fields=["id", "ts", "name"])
    keys = simple + complex_
    fast = router.route(pa.array(keys)).tolist()
    slow = [router.nodes.index(router.node_for_hash(ch.hash_value(k, ["id", "ts", "name"]))) for k in keys]
    assert fast == slow
    assert router.route(pa.chunked_array([keys[:50], keys[50:]])).tolist() == fast


@pytest.mark.parametrize(
    "key,fields,joined",
    [
        ("plain-key", ["uuid"], "plain-key"),
        ("a,b", ["uuid"], "a,b"),  # no ':' -> the whole key
        ("f1:a,f2:b", ["f1", "f2"], "ab"),
        ("f1:a,f2:b", ["f2"], "b"),
        ("f1:a,f2:b", None, "ab"),
        ("f1:a,f2:__null__", ["f1", "f2"], "anull"),
        ("f1:a,f2:__empty__", ["f1", "f2"], "a"),
        ("id:1,ts:2024-01-01 10:00:00", ["id", "ts"], "12024-01-01 10:00:00"),
        ("f1:x,f2:b,c", ["f1", "f2"], "xbc"),  # Hudi 0.14/0.15 keeps a ',' piece without ':'
        ("2024-01-01 10:00:00", ["ts"], ""),  # Hudi 0.14/0.15: such simple keys keep no part
    ],
)
def test_hash_keys_follow_hudi_bucket_identifier(key, fields, joined):
    assert ch.hash_key_string(key, fields) == joined
    assert ch.hash_value(key, fields) == reference_xxh32(joined.encode()) & MASK


def test_complex_key_routes_by_its_index_key_fields_only():
    router_all = Router(ring(RING4), index_key_fields=["f1", "f2"])
    router_f2 = Router(ring(RING4), index_key_fields=["f2"])
    assert router_all.route(["f1:a,f2:b"]).tolist() == [2]  # xxh32("ab") -> bucket 2
    assert router_f2.route(["f1:zz,f2:abc"]).tolist() == [1]  # xxh32("abc") -> bucket 1


def test_null_record_keys_are_refused_by_the_router():
    with pytest.raises(HashingMetadataError, match="null"):
        Router(ring(RING4)).file_ids(pa.array(["a", None]))


def test_router_survives_pickling():
    router = Router(ch.initial_metadata("p", 8), index_key_fields=["k"])
    clone = pickle.loads(pickle.dumps(router))
    keys = pa.array([f"k{i}" for i in range(100)])
    assert clone.file_ids(keys).to_pylist() == router.file_ids(keys).to_pylist()


# ---- the initial ring ------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 16, 100, 256, 1000])
def test_initial_node_values_are_hudis_equal_division(n):
    step = -(-MASK // n)  # ceil(MASK / n), written differently from the code under test
    expected = [min(step * i, MASK) for i in range(1, n + 1)]
    metadata = ch.initial_metadata("p", n)
    assert [node.value for node in metadata.nodes] == expected
    assert metadata.nodes[-1].value == MASK
    assert len({node.value for node in metadata.nodes}) == n


def test_initial_node_values_literal_for_three_and_four_buckets():
    assert [n.value for n in ch.initial_metadata("p", 3).nodes] == [715827883, 1431655766, 2147483647]
    assert [n.value for n in ch.initial_metadata("p", 4).nodes] == RING4


def test_initial_metadata_header_is_what_hudi_creates():
    m = ch.initial_metadata("city=chennai", 4)
    assert (m.version, m.partition_path, m.instant, m.num_buckets, m.seq_no) == (
        0,
        "city=chennai",
        "00000000000000",
        4,
        0,
    )
    assert all(node.tag is NodeTag.NORMAL for node in m.nodes)
    assert m.filename == "00000000000000.hashing_meta"


def test_initial_prefixes_are_name_based_uuids_of_partition_and_range():
    m = ch.initial_metadata("city=chennai", 3)
    start = 0
    for node in m.nodes:
        # Java UUID.nameUUIDFromBytes(longs || partition) == uuid3 with the longs as namespace
        namespace = uuid.UUID(bytes=struct.pack(">qq", start, node.value))
        assert node.file_id_prefix == str(uuid.uuid3(namespace, "city=chennai"))
        assert uuid.UUID(node.file_id_prefix).version == 3
        start = node.value
    assert len(set(m.file_ids)) == 3
    assert ch.initial_metadata("city=chennai", 3) == m  # deterministic: concurrent creators agree
    assert ch.initial_metadata("city=sao_paulo", 3).file_ids != m.file_ids


def test_random_prefixes_when_not_deterministic():
    a, b = ch.initial_metadata("p", 2, deterministic=False), ch.initial_metadata("p", 2, deterministic=False)
    assert a.file_ids != b.file_ids
    assert all(uuid.UUID(n.file_id_prefix).version == 4 for n in a.nodes)


def test_file_id_of_a_bucket_is_prefix_dash_zero():
    node = HashingNode(5, "0c0f6b8e-6a5e-4f68-9a1b-9c1f54b4b5e0")
    assert ch.file_id_for(node) == "0c0f6b8e-6a5e-4f68-9a1b-9c1f54b4b5e0-0"
    assert node.file_id == ch.file_id_for(node.file_id_prefix)
    assert ch.file_id_prefix_of(node.file_id) == node.file_id_prefix
    router = Router(ring([5, 10], prefixes=["a", "b"]))
    assert router.node_by_file_id("b-0").value == 10


# ---- JSON ------------------------------------------------------------------------------------

EXPECTED_JSON = """{
  "version" : 0,
  "partitionPath" : "city=chennai",
  "instant" : "00000000000000",
  "numBuckets" : 2,
  "seqNo" : 0,
  "nodes" : [ {
    "value" : 1073741824,
    "fileIdPrefix" : "aaaaaaaa-0000-0000-0000-000000000000",
    "tag" : "NORMAL"
  }, {
    "value" : 2147483647,
    "fileIdPrefix" : "bbbbbbbb-0000-0000-0000-000000000000",
    "tag" : "NORMAL"
  } ]
}"""


def test_json_is_byte_for_byte_jacksons_pretty_printed_layout():
    m = ring(
        [1073741824, MASK],
        ["aaaaaaaa-0000-0000-0000-000000000000", "bbbbbbbb-0000-0000-0000-000000000000"],
        partition="city=chennai",
    )
    assert m.to_json() == EXPECTED_JSON
    assert m.to_bytes() == EXPECTED_JSON.encode("utf-8")


def test_json_field_names_are_hudis():
    d = json.loads(ch.initial_metadata("p", 2).to_json())
    assert list(d) == ["version", "partitionPath", "instant", "numBuckets", "seqNo", "nodes"]
    assert list(d["nodes"][0]) == ["value", "fileIdPrefix", "tag"]


def test_json_round_trip_keeps_every_field():
    m = HashingMetadata(
        0,
        "a/b=c",
        "20240101000000000",
        4,
        3,
        (HashingNode(10, "x", NodeTag.NORMAL), HashingNode(MASK, "y", NodeTag.NORMAL)),
    )
    back = HashingMetadata.from_bytes(m.to_bytes())
    assert back == m
    assert back.to_json() == m.to_json()


def test_json_reading_tolerates_unknown_fields_missing_tag_and_old_field_name():
    text = json.dumps(
        {
            "version": 0,
            "partitionPath": "p",
            "instant": "1",
            "numBuckets": 1,
            "seqNo": 0,
            "extra": True,
            "nodes": [{"value": 7, "fileIdPfx": "old"}],
        }
    )
    m = HashingMetadata.from_bytes(text.encode())
    assert m.nodes == (HashingNode(7, "old", NodeTag.NORMAL),)


def test_json_strings_are_escaped_as_jackson_does():
    m = ring([MASK], ["q"], partition='we"ird\\part\x01\n')
    assert '"partitionPath" : "we\\"ird\\\\part\\u0001\\n"' in m.to_json()
    assert HashingMetadata.from_bytes(m.to_bytes()).partition_path == 'we"ird\\part\x01\n'


def test_unreadable_metadata_raises_a_clear_error():
    with pytest.raises(HashingMetadataError, match="unable to read hashing metadata"):
        HashingMetadata.from_bytes(b"{not json")


def test_children_json_writes_null_prefix_of_deleted_nodes():
    text = ch.children_to_json([HashingNode(5, None, NodeTag.DELETE), HashingNode(9, "n", NodeTag.REPLACE)])
    assert text == (
        '[ {\n  "value" : 5,\n  "fileIdPrefix" : null,\n  "tag" : "DELETE"\n}, '
        '{\n  "value" : 9,\n  "fileIdPrefix" : "n",\n  "tag" : "REPLACE"\n} ]'
    )
    assert ch.children_from_json(text) == [HashingNode(5, None, NodeTag.DELETE), HashingNode(9, "n", NodeTag.REPLACE)]


# ---- split, merge, next version --------------------------------------------------------------


def test_split_at_range_middle_gives_two_replace_children():
    m = ring(RING4)
    children = ch.split_node(m, m.nodes[1], new_prefix=counter_prefixes())
    assert children == (
        HashingNode((RING4[0] + RING4[1]) // 2, "child-1", NodeTag.REPLACE),
        HashingNode(RING4[1], "child-2", NodeTag.REPLACE),
    )


def test_split_of_the_first_node_takes_the_middle_of_its_wrapping_range():
    m = ring(RING4)
    low, high = ch.split_node(m, m.nodes[0], new_prefix=counter_prefixes())
    assert low.value == ((MASK + RING4[0] + MASK + 1) >> 1) & MASK
    assert 0 < low.value < RING4[0] and high.value == RING4[0]


def test_split_at_an_explicit_value_and_refusal_outside_the_range():
    m = ring(RING4)
    low, high = ch.split_node(m, "00000002-0000-0000-0000-000000000000-0", split_value=RING4[1] + 1)
    assert (low.value, high.value) == (RING4[1] + 1, RING4[2])
    for bad in (RING4[1], RING4[2], RING4[3]):
        with pytest.raises(HashingMetadataError):
            ch.split_node(m, m.nodes[2], split_value=bad)


def test_split_of_a_minimal_range_is_refused():
    m = ring([10, 11, MASK])
    assert ch.split_node(m, m.nodes[1]) is None


def test_merge_deletes_all_but_the_last_node_and_replaces_it():
    m = ring(RING4)
    children = ch.merge_nodes(m, [m.nodes[1], m.nodes[2]], new_prefix=counter_prefixes())
    assert children == [HashingNode(RING4[1], None, NodeTag.DELETE), HashingNode(RING4[2], "child-1", NodeTag.REPLACE)]


def test_merge_of_non_adjacent_buckets_is_refused():
    m = ring(RING4)
    with pytest.raises(HashingMetadataError, match="discontinuous"):
        ch.merge_nodes(m, [m.nodes[0], m.nodes[2]])
    with pytest.raises(HashingMetadataError):
        ch.merge_nodes(m, [m.nodes[0]])


def test_apply_split_children_gives_the_next_version():
    m = ring(RING4)
    children = ch.split_node(m, m.nodes[1], new_prefix=counter_prefixes())
    new = ch.apply_children(m, children, "20240102030405678")
    assert (new.instant, new.seq_no, new.num_buckets, new.version) == ("20240102030405678", 1, 4, 0)
    assert [n.value for n in new.nodes] == [RING4[0], children[0].value, RING4[1], RING4[2], RING4[3]]
    assert all(n.tag is NodeTag.NORMAL for n in new.nodes)
    assert [n.file_id_prefix for n in new.nodes][1:3] == ["child-1", "child-2"]
    # keys of the split bucket now go to one of the two children; the others stay where they were
    keys = [f"k{i}" for i in range(2000)]
    before = Router(m).file_ids(keys).to_pylist()
    after = Router(new).file_ids(keys).to_pylist()
    split_file = m.nodes[1].file_id
    for b, a in zip(before, after):
        assert a in ("child-1-0", "child-2-0") if b == split_file else a == b


def test_apply_merge_children_removes_the_merged_range():
    m = ring(RING4)
    new = ch.apply_children(m, ch.merge_nodes(m, [m.nodes[0], m.nodes[1]], new_prefix=counter_prefixes()), "2")
    assert [(n.value, n.file_id_prefix) for n in new.nodes] == [
        (RING4[1], "child-1"),
        (RING4[2], m.nodes[2].file_id_prefix),
        (RING4[3], m.nodes[3].file_id_prefix),
    ]
    assert Router(new).node_for_hash(5).file_id_prefix == "child-1"


def test_router_with_pending_children_routes_to_the_children():
    m = ring(RING4)
    children = ch.split_node(m, m.nodes[3], new_prefix=counter_prefixes())
    pending = m.with_children(children)
    assert Router(pending).num_buckets == 4  # children ignored unless asked
    dual = Router(pending, include_children=True)
    assert dual.num_buckets == 5
    assert dual.node_for_hash(MASK).file_id_prefix == "child-2"
    assert dual.node_for_hash(RING4[2] + 1).file_id_prefix == "child-1"


# ---- storage ---------------------------------------------------------------------------------


def _write(storage: Storage, partition: str, metadata: HashingMetadata, marker: bool) -> None:
    ch.save(storage, metadata)
    if marker:
        ch.write_commit_marker(storage, partition, metadata.instant)


@pytest.fixture
def storage(tmp_path) -> Storage:
    return Storage(str(tmp_path / "table"))


def test_metadata_lives_under_the_bucket_index_directory(storage):
    m = ch.create_initial(storage, "city=chennai", 4)
    assert storage.exists(".hoodie/.bucket_index/consistent_hashing_metadata/city=chennai/00000000000000.hashing_meta")
    assert storage.read_bytes(ch.metadata_path("city=chennai", m.instant)) == m.to_bytes()
    assert ch.commit_marker_path("a/b", "1") == ".hoodie/.bucket_index/consistent_hashing_metadata/a/b/1.commit"
    assert ch.metadata_path("", "1") == ".hoodie/.bucket_index/consistent_hashing_metadata/1.hashing_meta"


def test_create_initial_returns_the_existing_file_when_it_lost_the_race(storage):
    first = ch.create_initial(storage, "p", 4)
    again = ch.create_initial(storage, "p", 8)
    assert again == first and again.num_buckets == 4


def test_load_latest_is_none_without_metadata(storage):
    assert ch.load_latest(storage, "p", set()) is None


def test_load_latest_takes_the_initial_metadata_as_committed_without_writing_it_a_marker(storage):
    created = ch.create_initial(storage, "", 2)
    assert ch.load_latest(storage, "", None) == created
    # Hudi 0.15's loadMetadata finds nothing when a marker sits beside the initial metadata and a
    # newer resize is pending
    assert not storage.exists(ch.commit_marker_path("", ch.INIT_INSTANT_TS))


def test_load_latest_picks_the_newest_metadata_with_a_commit_marker(storage):
    init = ch.create_initial(storage, "p", 4)
    v1 = ch.apply_children(init, ch.split_node(init, init.nodes[0]), "20240101000000001")
    v2 = ch.apply_children(v1, ch.split_node(v1, v1.nodes[0]), "20240101000000002")
    _write(storage, "p", v1, marker=True)
    _write(storage, "p", v2, marker=False)  # its resize is still pending
    assert ch.load_latest(storage, "p", {"20240101000000001"}) == v1
    assert not storage.exists(ch.commit_marker_path("p", v2.instant))


def test_load_latest_commits_metadata_whose_replacecommit_completed_without_marker(storage):
    init = ch.create_initial(storage, "p", 4)
    v1 = ch.apply_children(init, ch.split_node(init, init.nodes[0]), "20240101000000001")
    _write(storage, "p", v1, marker=False)
    assert ch.load_latest(storage, "p", None) == init  # timeline not consulted: marker rule only
    assert ch.load_latest(storage, "p", {"20240101000000001"}, repair=False) == v1
    assert not storage.exists(ch.commit_marker_path("p", v1.instant))
    assert ch.load_latest(storage, "p", {"20240101000000001"}) == v1
    assert storage.exists(ch.commit_marker_path("p", v1.instant))
    assert ch.load_latest(storage, "p", set()) == v1  # the marker now says it


def test_load_latest_recovers_an_archived_resize_from_the_file_groups(storage):
    init = ch.create_initial(storage, "p", 2)
    v1 = ch.apply_children(init, ch.split_node(init, init.nodes[0]), "20240101000000001")
    _write(storage, "p", v1, marker=False)
    child_prefix = v1.nodes[0].file_id_prefix
    assert (
        ch.load_latest(storage, "p", set(), pending_instants={v1.instant}, existing_file_id_prefixes={child_prefix})
        == init
    )
    assert ch.load_latest(storage, "p", set(), pending_instants=set(), existing_file_id_prefixes={"unrelated"}) == init
    assert ch.load_latest(storage, "p", set(), pending_instants=set(), existing_file_id_prefixes={child_prefix}) == v1


def test_load_latest_ignores_temporary_files_and_orphan_markers(storage):
    init = ch.create_initial(storage, "p", 2)
    d = ch.metadata_dir("p")
    storage.write_bytes(f"{d}/20990101000000000.hashing_meta.tmp.123", b"partial")
    storage.write_bytes(f"{d}/.20990101000000001.hashing_meta.abc.tmp", b"partial")
    storage.write_bytes(f"{d}/20990101000000002.commit", b"")
    assert ch.load_latest(storage, "p", {"20990101000000000", "20990101000000001"}) == init


def test_load_or_create_creates_once(storage):
    a = ch.load_or_create(storage, "p", 3)
    b = ch.load_or_create(storage, "p", 5)
    assert a == b and len(a.nodes) == 3


def test_save_replaces_an_earlier_attempt_of_the_same_instant(storage):
    init = ch.create_initial(storage, "p", 2)
    v1a = ch.apply_children(init, ch.split_node(init, init.nodes[0]), "20240101000000001")
    v1b = ch.apply_children(init, ch.split_node(init, init.nodes[1]), "20240101000000001")
    ch.save(storage, v1a)
    ch.save(storage, v1b)
    assert ch.load_file(storage, "p", "20240101000000001") == v1b
