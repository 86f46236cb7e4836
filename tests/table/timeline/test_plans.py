"""Table-service plans and metadata round trip through Avro container files as Hudi stores them."""

from __future__ import annotations

import io
import json

import fastavro
import pytest

from table.timeline.instant_avro import SCHEMA_DIR, deserialize_plan, schema, serialize_plan

pytestmark = pytest.mark.unit

TS = "20250618054711154"
ROLLBACK_PLAN = {
    "instantToRollback": {"commitTime": TS, "action": "deltacommit"},
    "RollbackRequests": [
        {
            "partitionPath": "city=chennai",
            "fileId": "f1-0",
            "latestBaseInstant": "20250618054700000",
            "filesToBeDeleted": ["city=chennai/.f1-0_20250618054700000.log.2_0-26-85"],
            "logBlocksToBeDeleted": None,
        }
    ],
    "version": 1,
}
ROLLBACK_METADATA = {
    "startRollbackTime": "20250618054799999",
    "timeTakenInMillis": 12,
    "totalFilesDeleted": 1,
    "commitsRollback": [TS],
    "partitionMetadata": {
        "city=chennai": {
            "partitionPath": "city=chennai",
            "successDeleteFiles": ["city=chennai/.f1-0_20250618054700000.log.2_0-26-85"],
            "failedDeleteFiles": [],
            "rollbackLogFiles": None,
            "logFilesFromFailedCommit": {"city=chennai/.f1-0_20250618054700000.log.2_0-26-85": 1024},
        }
    },
    "version": 1,
    "instantsRollback": [{"commitTime": TS, "action": "deltacommit"}],
}
COMPACTION_PLAN = {
    "operations": [
        {
            "baseInstantTime": "20250618054700000",
            "deltaFilePaths": [
                ".f1-0_20250618054700000.log.1_0-26-85",
                ".f1-0_20250618054700000.log.2_0-27-86",
            ],
            "dataFilePath": "f1-0_0-13-60_20250618054700000.parquet",
            "fileId": "f1-0",
            "partitionPath": "city=chennai",
            "metrics": {"TOTAL_LOG_FILES": 2.0, "TOTAL_IO_MB": 1.5},
            "bootstrapFilePath": None,
        }
    ],
    "extraMetadata": None,
    "version": 2,
    "strategy": None,
    "preserveHoodieMetadata": None,
}
CLUSTERING_PLAN = {
    "operationType": "CLUSTER",
    "clusteringPlan": {
        "inputGroups": [
            {
                "slices": [
                    {
                        "dataFilePath": "f1-0_0-13-60_20250618054700000.parquet",
                        "deltaFilePaths": [".f1-0_20250618054700000.log.1_0-26-85"],
                        "fileId": "f1-0",
                        "partitionPath": "city=chennai",
                        "bootstrapFilePath": "",
                        "version": 1,
                    }
                ],
                "metrics": {"TOTAL_FILE_SIZE": 4096.0},
                "numOutputFileGroups": 2,
                "extraMetadata": {
                    "clustering.group.partition": "city=chennai",
                    "clustering.group.child.node": json.dumps([{"value": 1, "fileIdPrefix": "a", "tag": "REPLACE"}]),
                    "clustering.group.sequence.no": "3",
                },
                "version": 1,
            }
        ],
        "strategy": {
            "strategyClassName": "org.apache.hudi.client.clustering.run.strategy."
            "SparkConsistentBucketClusteringExecutionStrategy",
            "strategyParams": {},
            "version": 1,
        },
        "extraMetadata": {},
        "version": 1,
        "preserveHoodieMetadata": True,
    },
    "extraMetadata": {},
    "version": 1,
}
CLEANER_PLAN = {
    "earliestInstantToRetain": {"timestamp": TS, "action": "deltacommit", "state": "COMPLETED"},
    "lastCompletedCommitTimestamp": "20250618054799999",
    "policy": "KEEP_LATEST_COMMITS",
    "filesToBeDeletedPerPartition": {},
    "version": 2,
    "filePathsToBeDeletedPerPartition": {
        "city=chennai": [
            {
                "filePath": "/t/city=chennai/f1-0_0-13-60_20250618054700000.parquet",
                "isBootstrapBaseFile": False,
            }
        ]
    },
    "partitionsToBeDeleted": [],
    "extraMetadata": None,
}
CLEAN_METADATA = {
    "policy": "",
    "startCleanTime": "20250618054800000",
    "timeTakenInMillis": 7,
    "totalFilesDeleted": 1,
    "earliestCommitToRetain": TS,
    "lastCompletedCommitTimestamp": "20250618054799999",
    "partitionMetadata": {
        "city=chennai": {
            "partitionPath": "city=chennai",
            "policy": "KEEP_LATEST_COMMITS",
            "deletePathPatterns": ["f1-0_0-13-60_20250618054700000.parquet"],
            "successDeleteFiles": ["f1-0_0-13-60_20250618054700000.parquet"],
            "failedDeleteFiles": [],
            "isPartitionDeleted": False,
        }
    },
    "version": 2,
    "bootstrapPartitionMetadata": {},
    "extraMetadata": None,
}
PLANS = {
    "HoodieRollbackPlan": ROLLBACK_PLAN,
    "HoodieRollbackMetadata": ROLLBACK_METADATA,
    "HoodieCompactionPlan": COMPACTION_PLAN,
    "HoodieRequestedReplaceMetadata": CLUSTERING_PLAN,
    "HoodieCleanerPlan": CLEANER_PLAN,
    "HoodieCleanMetadata": CLEAN_METADATA,
}


@pytest.mark.parametrize("name", sorted(PLANS))
def test_plans_round_trip_through_avro(name):
    assert deserialize_plan(name, serialize_plan(name, PLANS[name])) == PLANS[name]


@pytest.mark.parametrize("name", sorted(PLANS))
def test_plan_files_are_avro_containers_with_one_record_and_a_standalone_schema(name):
    reader = fastavro.reader(io.BytesIO(serialize_plan(name, PLANS[name])))
    assert reader.codec == "null"
    embedded = json.loads(reader.metadata["avro.schema"])
    assert embedded["name"] == f"org.apache.hudi.avro.model.{name}"
    fastavro.parse_schema(embedded)  # no reference left to a record defined elsewhere
    assert len(list(reader)) == 1


def test_absent_optional_fields_take_hudis_defaults():
    plan = deserialize_plan("HoodieRollbackPlan", serialize_plan("HoodieRollbackPlan", {}))
    assert plan == {"instantToRollback": None, "RollbackRequests": None, "version": 1}
    request = {"partitionPath": "p"}
    plan = deserialize_plan("HoodieRollbackPlan", serialize_plan("HoodieRollbackPlan", {"RollbackRequests": [request]}))
    assert plan["RollbackRequests"][0]["filesToBeDeleted"] == []


def test_a_record_missing_a_required_field_is_refused():
    with pytest.raises(ValueError, match="timeTakenInMillis"):
        serialize_plan("HoodieRollbackMetadata", {"startRollbackTime": TS})


def test_a_plan_written_with_another_schema_version_reads_with_defaults():
    """A Hudi that writes fields we do not know, and lacks ones we added, still reads."""
    older = schema("HoodieCompactionPlan")
    older = {
        **older,
        "fields": [f for f in older["fields"] if f["name"] not in ("strategy", "preserveHoodieMetadata")],
    }
    operation = older["fields"][0]["type"][1]["items"]
    operation["fields"] = [
        *operation["fields"],
        {"name": "futureField", "type": ["null", "string"], "default": None},
    ]
    out = io.BytesIO()
    record = {"operations": [{"baseInstantTime": TS, "fileId": "f1-0", "futureField": "x"}], "version": 2}
    fastavro.writer(out, fastavro.parse_schema(older), [record])
    plan = deserialize_plan("HoodieCompactionPlan", out.getvalue())
    assert plan["operations"][0]["fileId"] == "f1-0"
    assert "futureField" not in plan["operations"][0]
    assert plan["strategy"] is None and plan["preserveHoodieMetadata"] is None


def test_schema_files_are_plain_json_named_after_their_record():
    for path in SCHEMA_DIR.glob("*.avsc"):
        definition = json.loads(path.read_text())
        assert definition["name"] == path.stem
        assert definition["namespace"] == "org.apache.hudi.avro.model"


def test_unknown_schema_and_empty_content_are_errors():
    with pytest.raises(KeyError):
        serialize_plan("HoodieNoSuchPlan", {})
    with pytest.raises(ValueError, match="empty content"):
        deserialize_plan("HoodieCleanerPlan", b"")


def _union_defaults(node, found: list) -> None:
    """(record, field, first branch, default) of every union field with a default, recursively."""
    if isinstance(node, list):
        for branch in node:
            _union_defaults(branch, found)
    elif isinstance(node, dict):
        for field in node.get("fields", ()):
            if isinstance(field["type"], list) and "default" in field:
                first = field["type"][0]
                found.append(
                    (node["name"], field["name"], first if isinstance(first, str) else first["type"], field["default"])
                )
            _union_defaults(field["type"], found)
        for key in ("items", "values"):
            _union_defaults(node.get(key), found)


_DEFAULT_FITS = {
    "null": lambda d: d is None,
    "int": lambda d: type(d) is int,
    "long": lambda d: type(d) is int,
    "string": lambda d: isinstance(d, str),
    "boolean": lambda d: isinstance(d, bool),
    "double": lambda d: isinstance(d, (int, float)),
    "map": lambda d: isinstance(d, dict),
    "array": lambda d: isinstance(d, list),
}


def test_every_union_default_fits_its_first_branch_as_apache_hudis_avro_parser_demands():
    # Hudi parses the schema in an archived timeline block's header with default validation on:
    # one misfit default made Apache Hudi fail on our archived timeline.
    found: list = []
    for path in sorted(SCHEMA_DIR.glob("*.avsc")):
        _union_defaults(json.loads(path.read_text()), found)
    misfits = [f for f in found if not _DEFAULT_FITS.get(f[2], lambda d: isinstance(d, dict))(f[3])]
    assert len(found) > 50 and misfits == []
