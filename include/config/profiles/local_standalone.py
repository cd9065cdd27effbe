"""Profile ``local_standalone``: each run starts its own Spark standalone cluster on this machine."""

from __future__ import annotations

from typing import Any

from include.config.errors import _invalid
from include.config.profiles.base import ClusterProfileRules


class LocalStandaloneRules(ClusterProfileRules):
    """No master connection and no ``cluster.kubernetes``: the cluster is the run's own, sized to its backlog."""

    name = "local_standalone"
    description = (
        "local_standalone (default): each run starts a Spark standalone master and cluster.workers workers on "
        "127.0.0.1 and stops them afterwards (setup and teardown tasks)."
    )
    sizes_to_backlog = True

    def check_master(self, data: dict[str, Any]) -> None:
        master = data.get("master_connection_id")
        if master is not None:
            expected = (
                "no master connection with profile local_standalone (set cluster.profile: existing_master "
                "or kubernetes to use one)"
            )
            raise _invalid(expected, master, at=".master_connection_id")

    def check_kubernetes(self, k8s: Any) -> None:
        expected = "no kubernetes section with profile local_standalone (it runs on this machine)"
        raise _invalid(expected, k8s, at=".kubernetes")
