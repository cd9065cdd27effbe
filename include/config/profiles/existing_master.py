"""Profile ``existing_master``: client mode to a running cluster named by a Spark connection."""

from __future__ import annotations

from typing import Any

from include.config.errors import _problem, _suffix
from include.config.profiles.base import ClusterProfileRules

#: What ``existing_master`` (client mode) may set in ``cluster.kubernetes``: the executors' image and namespace.
KUBERNETES_CLIENT_KEYS = ("image", "namespace")


class ExistingMasterRules(ClusterProfileRules):
    """A master connection; ``cluster.kubernetes`` only for a ``k8s://`` master's executor pods (image, namespace)."""

    name = "existing_master"
    description = (
        "existing_master: submit in client mode (the driver runs on the Airflow worker) to the running cluster "
        "named by master_connection_id (spark://, yarn or k8s://); no cluster is started or stopped."
    )
    kubernetes_required = ("image",)

    def check_kubernetes_keys(self, k8s: dict[str, Any]) -> None:
        for key in k8s:
            if key not in KUBERNETES_CLIENT_KEYS:
                raise _problem(
                    f"expected only {', '.join(KUBERNETES_CLIENT_KEYS)} with profile existing_master "
                    f"(client mode: the driver runs on the Airflow worker), got {key!r}; "
                    "it applies to profile kubernetes",
                    f".kubernetes{_suffix(key)}",
                )
