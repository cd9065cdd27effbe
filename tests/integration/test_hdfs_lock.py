"""The run lock on HDFS: a real NameNode and DataNode (tests/hadoop_cluster.py), reached with ``hdfs-native``
as the lock reaches it, with the lock's exclusive creates racing between two processes."""

from __future__ import annotations

import uuid

import pytest

from include.orchestration import run_lock
from tests.lock_race import Rounds, assert_creates_once, assert_one_winner_per_round

# Full tier: the first use resolves Hadoop's mini cluster (about 105 MB from Maven) on a fresh machine.
pytestmark = [pytest.mark.integration, pytest.mark.full]


@pytest.fixture
def root(hdfs_server) -> str:
    return f"{hdfs_server.uri}/locks-{uuid.uuid4().hex[:10]}"


def test_the_namenode_refuses_a_second_create_of_a_name_and_lists_what_was_written(root):
    folder = run_lock.HdfsFolder(f"{root}/orders/_lock")
    assert folder.names() is None
    folder.prepare()
    assert folder.names() == set()
    assert_creates_once(folder, emptied=set())  # the folder stays, as on a filesystem


def test_two_processes_racing_for_an_hdfs_lock_never_both_win(root):
    assert_one_winner_per_round(Rounds(root), rounds=6, attempts=15)


def test_a_lock_path_on_hdfs_is_kept_there(root, make_pipeline):
    cfg = make_pipeline(tables={"lakehouse_root": f"{root}/lake"})
    folder = run_lock.lock_folder(cfg)
    assert isinstance(folder, run_lock.HdfsFolder) and str(folder) == f"{root}/lake/{cfg.name}/_lock"
    taken = run_lock.acquire(folder, dag_id=cfg.name, run_id="r1", run_state=lambda _d, _r: "running")
    assert taken["run_id"] == "r1" and run_lock.holder(folder)["run_id"] == "r1"
    assert run_lock.release(folder, run_id="r1") is True
    assert run_lock.holder(folder) is None
