"""File names and partition metadata, checked against the files of Hudi-written sample tables."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from table.errors import FormatError
from table.storage.file_io import Storage
from table.storage.layout import (
    PARTITION_METADATA_FILE,
    BaseFileName,
    LogFileName,
    new_file_id_prefix,
    partition_depth,
    partition_file_path,
    write_partition_metadata,
    write_token,
)
from tests.support.hudi_samples import SAMPLES

pytestmark = pytest.mark.unit


SAMPLE_FILES = sorted(p for p in SAMPLES.glob("*/*/*") if p.is_file() and p.parent.name != ".hoodie")


def test_every_sample_data_file_name_parses_and_formats_back_unchanged():
    parsed = 0
    for path in SAMPLE_FILES:
        if path.name == PARTITION_METADATA_FILE:
            continue
        name = BaseFileName.parse(path.name) or LogFileName.parse(path.name)
        assert name is not None, path.name
        assert name.format() == path.name
        parsed += 1
    assert parsed == 8  # 6 base files and 2 log files across the two samples


def test_base_file_name_parts_are_file_id_write_token_and_instant():
    name = BaseFileName.parse("6d3d1d6e-2298-4080-a0c1-494877d6f40a-0_0-13-60_20250618054711154.parquet")
    assert name == BaseFileName("6d3d1d6e-2298-4080-a0c1-494877d6f40a-0", "0-13-60", "20250618054711154")


def test_log_file_name_parts_are_file_id_base_instant_version_and_write_token():
    name = LogFileName.parse(".6d3d1d6e-2298-4080-a0c1-494877d6f40a-0_20250618054711154.log.1_0-26-85")
    assert name == LogFileName("6d3d1d6e-2298-4080-a0c1-494877d6f40a-0", "20250618054711154", 1, "0-26-85")
    assert LogFileName("f-0", "20250618054711154", 12, "3-4-5").format() == ".f-0_20250618054711154.log.12_3-4-5"


@pytest.mark.parametrize(
    "name",
    [
        PARTITION_METADATA_FILE,
        "hoodie.properties",
        "f-0_0-13-60_20250618054711154.orc",
        "f-0_x-13-60_20250618054711154.parquet",  # write token is digits
        "f-0_0-13-60_2025061805471.parquet",  # instant is 14 or 17 digits
        "f_0_0-13-60_20250618054711154.parquet",  # '_' cannot be in a file id
        ".f-0_20250618054711154.log.1_0-26-85.cdc",  # CDC log
        ".f-0_20250618054711154.log.1",  # no write token
        ".f-0_20250618054711154.archive.1_0-26-85",
        ".f-0_20250618054711154.log.0_0-26-85",  # versions start at 1
        "f-0_20250618054711154.log.1_0-26-85",  # log files are hidden files
    ],
)
def test_other_names_are_rejected(name):
    assert BaseFileName.parse(name) is None
    assert LogFileName.parse(name) is None
    with pytest.raises(FormatError, match="not a base file name"):
        BaseFileName.of(name)  # a plan that names one where a base file must be
    with pytest.raises(FormatError, match="not a log file name"):
        LogFileName.of(name)


def test_invalid_parts_are_refused_when_building_a_name():
    with pytest.raises(ValueError, match="invalid file id"):
        BaseFileName("a_b", "0-1-2", "20250618054711154")
    with pytest.raises(ValueError, match="invalid write token"):
        BaseFileName("a", "0-1", "20250618054711154")
    with pytest.raises(ValueError, match="invalid base instant time"):
        LogFileName("a", "2025", 1, "0-1-2")


def test_write_token_is_partition_stage_and_attempt():
    assert write_token(0, 13, 60) == "0-13-60"
    with pytest.raises(ValueError, match="must not be negative"):
        write_token(-1, 0, 0)


def test_new_file_id_prefixes_are_distinct_uuids():
    prefixes = {new_file_id_prefix() for _ in range(100)}
    assert len(prefixes) == 100
    assert all(str(uuid.UUID(p)) == p for p in prefixes)


def test_partition_depth_counts_directory_levels():
    assert partition_depth("city=sao_paulo") == 1
    assert partition_depth("year=2025/month=06/day=18") == 3
    assert partition_depth("") == 0
    assert partition_file_path("", "x.parquet") == "x.parquet"
    assert partition_file_path("a/b", "x.parquet") == "a/b/x.parquet"


def test_partition_metadata_is_byte_for_byte_what_hudi_writes(tmp_path):
    sample = SAMPLES / "v6_trips_8i3d" / "city=san_francisco" / PARTITION_METADATA_FILE
    written_at = datetime(2025, 6, 18, 5, 47, 12, 345000, tzinfo=UTC)  # "Wed Jun 18 05:47:12 UTC 2025"
    storage = Storage(str(tmp_path))
    assert write_partition_metadata(storage, "city=san_francisco", "20250618054711154", now=written_at)
    assert (tmp_path / "city=san_francisco" / PARTITION_METADATA_FILE).read_bytes() == sample.read_bytes()


def test_partition_metadata_is_written_once(tmp_path):
    storage = Storage(str(tmp_path))
    assert write_partition_metadata(storage, "a/b", "20250618054711154")
    first = (tmp_path / "a" / "b" / PARTITION_METADATA_FILE).read_bytes()
    assert b"partitionDepth=2\n" in first
    assert not write_partition_metadata(storage, "a/b", "20250618054799999")
    assert (tmp_path / "a" / "b" / PARTITION_METADATA_FILE).read_bytes() == first
    assert [p.name for p in (tmp_path / "a" / "b").iterdir()] == [PARTITION_METADATA_FILE]
