"""The run lock on HDFS: a real NameNode and DataNode (tests/hadoop_cluster.py), reached with ``hdfs-native``
as the lock reaches it, with the lock's exclusive creates racing between two processes."""

from __future__ import annotations

import uuid

import pytest

from include.orchestration import run_lock
from tests.lock_race import Rounds, race_for_lock

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
    assert folder.create("00000000000000000001.json", '{"run_id": "r1"}') is True
    assert folder.create("00000000000000000001.json", '{"run_id": "r2"}') is False
    assert folder.read("00000000000000000001.json") == '{"run_id": "r1"}'
    assert folder.names() == {"00000000000000000001.json"}
    folder.remove("00000000000000000001.json")
    folder.remove("00000000000000000001.json")  # gone already: no error
    assert folder.names() == set()


def test_two_processes_racing_for_an_hdfs_lock_never_both_win(root):
    rounds = 6
    folder_of = Rounds(root)
    winners = race_for_lock(folder_of, rounds=rounds, attempts=15)
    for n in range(rounds):
        assert len(winners[n]) == 1, f"round {n}: {winners[n]}"
        assert run_lock.holder(folder_of(n))["run_id"] == winners[n][0]


def test_a_lock_path_on_hdfs_is_kept_there(root, make_pipeline):
    cfg = make_pipeline(tables={"lakehouse_root": f"{root}/lake"})
    folder = run_lock.lock_folder(cfg)
    assert isinstance(folder, run_lock.HdfsFolder) and str(folder) == f"{root}/lake/{cfg.name}/_lock"
    taken = run_lock.acquire(folder, dag_id=cfg.name, run_id="r1", run_state=lambda _d, _r: "running")
    assert taken["run_id"] == "r1" and run_lock.holder(folder)["run_id"] == "r1"
    assert run_lock.release(folder, run_id="r1") is True
    assert run_lock.holder(folder) is None
