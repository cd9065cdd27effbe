"""Each job's contract: its arguments and its summary survive the trip to the job and back."""

from __future__ import annotations

import json

import pytest

from include.contract import jobs
from include.contract.errors import (
    JobConfigError,
    MaintenanceConfigError,
    PipelineError,
    StepsFileError,
    TransformError,
)
from include.contract.jobs import BackfillArgs, IngestArgs, MaintainArgs, StepsArgs, TransformArgs
from include.contract.summaries import (
    BackfillSummary,
    IngestSummary,
    MaintainSummary,
    TransformSummary,
    ingest_step_summary,
)

ARGS = [
    IngestArgs(pipeline="orders", bootstrap_servers="b1:9092", topics=("a", "b.c"), bronze_path="/lake/b",
               checkpoint_root="/lake/cp", starting_offsets="latest", max_offsets_per_trigger=500,
               run_id="-scheduled__2026", run_type="rebuild_checkpoint", summary_path="/tmp/s.json",
               table_property=("delta.logRetentionDuration=interval 30 days", "k=v"), admin_timeout_s=2.5,
               kafka_options_file="/tmp/k.json", preflight_file="/tmp/p.json",
               rebuild_checkpoint="asked by ann: --broken"),
    IngestArgs(pipeline="p", bootstrap_servers="b", topic_pattern="-weird.*", bronze_path="x", checkpoint_root="y"),
    BackfillArgs(pipeline="orders", bootstrap_servers="b", bronze_path="/lake/b", request_file="/tmp/r.json",
                 run_id="r", run_type="backfill", summary_path="/tmp/s.json", kafka_options_file="/tmp/k.json"),
    TransformArgs(pipeline="orders", bronze_path="b", silver_path="s", quarantine_path="q", checkpoint_root="c",
                  spec_file="spec.json", run_id="r", summary_path="s.json", max_files_per_trigger=3,
                  table_property=("a=b",), registry_file="reg.json"),
    MaintainArgs(pipeline="orders", table=("bronze=/b", "silver=/s"), zorder_by=("silver=id,ts",), optimize=False,
                 checkpoint=False, run_id="r", summary_path="m.json"),
    MaintainArgs(pipeline="orders", table=("bronze=/b",)),
    StepsArgs(steps_file="/run/steps.json"),
]  # fmt: skip


@pytest.mark.parametrize("args", ARGS, ids=lambda a: f"{type(a).__name__}")
def test_every_jobs_arguments_round_trip(args):
    argv = args.to_args()
    assert all(a.startswith("--") for a in argv)  # --flag=value: a value starting with '-' stays a value
    assert type(args).from_args(argv) == args


def test_specific_fields_survive_as_their_types():
    back = IngestArgs.from_args(ARGS[0].to_args())
    assert back.topics == ("a", "b.c") and back.max_offsets_per_trigger == 500 and back.admin_timeout_s == 2.5
    assert back.rebuild_checkpoint == "asked by ann: --broken" and back.run_id == "-scheduled__2026"
    maintain = MaintainArgs.from_args(ARGS[4].to_args())
    assert (maintain.optimize, maintain.vacuum, maintain.checkpoint) == (False, True, False)
    assert "--no-optimize" in ARGS[4].to_args() and "--no-vacuum" not in ARGS[4].to_args()


@pytest.mark.parametrize(("cls", "argv", "error", "match"), [
    (IngestArgs, ["--pipeline=p", "--bronze-path=x", "--checkpoint-root=y"], JobConfigError,
     "the following arguments are required: --bootstrap-servers .--help lists the arguments of kafka_to_bronze"),
    (IngestArgs, ["--pipeline=p", "--bootstrap-servers=b", "--bronze-path=x", "--checkpoint-root=y",
                  "--max-offsets-per-trigger=0"], JobConfigError, "--max-offsets-per-trigger: expected a positive integer"),
    (IngestArgs, ["--pipeline=p", "--bootstrap-servers=b", "--bronze-path=x", "--checkpoint-root=y",
                  "--run-type=adhoc"], JobConfigError, "--run-type: invalid choice: 'adhoc'"),
    (BackfillArgs, ["--pipeline=p", "--bootstrap-servers=b", "--bronze-path=x", "--request-file=r",
                    "--run-type=scheduled"], JobConfigError, "--run-type: invalid choice"),
    (TransformArgs, ["--pipeline=p"], TransformError, "required: --bronze-path"),
    (MaintainArgs, ["--pipeline=p"], MaintenanceConfigError, "required: --table"),
    (StepsArgs, ["--file=x"], StepsFileError, "required: --steps-file"),
])  # fmt: skip
def test_a_malformed_command_line_raises_the_jobs_error_naming_the_argument(cls, argv, error, match):
    with pytest.raises(error, match=match):
        cls.from_args(argv)


def test_ingest_checks_span_flags():
    base = {"pipeline": "p", "bootstrap_servers": "b", "bronze_path": "x", "checkpoint_root": "y"}
    with pytest.raises(JobConfigError, match="exactly one of --topics"):
        IngestArgs(**base).check()
    with pytest.raises(JobConfigError, match="--pipeline: expected letters"):
        IngestArgs(**{**base, "pipeline": "-bad"}, topics=("t",)).check()


def test_app_ids_keep_the_spelling_existing_tables_carry():
    # Tables written by earlier versions hold txn actions under these ids; a new spelling would lose them.
    from include.contract import table_stand

    assert jobs.bronze_app_id("orders", 3) == "kafka-delta-elt:orders:bronze:epoch-3"
    assert table_stand.next_app_id("orders", "t", 0).startswith(jobs.bronze_app_prefix("orders") + ":")
    assert jobs.silver_app_id("orders", 2) == "kde-silver.orders.e2"
    assert jobs.quarantine_app_id("orders", 2) == "kde-quarantine.orders.e2"


INGEST = {"pipeline": "orders", "run_id": "r1", "run_type": "manual", "epoch": 2, "rows": 7, "commits": 1,
          "batches": [{"batch_id": 0, "rows": 7}], "bronze_version": 4, "duration_s": 1.5,
          "partitions": {"t": {"0": {"from": 10, "until": 17, "rows": 7}}}, "checkpoint_rebuilt": None,
          "position_set": None, "phases_s": {"stream": 1.0}, "start_offsets": {"t": {"0": 10}}}  # fmt: skip
BACKFILL = {"kind": "backfill", "run_id": "r1", "read": 5, "inserted": 2, "present": 3, "rows": 2,
            "ranges": [{"topic": "t", "partition": 0, "from": 0, "until": 5}], "bronze_version": None,
            "duration_s": 0.5, "notes": ["t-0: cut"], "commits": 1,
            "partitions": {"t": {"0": {"from": 0, "until": 5, "rows": 2}}}}  # fmt: skip
TRANSFORM = {"run_id": "r1", "epoch": 0, "read": 9, "upserted": 5, "deleted": 1, "quarantined": 2, "superseded": 1,
             "silver_version": 3, "duration_s": 2.0, "quarantine_fields": {"ts": 2},
             "fields_added": [{"name": "x", "type": "string"}], "fields_ignored": {"y": "not in spec"},
             "checkpoint_rebuilt": None, "value_schema": None, "bronze_start": {"version": 1, "index": -1}}  # fmt: skip
MAINTAIN = {"pipeline": "orders", "run_id": "r1", "tables": {"bronze": {"files_before": 9, "files_after": 1}}}


@pytest.mark.parametrize(("cls", "data"), [(IngestSummary, INGEST), (BackfillSummary, BACKFILL),
                                           (TransformSummary, TRANSFORM), (MaintainSummary, MAINTAIN)])  # fmt: skip
def test_every_jobs_summary_round_trips_unchanged_on_the_wire(cls, data):
    summary = cls.from_json(json.loads(json.dumps(data)))
    assert summary.to_json() == data
    assert cls.from_json(summary.to_json()) == summary


def test_the_runs_record_reads_a_partial_summary_without_failing():
    partial = IngestSummary.from_json({"rows": 5}, strict=False)
    assert (partial.rows, partial.epoch, partial.duration_s, partial.partitions) == (5, None, None, {})
    with pytest.raises(PipelineError, match="field 'duration_s' is None; expected int or float"):
        IngestSummary.from_json({"rows": 5})


def test_summary_fields_are_typed():
    assert IngestSummary.from_json(INGEST).partitions["t"]["0"]["rows"] == 7
    assert ingest_step_summary(BACKFILL).inserted == 2
    assert isinstance(ingest_step_summary(INGEST), IngestSummary)
    assert TransformSummary.from_json(TRANSFORM).fields_ignored == {"y": "not in spec"}


@pytest.mark.parametrize(("cls", "data", "field"), [
    (IngestSummary, {**INGEST, "rows": "7"}, "rows"),
    (IngestSummary, {k: v for k, v in INGEST.items() if k != "epoch"}, "epoch"),
    (TransformSummary, {**TRANSFORM, "read": True}, "read"),
    (MaintainSummary, {"run_id": "r"}, "tables"),
])  # fmt: skip
def test_a_malformed_summary_names_the_field(cls, data, field):
    with pytest.raises(PipelineError, match=f"field '{field}'"):
        cls.from_json(data)
