"""Profile ``kubernetes``: cluster mode to a ``k8s://`` master, the driver and executors in pods."""

from __future__ import annotations

from collections.abc import Mapping

from include.config.errors import PipelineConfigError, _describe
from include.config.kubernetes import KubernetesConfig
from include.config.profiles.base import ClusterProfileRules
from include.contract.locations import is_uri, is_within

#: Table locations the pods read or write: each a URI, or a path on the shared volume.
POD_LOCATIONS = (
    "bronze_path",
    "checkpoint_root",
    "silver_path",
    "quarantine_path",
    "transform_checkpoint_root",
)


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

    def check_pipeline(
        self,
        shown: str,
        *,
        locations: Mapping[str, str],
        kafka_options: Mapping[str, str],
        kubernetes: KubernetesConfig | None,
        registry: str | None,
    ) -> None:
        """What the driver pod reads is in the image, the shared volume or a secret."""
        if kubernetes is None:  # ClusterConfig already refused it
            return
        if kubernetes.shared_dir is not None:
            _check_pods_reach(shown, locations, kafka_options, kubernetes.shared_dir)
        if registry and kubernetes.registry_secret is None:
            raise PipelineConfigError(
                shown,
                "cluster.kubernetes.registry_secret",
                f"expected the name of a Kubernetes secret holding schema registry {registry!r}'s settings with "
                "profile kubernetes, got nothing; the driver pod reads them only from a secret (the "
                "registry's credentials never go to the shared volume)",
            )


def _check_pods_reach(
    shown: str, locations: Mapping[str, str], kafka_options: Mapping[str, str], shared: str
) -> None:
    """The tables and checkpoints on the shared volume ``shared`` (or a URI), and no Kafka option outside the
    secret the driver pod reads."""
    for key in POD_LOCATIONS:
        location = locations[key]
        if not is_uri(location) and not is_within(location, shared):
            raise PipelineConfigError(
                shown,
                f"tables.{key}",
                f"expected a URI or a path inside cluster.kubernetes.shared_dir {shared!r} with profile "
                "kubernetes (the driver and executor pods see only that volume), got "
                f"{_describe(location)}",
            )
    if kafka_options:
        raise PipelineConfigError(
            shown,
            "kafka.options",
            "expected no options with profile kubernetes, got "
            f"{', '.join(sorted(kafka_options))}; the driver pod reads its Kafka settings only from "
            "the secret cluster.kubernetes.kafka_options_secret, so put them in its JSON",
        )
