"""Tests of spark_jobs/job_common.py's parts that need no SparkSession: arguments, summaries, failures, failpoints.

``job_main`` runs with ``build_session`` replaced by a stand-in (no JVM); the
Delta commits with txn actions run for real in the integration tests.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from include import settings
from include.contract.errors import ContractError, DeltaCommitError, PipelineError
from include.contract.failure import FAILURE_VERSION, read_failure
from include.contract.offsets import OffsetError
from spark_jobs import job_common, table_properties


def _failure(data: dict) -> PipelineError:
    """The error of the failure envelope ``data``."""
    failure = read_failure(data)
    assert failure is not None, data
    return failure.error()


def test_write_failure_puts_the_error_class_and_fields_in_the_summary_file(tmp_path):
    path = tmp_path / "ingest-summary.json"
    cfg = SimpleNamespace(pipeline="orders", run_id="r1", summary_path=str(path))
    job_common.write_failure("kafka_to_bronze", cfg, OffsetError("refusing", topic="t", partition=4, offsets=(9, 8)))
    written = json.loads(path.read_text())
    assert written["failure_version"] == FAILURE_VERSION and (written["run_id"], written["job"]) == ("r1", "kafka_to_bronze")
    back = _failure(written)
    assert type(back) is OffsetError and (back.partition, back.offsets, back.pipeline) == (4, (9, 8), "orders")


def test_a_foreign_failure_is_written_under_the_base_with_its_class_name(tmp_path):
    path = tmp_path / "s.json"
    job_common.write_failure("maintain_tables", SimpleNamespace(pipeline="p", run_id="r", summary_path=str(path)),
                             KeyError("x"))  # fmt: skip
    back = _failure(json.loads(path.read_text()))
    assert type(back) is PipelineError and str(back) == "KeyError: 'x'"


# --------------------------------------------------------------------------- arguments and summaries


def test_table_properties_are_key_value_pairs_stripped():
    assert job_common.parse_table_properties(
        ["delta.logRetentionDuration = interval 30 days", "delta.checkpointInterval=10"]) == {
        "delta.logRetentionDuration": "interval 30 days", "delta.checkpointInterval": "10"}  # fmt: skip
    assert job_common.parse_table_properties([]) == {}


@pytest.mark.parametrize("pair", ["novalue", "=x", "k=", "k= ", "k='v'", "k=`v`"])
def test_a_table_property_without_a_key_or_value_or_with_quotes_is_refused_naming_the_flag(pair):
    with pytest.raises(ValueError, match=f"^--silver-property: expected KEY=VALUE without quotes .*got {pair!r}$"):
        job_common.parse_table_properties(["a=b", pair], flag="--silver-property")


def test_a_summary_is_written_as_json_with_its_folder_and_nowhere_without_a_path(tmp_path):
    path = tmp_path / "runs" / "r1" / "summary.json"
    job_common.write_summary(str(path), {"rows": 3, "batches": [1]})
    assert json.loads(path.read_text()) == {"rows": 3, "batches": [1]}
    job_common.write_summary(None, {"rows": 3})
    job_common.write_summary("", {"rows": 3})
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == ["summary.json"]


# --------------------------------------------------------------------------- failpoints


@pytest.mark.parametrize(("point", "killed"), [
    (None, []),
    ("kill-after-bronze-commit:2", []),  # another batch
    ("kill-after-silver-commit:1", []),  # another stage
    ("kill-after-bronze-commit:1", ["group"]),
    ("kill-driver-after-bronze-commit:1", ["driver"]),
])  # fmt: skip
def test_a_failpoint_kills_the_job_only_after_its_stage_and_batch(monkeypatch, point, killed):
    kills: list[str] = []
    monkeypatch.setattr(job_common.os, "kill", lambda pid, sig: kills.append("driver"))
    monkeypatch.setattr(job_common.os, "killpg", lambda pgid, sig: kills.append("group"))
    if point is None:
        monkeypatch.delenv(settings.FAILPOINT_ENV, raising=False)
    else:
        monkeypatch.setenv(settings.FAILPOINT_ENV, point)
    job_common.failpoint("bronze", 1)
    # The real driver kill never returns; stood in for, it falls through to the group kill.
    assert kills == (["driver", "group"] if killed == ["driver"] else killed)


# --------------------------------------------------------------------------- a Delta command's commit metadata


class _Conf:
    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def set(self, key: str, value: str) -> None:
        self.values[key] = value

    def unset(self, key: str) -> None:
        self.values.pop(key, None)


def test_user_metadata_and_txn_are_session_settings_only_while_the_command_runs():
    spark = SimpleNamespace(conf=_Conf())
    seen: list[dict] = []
    table_properties.with_user_metadata(spark, '{"m": 1}', lambda: seen.append(dict(spark.conf.values)), txn=("app", 7))
    assert seen == [{"spark.databricks.delta.commitInfo.userMetadata": '{"m": 1}',
                     "spark.databricks.delta.write.txnAppId": "app",
                     "spark.databricks.delta.write.txnVersion": "7"}]  # fmt: skip
    assert spark.conf.values == {}

    def fails() -> None:
        raise RuntimeError("merge failed")

    with pytest.raises(RuntimeError, match="merge failed"):
        table_properties.with_user_metadata(spark, "m", fails)
    assert spark.conf.values == {}, "a failed command must not leave its metadata on the next commit"


# --------------------------------------------------------------------------- job_main


class _Session:
    stopped = 0

    def stop(self) -> None:
        self.stopped += 1


class _BadArgument(Exception):
    pass


def _step(tmp_path, run) -> job_common.JobStep:
    def parse(args: list[str]) -> SimpleNamespace:
        if args != ["--pipeline=orders"]:
            raise _BadArgument(f"unexpected {args}")
        return SimpleNamespace(pipeline="orders", run_id="r1", summary_path=str(tmp_path / "summary.json"))

    return job_common.JobStep("demo_job", parse=parse, bad_argument=_BadArgument, run=run,
                              describe=lambda result: f"rows={result}")  # fmt: skip


@pytest.fixture
def sessions(monkeypatch) -> list[_Session]:
    made: list[_Session] = []
    monkeypatch.setattr(job_common, "build_session", lambda name: made.append(_Session()) or made[-1])
    return made


def test_job_main_exits_2_on_a_bad_argument_before_any_session(tmp_path, sessions, capsys):
    assert job_common.job_main(_step(tmp_path, lambda spark, cfg: 0), ["--nope"]) == 2
    assert "demo_job: bad argument: unexpected ['--nope']" in capsys.readouterr().err
    assert sessions == []


def test_job_main_exits_0_with_the_result_line_and_stops_the_session(tmp_path, sessions, capsys):
    assert job_common.job_main(_step(tmp_path, lambda spark, cfg: 5), ["--pipeline=orders"]) == 0
    assert "demo_job: pipeline=orders rows=5" in capsys.readouterr().out
    assert [s.stopped for s in sessions] == [1]


@pytest.mark.parametrize("error", [OffsetError, ContractError, DeltaCommitError])
def test_job_main_exits_1_writing_any_failure_of_the_family_as_data_and_stops_the_session(tmp_path, sessions,
                                                                                         capsys, error):  # fmt: skip
    def run(spark, cfg):
        raise error("batch 2 starts at 9", topic="t", partition=0)

    assert job_common.job_main(_step(tmp_path, run), ["--pipeline=orders"]) == 1
    assert "demo_job: t-0: batch 2 starts at 9" in capsys.readouterr().err
    back = _failure(json.loads((tmp_path / "summary.json").read_text()))
    assert type(back) is error and back.pipeline == "orders" and (back.topic, back.partition) == ("t", 0)
    assert [s.stopped for s in sessions] == [1]


def test_job_main_lets_an_unexpected_error_through_and_still_stops_the_session(tmp_path, sessions):
    def run(spark, cfg):
        raise KeyError("bug")

    with pytest.raises(KeyError):
        job_common.job_main(_step(tmp_path, run), ["--pipeline=orders"])
    assert [s.stopped for s in sessions] == [1] and not (tmp_path / "summary.json").exists()


def test_with_a_state_folder_each_failpoint_fires_its_times_then_lets_the_retried_try_pass(monkeypatch, tmp_path):
    # Under a real scheduler the retried try runs in the same environment as the try the point killed.
    kills: list[int] = []
    monkeypatch.setattr(job_common.os, "kill", lambda pid, sig: None)
    monkeypatch.setattr(job_common.os, "killpg", lambda pgid, sig: kills.append(sig))
    monkeypatch.setenv(settings.FAILPOINT_ENV, "kill-driver-after-bronze-commit:1, kill-after-silver-commit:0*2")
    monkeypatch.setenv(settings.FAILPOINT_STATE_ENV, str(tmp_path / "fired"))
    for _ in range(3):
        job_common.failpoint("bronze", 1)
        job_common.failpoint("silver", 0)
    assert len(kills) == 3  # bronze once, silver twice
    assert sorted(p.name for p in (tmp_path / "fired").iterdir()) == [
        "kill-after-silver-commit@0.0", "kill-after-silver-commit@0.1", "kill-driver-after-bronze-commit@1.0"]


@pytest.mark.integration
def test_a_batch_frame_kept_in_local_mode_is_computed_once_and_its_blocks_are_freed_by_release(spark):
    # The frame is computed when kept: later reads start from its rows, not from its plan (a MERGE analyses its
    # source several times); release frees the blocks, which a local checkpoint's unpersist() would not.
    from pyspark.sql import functions as F

    context = spark.sparkContext
    before = context._jsc.getPersistentRDDs().size()
    kept: list = []
    frame = job_common.keep_for_batch(spark.range(50).selectExpr("id", "id % 3 AS k"), kept)
    assert kept == [frame]
    assert frame._jdf.queryExecution().analyzed().getClass().getSimpleName() == "LogicalRDD"
    assert context._jsc.getPersistentRDDs().size() == before + 1
    assert sorted(r["n"] for r in frame.groupBy("k").agg(F.count("*").alias("n")).collect()) == [16, 17, 17]
    job_common.release(kept)
    assert kept == [] and context._jsc.getPersistentRDDs().size() == before
