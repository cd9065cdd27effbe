"""Where a run's Spark application runs, sized to its backlog (``cluster.local_max_records``,
``cluster.records_per_worker``): in local mode inside the driver, or on the run's own standalone
cluster with as many workers as the backlog needs. Pure; the ``start_cluster`` task acts on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from include.config import ClusterConfig


@dataclass(frozen=True)
class ClusterChoice:
    """``local`` (no cluster; ``master`` is ``local[k]``) or ``cluster`` with ``workers`` workers, and why."""

    mode: str
    workers: int
    cores: int
    reason: str

    @property
    def local_master(self) -> str:
        """The master URL of local mode."""
        return f"local[{self.cores}]"


def choose(cluster: ClusterConfig, records: int | None, cpu_count: int) -> ClusterChoice:
    """The run's cluster for a backlog of ``records`` (``None``: not known, so the full cluster)."""
    if cluster.local_max_records and records is not None and records <= cluster.local_max_records:
        cores = max(1, min(cluster.workers * cluster.worker_cores, cpu_count))
        return ClusterChoice("local", 0, cores, f"local[{cores}] in the driver: backlog {records} records <= "
                                                f"cluster.local_max_records {cluster.local_max_records}")  # fmt: skip
    if records is None:
        why = "backlog not known"
    elif cluster.local_max_records:
        why = f"backlog {records} records > cluster.local_max_records {cluster.local_max_records}"
    else:
        why = f"backlog {records} records"
    if cluster.records_per_worker and records is not None:
        workers = max(1, min(cluster.workers, math.ceil(records / cluster.records_per_worker)))
        why += (f"; {workers} of at most {cluster.workers} worker(s) at cluster.records_per_worker "
                f"{cluster.records_per_worker}")  # fmt: skip
    else:
        workers = cluster.workers
        why += f"; cluster.workers {workers}"
    return ClusterChoice("cluster", workers, workers * cluster.worker_cores, f"standalone cluster: {why}")
