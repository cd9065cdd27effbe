"""The Spark applications a run submits and the arguments of its later steps (transform, maintenance), built
from their contracts in :mod:`include.contract.jobs`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from include.config import PipelineConfig
from include.contract.errors import ContractError
from include.contract.jobs import MaintainArgs, TransformArgs
from include.orchestration.profiles import profile_of

APPLICATION = "spark_jobs/kafka_to_bronze.py"
BACKFILL_APPLICATION = "spark_jobs/kafka_backfill.py"
TRANSFORM_APPLICATION = "spark_jobs/bronze_to_silver.py"
#: A run's steps (ingest or backfill, then transform) in one Spark application.
RUN_STEPS_APPLICATION = "spark_jobs/run_steps.py"
MAINTAIN_APPLICATION = "spark_jobs/maintain_tables.py"
#: Where the run's application writes the transform step's failure (in the run folder).
TRANSFORM_ERROR_FILE = "transform-error.json"
#: Where the run's application writes the maintenance step's failure (in the run folder).
MAINTAIN_ERROR_FILE = "maintain-error.json"


def maintain_job_args(cfg: PipelineConfig, run_id: str, summary_path: Path, lock_epoch: int | None = None) -> list[str]:
    """``maintain_tables``' arguments for this run: the pipeline's tables and what its ``maintenance`` asks."""

    m = cfg.maintenance
    return MaintainArgs.for_tables(cfg.name, cfg.table_locations(), zorder_by=m.zorder_by, optimize=m.optimize, vacuum=m.vacuum,
                                   checkpoint=m.checkpoint, run_id=run_id, summary_path=str(summary_path),
                                   lock_epoch=lock_epoch).to_args()  # fmt: skip


def transform_job_args(cfg: PipelineConfig, folder: Path, run_id: str, summary_path: Path,
                       lock_epoch: int | None = None, replay: dict[str, Any] | None = None) -> list[str]:  # fmt: skip
    """``bronze_to_silver``'s arguments for this run; its spec goes in a file of the run folder, and so does a
    ``replay_quarantine`` run's selection (``replay``, from its plan).

    With a schema registry, the cluster profile says where the driver reads its settings
    (:meth:`~include.orchestration.profiles.base.ClusterProfile.registry_file`): the run folder's owner-only
    ``secrets/``, which the submit removes, or a Kubernetes secret.
    """
    if not cfg.has_transform:
        raise ContractError(f"pipeline {cfg.name!r} has no transform section")
    spec_file = folder / "transform-spec.json"
    # A routed transform's file holds its routes, each with its rules and tables; the job tells them apart.
    spec = {"routing": cfg.routing.to_json()} if cfg.routing is not None else cfg.transform_spec().to_json()
    spec_file.write_text(json.dumps(spec, indent=2))
    connection = cfg.registry_connection()
    registry = profile_of(cfg.cluster).registry_file(cfg, folder, connection) if connection else None
    replay_file = None
    if replay is not None:
        replay_file = folder / "replay-request.json"
        replay_file.write_text(json.dumps(replay))
    t = cfg.tables
    return TransformArgs(
        pipeline=cfg.name, bronze_path=t.bronze_path, silver_path=t.silver_path, quarantine_path=t.quarantine_path,
        checkpoint_root=t.transform_checkpoint_root, spec_file=str(spec_file), run_id=run_id,
        summary_path=str(summary_path), table_property=tuple(f"{k}={v}" for k, v in t.retention_properties().items()),
        registry_file=registry, lock_epoch=lock_epoch, replay_file=str(replay_file) if replay_file else None,
    ).to_args()  # fmt: skip
