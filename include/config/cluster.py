"""Section ``cluster`` of a pipeline file: the Spark cluster a run uses.

The keys every profile shares are checked here; which of them a profile needs, allows or refuses is that
profile's rule (:mod:`include.config.profiles`, one module each, registered by name).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationInfo, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from include.config.errors import _invalid
from include.config.kubernetes import KubernetesConfig
from include.config.profiles import CLUSTER_PROFILES, DEFAULT_PROFILE
from include.config.sections import _SECTION_CONFIG, _Section
from include.config.validators import _check_memory, _choice, _connection_id, _integer

#: The backlog up to which a local_standalone run stays in local mode unless its file says otherwise: the
#: largest ``make bench`` measured local mode faster at, below where a cluster of as many cores paid off.
LOCAL_MAX_RECORDS_DEFAULT = 200_000


@pydantic_dataclass(frozen=True, config=_SECTION_CONFIG)
class ClusterConfig(_Section):
    """The Spark cluster a run uses (section ``cluster``)."""

    profile: Annotated[str, _choice(tuple(CLUSTER_PROFILES))] = Field(
        default=DEFAULT_PROFILE,
        description=" ".join(rules.description for rules in CLUSTER_PROFILES.values()),
        json_schema_extra={"enum": list(CLUSTER_PROFILES)},
    )
    workers: Annotated[int, *_integer(1, 8)] = Field(
        default=1,
        description="Integer from 1 to 8, default 1: number of workers a local_standalone run starts (one "
        "executor each); with the other profiles, the number of executors requested "
        "(spark.executor.instances).",
    )
    worker_cores: Annotated[int, *_integer(1)] = Field(
        default=1,
        description="Positive integer, default 1: cores per worker, which is also each executor's "
        "spark.executor.cores.",
    )
    worker_memory: Annotated[str, BeforeValidator(_check_memory)] = Field(
        default="1g",
        description='Spark size string with a unit (k, m, g or t, e.g. "512m", "2g"), default "1g", at '
        "least 450m (Spark's minimum for an executor): what each worker offers, and each executor's "
        "spark.executor.memory. Stored lower-case without a trailing b.",
    )
    master_connection_id: Annotated[str, _connection_id("Spark")] | None = Field(
        default=None,
        description="Id of the Airflow Spark connection whose host is the master URL (spark://, yarn, "
        "k8s://). Required with existing_master and kubernetes (where it must name a k8s://https://... "
        "master), refused with local_standalone. With existing_master, the connection's queue extra (YARN) "
        "and namespace extra (Kubernetes) are used; its deploy-mode extra is overridden by the profile.",
    )
    kubernetes: KubernetesConfig | None = Field(
        default=None,
        description="Section: Kubernetes settings. Required with kubernetes; optional with existing_master "
        "(image, namespace); refused with local_standalone. Null when absent.",
    )
    local_max_records: Annotated[int, *_integer(0)] = Field(
        default=LOCAL_MAX_RECORDS_DEFAULT,
        description="Integer >= 0, default 200000; local_standalone only. A run whose backlog (the preflight's "
        "lag, or a backfill's offsets) is at most this many records runs its Spark application in local mode "
        "inside the driver (local[k], k = workers x worker_cores, at most this machine's cores): no cluster "
        "starts, no executor warms up. On one machine a cluster with as many cores takes longer up to a few "
        "hundred thousand records a run, its start and its executors' warm-up being the difference (make "
        "bench, docs/performance.md). 0 always starts the cluster. The choice and its reason are in "
        "start_cluster's log and the ledger's cluster_choice.",
    )
    records_per_worker: Annotated[int, *_integer(0)] = Field(
        default=0,
        description="Integer >= 0, default 0 (off); local_standalone only. Above local_max_records, the run "
        "starts ceil(backlog / records_per_worker) workers, at least 1 and at most workers; 0 always starts "
        "workers.",
    )

    @classmethod
    def _check_given(cls, data: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        profile = data.get("profile", DEFAULT_PROFILE)
        rules = CLUSTER_PROFILES.get(profile) if isinstance(profile, str) else None
        if rules is None:  # the profile's own check says what is wrong
            return data
        return rules.check_given(data)

    @model_validator(mode="after")
    def _sizing_needs_its_own_cluster(self) -> ClusterConfig:
        if CLUSTER_PROFILES[self.profile].sizes_to_backlog:
            return self
        for key in ("local_max_records", "records_per_worker"):
            if getattr(self, key):
                expected = (
                    f"0 or no value with profile {self.profile} (sizing the cluster to the backlog needs the "
                    "run's own cluster: profile local_standalone)"
                )
                raise _invalid(expected, getattr(self, key), at=f".{key}")
        return self
