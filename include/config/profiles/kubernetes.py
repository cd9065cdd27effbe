"""Profile ``kubernetes``: cluster mode to a ``k8s://`` master, the driver and executors in pods."""

from __future__ import annotations

from include.config.profiles.base import ClusterProfileRules


class KubernetesRules(ClusterProfileRules):
    """A master connection and ``cluster.kubernetes`` with the pods' image, namespace, account and volume."""

    name = "kubernetes"
    description = (
        "kubernetes: submit in cluster mode to the k8s:// master of master_connection_id; Spark creates the "
        "driver and executor pods of each job and removes them (see cluster.kubernetes; unit-tested only, not "
        "run here)."
    )
    kubernetes_required = ("image", "namespace", "service_account", "shared_volume_claim", "shared_dir")
    kubernetes_section_required = True
