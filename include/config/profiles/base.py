"""What a cluster profile allows in section ``cluster``: the base of each profile's rules.

One module per profile (beside this one) holds its rules as a subclass of
:class:`ClusterProfileRules`, and :data:`include.config.profiles.CLUSTER_PROFILES` registers it by name.
:class:`~include.config.cluster.ClusterConfig` hands the keys a file gives to the profile it names,
before their values are checked, so each profile's rules sit in one place. The profile's runtime part
(how a job is submitted) is :mod:`include.orchestration.profiles`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from include.config.errors import _MISSING, _invalid
from include.config.kubernetes import KubernetesConfig


class ClusterProfileRules:
    """The rules of one ``cluster.profile`` on the keys of section ``cluster``.

    The defaults: a master connection is required, ``cluster.kubernetes`` is optional and
    :attr:`kubernetes_required` lists what it must hold, the cluster is not sized to the backlog.
    """

    #: The profile's name, as ``cluster.profile`` spells it.
    name: ClassVar[str] = ""
    #: Its part of ``cluster.profile``'s description in the reference (docs/pipeline-file.md).
    description: ClassVar[str] = ""
    #: Whether the run's cluster may be sized to its backlog (``local_max_records``, ``records_per_worker``):
    #: only a profile whose runs start their own cluster can.
    sizes_to_backlog: ClassVar[bool] = False
    #: The keys ``cluster.kubernetes`` must hold when it is given (or, if :attr:`kubernetes_section_required`,
    #: always).
    kubernetes_required: ClassVar[tuple[str, ...]] = ()
    #: Whether ``cluster.kubernetes`` itself is required.
    kubernetes_section_required: ClassVar[bool] = False

    def check_given(self, data: dict[str, Any]) -> dict[str, Any]:
        """Rules on which keys of ``cluster`` are given (null counts as not given), in the order a reader fixes
        them: the master connection, then ``cluster.kubernetes``. Returns ``data`` with the profile's defaults."""
        if not self.sizes_to_backlog and data.get("local_max_records") is None:
            data = {**data, "local_max_records": 0}  # sizing to the backlog needs the run's own cluster
        self.check_master(data)
        k8s = data.get("kubernetes")
        if k8s is None:
            if self.kubernetes_section_required:
                required = ", ".join(self.kubernetes_required)
                expected = f"a mapping with keys {required} (required with profile {self.name})"
                raise _invalid(expected, data.get("kubernetes", _MISSING), at=".kubernetes")
            return data
        self.check_kubernetes(k8s)
        return data

    def check_master(self, data: dict[str, Any]) -> None:
        """``cluster.master_connection_id``: required unless the profile says otherwise."""
        if data.get("master_connection_id") is None:
            expected = f"the id of an Airflow Spark connection (required with profile {self.name})"
            raise _invalid(expected, data.get("master_connection_id", _MISSING), at=".master_connection_id")

    def check_kubernetes(self, k8s: Any) -> None:
        """``cluster.kubernetes``, given: its keys known (the first thing to fix), allowed, and the required ones set."""
        KubernetesConfig._check_mapping(k8s, ".kubernetes")
        self.check_kubernetes_keys(k8s)
        for key in self.kubernetes_required:
            if k8s.get(key) is None:
                expected = f"a value (required with profile {self.name})"
                raise _invalid(expected, k8s.get(key, _MISSING), at=f".kubernetes.{key}")

    def check_pipeline(
        self,
        shown: str,
        *,
        locations: Mapping[str, str],
        kafka_options: Mapping[str, str],
        kubernetes: KubernetesConfig | None,
        registry: str | None,
    ) -> None:
        """Rules across sections, once the file's tables are worked out (``locations``: each table and
        checkpoint key of ``tables`` and where it is; ``registry``: the transform's schema registry, if any).
        Default: none. Raises :class:`~include.config.errors.PipelineConfigError` naming ``shown``."""

    def check_kubernetes_keys(self, k8s: dict[str, Any]) -> None:
        """Refuse a key of ``cluster.kubernetes`` the profile does not use (default: every key is used)."""
