"""The run lock on an object store: a real S3-compatible server (s3proxy), reached as an Airflow ``aws``
connection describes it, with the lock's conditional creates racing between two processes."""

from __future__ import annotations

import json
import uuid

import pytest

from include.orchestration import pipeline_lock, run_lock
from include.readers.object_store import s3_settings
from include.tooling import local_s3
from tests.lock_race import Rounds, assert_creates_once, assert_one_winner_per_round

# Full tier: the first use resolves s3proxy (about 100 MB from Maven) on a fresh machine.
pytestmark = [pytest.mark.integration, pytest.mark.full]


@pytest.fixture
def bucket(s3_server, monkeypatch) -> str:
    """A new bucket, and the Airflow connection ``aws_test`` to the server (an environment variable, as
    a deployment may define it)."""
    monkeypatch.setenv("AIRFLOW_CONN_AWS_TEST", json.dumps(s3_server.connection()))
    return s3_server.create_bucket(f"b-{uuid.uuid4().hex[:12]}")


def _options(s3_server) -> tuple[dict[str, str], dict[str, str]]:
    return s3_settings("aws_test").obstore_args()


def test_the_store_refuses_a_second_create_of_a_name_and_lists_what_was_written(s3_server, bucket):
    folder = run_lock.ObjectStoreFolder(f"{bucket}/orders/_lock", *_options(s3_server))
    assert folder.names() is None
    assert_creates_once(folder, emptied=None)  # a prefix is gone with its last object


def test_a_wrong_secret_is_refused_by_the_store(s3_server, bucket):
    config, client = _options(s3_server)
    folder = run_lock.ObjectStoreFolder(f"{bucket}/orders/_lock", {**config, "aws_secret_access_key": "nope"}, client)
    with pytest.raises(Exception, match="403|SignatureDoesNotMatch"):
        folder.create("00000000000000000001.json", "{}")


def test_two_processes_racing_for_an_object_store_lock_never_both_win(s3_server, bucket):
    assert_one_winner_per_round(Rounds(bucket, *_options(s3_server)), rounds=6, attempts=15)


def test_a_pipeline_with_its_lock_on_the_store_takes_waits_and_releases(s3_server, bucket, make_pipeline):
    from airflow.sdk.log import _secrets_masker

    cfg = make_pipeline(tables={"lakehouse_root": f"{bucket}/lake", "storage_connection_id": "aws_test"})
    # Airflow's own masker, emptied first so that what an earlier test masked in this process does not count.
    masker = _secrets_masker()
    masker.reset_masker()
    line = f"the key is {local_s3.SECRET_KEY}"
    assert masker.redact(line) == line
    # What the run's state is comes from Airflow's metadata database in a task; here the lock's rules alone
    # are under test, so the two runs' states are given (test_shared_lock.py reads them from real runs).
    states = {"scheduled__1": "running"}

    def run_state(_dag: str, run: str) -> str | None:
        return states.get(run)

    assert pipeline_lock.take_lock(cfg, dag_id="orders", run_id="scheduled__1", run_state=run_state).epoch == 1
    assert masker.redact(line) == "the key is ***", "the store's secret is not masked in task logs"
    waiting = pipeline_lock.take_lock(cfg, dag_id="orders", run_id="backfill__2", run_state=run_state)
    assert waiting.epoch is None and waiting.holder["run_id"] == "scheduled__1"
    assert f"holds the lock in {bucket}/lake/{cfg.name}/_lock (epoch 1" in waiting.message
    lock = run_lock.lock_folder(cfg)
    assert run_lock.release(lock, run_id="scheduled__1") is True
    assert pipeline_lock.take_lock(cfg, dag_id="orders", run_id="backfill__2", run_state=run_state).epoch == 2
    assert sorted(lock.names()) == ["00000000000000000001.json", "00000000000000000001.released",
                                    "00000000000000000002.json"]  # fmt: skip
