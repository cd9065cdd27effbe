"""What a pipeline file may ask of Kubernetes: only what the Spark connection's owner allows.

A pipeline file's author is trusted with the pipeline's tables, schedule, transform and cluster size, not
with code on the cluster or with secrets (``docs/security.md``). On Kubernetes the pipeline file names the
pods' image (code that runs with the Kafka credentials), their namespace and service account, the volume
claim they mount and the Kubernetes secrets mounted in the driver: each of those is code execution or
secret access. So each must be allowed by the Spark connection (its owner is the Airflow admin), in the
connection's extra::

    {"kubernetes_allowed": {
        "images": ["registry.example/kafka-delta-elt:*"],
        "namespaces": ["data-pipelines"],
        "service_accounts": ["spark-driver"],
        "volume_claims": ["kde-shared"],
        "secrets": ["kde-kafka-options", "kde-registry"]}}

Entries are exact names or shell-style patterns (``fnmatch``). A value the list does not allow, or a kind
the connection allows nothing of, refuses the job before anything is submitted, naming the pipeline-file
key, the value, the connection and the fix.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fnmatch import fnmatchcase
from typing import Any

from include.config import KubernetesConfig
from include.contract.errors import PipelineError

#: The extra key of a Spark connection that lists what pipeline files may ask of Kubernetes.
EXTRA_KEY = "kubernetes_allowed"
#: Pipeline-file key -> the allowlist of :data:`EXTRA_KEY` it must match.
KINDS: dict[str, str] = {
    "image": "images",
    "namespace": "namespaces",
    "service_account": "service_accounts",
    "shared_volume_claim": "volume_claims",
    "kafka_options_secret": "secrets",
    "registry_secret": "secrets",
}


class KubernetesNotAllowed(PipelineError, ValueError):
    """A pipeline file asked Kubernetes for what the Spark connection does not allow."""


def allowlist(extra: Mapping[str, Any], conn_id: str) -> dict[str, tuple[str, ...]]:
    """The allowlists of a Spark connection's extra (:data:`EXTRA_KEY`), by kind; refuses a malformed one."""
    found = extra.get(EXTRA_KEY) or {}
    if not isinstance(found, Mapping):
        raise KubernetesNotAllowed(
            f"Airflow connection {conn_id!r}: extra {EXTRA_KEY} must be an object of lists "
            f"({', '.join(sorted(set(KINDS.values())))}), got {type(found).__name__}"
        )
    out: dict[str, tuple[str, ...]] = {}
    for kind in sorted(set(KINDS.values())):
        names = found.get(kind) or []
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise KubernetesNotAllowed(
                f"Airflow connection {conn_id!r}: extra {EXTRA_KEY}.{kind} must be a list of names or patterns"
            )
        out[kind] = tuple(names)
    unknown = sorted(set(found) - set(out))
    if unknown:
        raise KubernetesNotAllowed(
            f"Airflow connection {conn_id!r}: extra {EXTRA_KEY} has unknown keys {unknown}; expected "
            f"{', '.join(sorted(out))}"
        )
    return out


def check_allowed(pipeline: str, k8s: KubernetesConfig, conn_id: str, extra: Mapping[str, Any], *,
                  keys: tuple[str, ...] = tuple(KINDS)) -> None:  # fmt: skip
    """Refuse (:class:`KubernetesNotAllowed`) any of ``keys`` of ``cluster.kubernetes`` that pipeline ``pipeline``
    sets and Spark connection ``conn_id`` (its ``extra``) does not allow."""
    allowed = allowlist(extra, conn_id)
    for key in keys:
        value = getattr(k8s, key, None)
        if not value:
            continue
        kind = KINDS[key]
        if not any(fnmatchcase(value, pattern) for pattern in allowed[kind]):
            listed = ", ".join(allowed[kind]) or "nothing"
            raise KubernetesNotAllowed(
                f"pipeline {pipeline!r}: cluster.kubernetes.{key} {value!r} is not allowed by Airflow connection "
                f"{conn_id!r} (extra {EXTRA_KEY}.{kind} allows {listed}); a pipeline file may only choose among "
                f"what the connection's owner allows: ask them to add it, or choose an allowed one"
            )


def check_connection(pipeline: str, k8s: KubernetesConfig | None, conn_id: str, *,
                     get_connection: Callable[[str], Any] | None = None, keys: tuple[str, ...] = tuple(KINDS)) -> None:  # fmt: skip
    """:func:`check_allowed` against the Spark connection ``conn_id`` looked up in Airflow."""
    if k8s is None:
        return
    if get_connection is None:
        from include.readers.connections import _get_connection

        get_connection = _get_connection
    conn = get_connection(conn_id)
    extra = conn.extra_dejson if hasattr(conn, "extra_dejson") else {}
    check_allowed(pipeline, k8s, conn_id, extra, keys=keys)
