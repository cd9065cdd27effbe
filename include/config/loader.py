"""Loading pipeline files: :func:`load_pipeline`, :func:`load_pipelines` and where the tables go.

:func:`load_pipeline` reads one file into a frozen
:class:`~include.config.pipeline.PipelineConfig` or raises
:class:`~include.config.errors.PipelineConfigError`. The checks that need
more than one key, the pipeline's name or the environment (table locations,
what the pods of profile ``kubernetes`` can reach, the transform's value
schema) run here, after the models have read the file.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, replace
from pathlib import Path

from pydantic import ValidationError

from include import settings
from include.config import owned_files
from include.config.cluster import ClusterConfig
from include.config.errors import PipelineConfigError, _config_error, _did_you_mean, _display_path
from include.config.pipeline import _PIPELINE_FILE, PipelineConfig, PipelineFile, TablesConfig
from include.config.profiles import CLUSTER_PROFILES
from include.config.sections import (
    LagConfig,
    MaintenanceConfig,
    TablesSection,
)
from include.config.transform import _TransformRules
from include.config.validators import _NAME, _NAME_EXPECTED, NAME_MAX_LEN
from include.config.value_schema import _ValueSchemaProblem
from include.config.yaml_reader import _read_yaml
from include.contract.locations import comparable, is_uri, is_within
from include.contract.routes import UNROUTED, RouteSpec, Routing
from include.contract.transform_spec import TransformSpec
from include.contract.value_formats import REGISTRY_FORMATS, SCHEMA_FORMATS

#: A location with a scheme (s3a://, abfss://, file://) is a URI, taken as written.
#: The tables and folders of ``tables`` that must lie apart: key, default
#: path under ``<lakehouse_root>/<name>``, what it is, and whether it is a
#: folder (checkpoints) or a table location. An overlap is reported on the
#: later key of a pair, unless only the earlier one was set in the file.
_TABLE_LOCATIONS = (
    ("bronze_path", ("bronze",), "the bronze table", False),
    ("checkpoint_root", ("_checkpoints", "bronze"), "the bronze checkpoint folder", True),
    ("ledger_path", ("_runs",), "the run ledger", False),
    ("silver_path", ("silver",), "the silver table", False),
    ("quarantine_path", ("quarantine",), "the quarantine table", False),
    ("transform_checkpoint_root", ("_checkpoints", "silver"), "the transform checkpoint folder", True),
    ("lock_path", ("_lock",), "the run lock folder", True),
)
#: What each key of :data:`_TABLE_LOCATIONS` is, as messages name it.
_LOCATION_NAMES = {key: what for key, _, what, _ in _TABLE_LOCATIONS}


def load_pipeline(path: str | os.PathLike[str]) -> PipelineConfig:
    """Read and validate one pipeline file; raises :class:`PipelineConfigError`."""
    path = Path(path)
    shown = _display_path(path)
    try:
        # A pipeline file is its folder's own: a symlink to a file elsewhere is refused before it is read.
        owned_files.check_owned(path, shown, path.parent)
    except owned_files.NotOwnedFile as exc:
        raise PipelineConfigError(shown, "(file)", f"expected a pipeline file of its folder: {exc}") from None
    data = _read_yaml(path, shown)
    try:
        file = _PIPELINE_FILE.validate_python(data, context={"folder": path.parent})
    except ValidationError as exc:
        raise _config_error(exc, shown) from None
    return _loaded(file, shown, path.stem)


def load_pipelines(
    folder: str | os.PathLike[str],
) -> tuple[dict[str, PipelineConfig], dict[str, str]]:
    """Load every ``*.yaml``/``*.yml`` file directly in ``folder``.

    Returns the valid pipelines by name and the errors by file path. One bad
    file never stops the others. Files are read in name order; a pipeline whose
    name an earlier file already uses, or one of whose tables, checkpoint
    folders or run ledger is equal to, inside or above any of an earlier
    file's, is an error of the later file (two pipelines writing one table
    would corrupt it; one's VACUUM would delete the other's files).
    Hidden files (editor backups) are skipped.
    """
    folder = Path(folder)
    configs: dict[str, PipelineConfig] = {}
    errors: dict[str, str] = {}
    if not folder.is_dir():
        shown = _display_path(folder)
        errors[shown] = str(
            PipelineConfigError(
                shown, "(folder)", "expected a folder of pipeline files, got nothing at that path"
            )
        )
        return configs, errors
    files = sorted(
        p
        for p in folder.iterdir()
        if p.suffix in (".yaml", ".yml") and not p.name.startswith(".") and p.is_file()
    )
    names: dict[str, str] = {}
    claimed: list[tuple[str, str, str, str]] = []  # (location, key, pipeline, file) of the pipelines loaded
    for path in files:
        shown = _display_path(path)
        try:
            config = load_pipeline(path)
            if config.name in names:
                raise PipelineConfigError(
                    shown,
                    "name",
                    f"expected a name no other pipeline uses, got {config.name!r}, already used by {names[config.name]}",
                )
            mine = [(getattr(config.tables, key), key) for key, *_ in _TABLE_LOCATIONS]
            _check_not_reserved(shown, mine)
            _check_apart(shown, mine, claimed)
            names[config.name] = shown
            claimed.extend((location, key, config.name, shown) for location, key in mine)
            configs[config.name] = config
        except PipelineConfigError as exc:
            errors[shown] = str(exc)
        except Exception as exc:  # noqa: BLE001 - a loader bug on one file must not hide every other pipeline
            errors[shown] = f"{shown}: (file): unexpected error while loading: {type(exc).__name__}: {exc}"
    return configs, errors


def _check_apart(shown: str, mine: list[tuple[str, str]], claimed: list[tuple[str, str, str, str]]) -> None:
    """Every location of a pipeline apart from every location of the pipelines loaded before it.

    Equal is not enough to check: a table inside another pipeline's table is
    listed as that table's files, and the other pipeline's VACUUM deletes them.
    """
    for location, key in mine:
        for other, other_key, pipeline, file in claimed:
            relation = _relation(location, other)
            if relation is None:
                continue
            raise PipelineConfigError(
                shown,
                f"tables.{key}",
                f"expected {_LOCATION_NAMES[key]} apart from every location of the other pipelines (neither inside the other), "
                f"got {location!r}, {relation} tables.{other_key} {other!r} of pipeline {pipeline!r} ({file}); "
                "give each pipeline its own folders",
            )


def _loaded(file: PipelineFile, shown: str, stem: str) -> PipelineConfig:
    """The configuration ``file`` stands for: what depends on its name, the environment or other keys."""
    name = file.name
    if name is None:
        if not (_NAME.fullmatch(stem) and len(stem) <= NAME_MAX_LEN):
            raise PipelineConfigError(
                shown,
                "name",
                f"expected {_NAME_EXPECTED}, got the file name {stem!r} (str); "
                "rename the file or set name explicitly",
            )
        name = stem
    tables = _tables(file.tables or TablesSection(), name, shown)
    cluster = file.cluster or ClusterConfig()
    config = PipelineConfig(
        name=name,
        kafka=file.kafka,
        tables=tables,
        schedule=file.schedule,
        source_path=shown,
        description=file.description,
        lag=file.lag or LagConfig(),
        data_loss_policy=file.data_loss_policy,
        cluster=cluster,
        retries=file.retries,
        tags=file.tags,
        transform=_transform(file, shown),
        routing=_routing(file, tables, shown),
        maintenance=_maintenance(file, shown),
    )
    CLUSTER_PROFILES[cluster.profile].check_pipeline(
        shown,
        locations=asdict(tables),
        kafka_options=file.kafka.options,
        kubernetes=cluster.kubernetes,
        registry=config.registry_connection(),
    )
    return config


def _transform(file: PipelineFile, shown: str) -> TransformSpec | None:
    """The transform's spec, its value schema named (registry subject) or read (schema file) and checked;
    ``None`` without a transform or with routes (:func:`_routing`)."""
    section = file.transform
    if section is None or section.routes is not None:
        return None
    return _spec(section, file, shown, "transform")


def _routing(file: PipelineFile, tables: TablesConfig, shown: str) -> Routing | None:
    """A routed transform's routes, each spec checked as a transform's is, and its tables' locations: each route's
    silver and quarantine in a folder of its name under ``tables.silver_path`` and ``tables.quarantine_path``."""
    section = file.transform
    if section is None or section.routes is None:
        return None
    routes = tuple(
        RouteSpec(name, route.match.spec(), _spec(route, file, shown, f"transform.routes.{name}"),
                  _join_location(tables.silver_path, name), _join_location(tables.quarantine_path, name))
        for name, route in section.route_sections().items()
    )  # fmt: skip
    registries = {r.transform.value_schema.registry: r.name for r in routes
                  if r.transform.value_schema and r.transform.value_schema.registry}  # fmt: skip
    if len(registries) > 1:
        (a, first), (b, second) = list(registries.items())[:2]
        raise PipelineConfigError(
            shown, f"transform.routes.{second}.value_schema.registry",
            f"expected the schema registry connection every route reads through ({a!r}, route {first}): a run "
            f"reads one registry, got {b!r}",
        )  # fmt: skip
    for r in routes:
        if r.match.needs_registry and not registries:
            key = "record_name" if r.match.record_name is not None else "subject"
            raise PipelineConfigError(
                shown, f"transform.routes.{r.name}.match.{key}",
                f"expected a route of the transform to read values through a schema registry "
                f"(value_schema.registry): {key} is looked up there by the schema id each value carries, got no "
                "registry; match on a header, key or field instead, or read the values through the registry",
            )  # fmt: skip
    return Routing(routes, _join_location(tables.quarantine_path, UNROUTED), unrouted=section.unrouted,
                   overlap=section.overlap)  # fmt: skip


def _spec(section: _TransformRules, file: PipelineFile, shown: str, at: str) -> TransformSpec:
    """The spec of a transform or one route (``at``: where its keys are, for messages), its value schema named
    (registry subject) or read (schema file) and checked."""
    spec, vs = section.spec(), section.value_schema
    if spec.format in SCHEMA_FORMATS and vs is None:
        raise PipelineConfigError(
            shown,
            f"{at}.value_schema",
            (
                f"expected a value_schema section for format {spec.format} (file: an Avro schema file, or "
                "registry: a schema registry's Airflow connection), got none"
            ),
        )
    if vs is None:
        return spec
    if spec.format not in SCHEMA_FORMATS:
        raise PipelineConfigError(
            shown,
            f"{at}.value_schema",
            (
                f"expected no value_schema for format {spec.format} (it is for {' and '.join(SCHEMA_FORMATS)}); "
                "set transform.format or remove the section"
            ),
        )
    if spec.format in REGISTRY_FORMATS and vs.file is not None:
        raise PipelineConfigError(
            shown,
            f"{at}.value_schema.file",
            (
                f"expected registry for format {spec.format} (its values carry registry schema ids), got a schema "
                "file; a schema file is for format avro"
            ),
        )
    try:
        value_schema = vs.resolve(file.kafka.topics or (), file.kafka.topic_pattern)
    except _ValueSchemaProblem as exc:
        raise PipelineConfigError(shown, f"{at}.value_schema.{exc.key}", exc.message) from None
    if value_schema.text is not None:
        names = [f.get("name") for f in json.loads(value_schema.text)["fields"] if isinstance(f, dict)]
        for f in spec.fields:
            if f.name not in names:
                raise PipelineConfigError(
                    shown,
                    f"{at}.schema.{f.name}",
                    (
                        f"expected a field of the Avro record in {value_schema.file} ({', '.join(map(str, names))}), "
                        f"got {f.name!r}" + _did_you_mean(f.name, [str(n) for n in names])
                    ),
                )
    return replace(spec, value_schema=value_schema)


def _maintenance(file: PipelineFile, shown: str) -> MaintenanceConfig:
    """The ``maintenance`` section, its silver Z-order checked against the transform's fields."""
    section = file.maintenance or MaintenanceConfig()
    columns = section.zorder_by.get("silver")
    if columns:
        if file.transform is not None and file.transform.routes is not None:
            raise PipelineConfigError(
                shown,
                "maintenance.zorder_by.silver",
                "expected no silver Z-order with transform.routes: each route's table has columns of its own",
            )
        if file.transform is None:
            raise PipelineConfigError(
                shown,
                "maintenance.zorder_by.silver",
                "expected no silver Z-order: the pipeline has no transform section, so no silver table",
            )
        declared = tuple(f.name for f in file.transform.spec().fields)
        wrong = [c for c in columns if c not in declared]
        if wrong:
            raise PipelineConfigError(
                shown,
                "maintenance.zorder_by.silver",
                (
                    f"expected fields of transform.schema ({', '.join(declared)}), got {wrong[0]!r}"
                    + _did_you_mean(wrong[0], declared)
                ),
            )
    return section


def _tables(section: TablesSection, name: str, shown: str) -> TablesConfig:
    """Every location of ``section``, defaults under ``<lakehouse_root>/<name>``; none inside another."""
    root = default_lakehouse_root() if section.lakehouse_root is None else _location(section.lakehouse_root)
    locations: dict[str, str] = {}
    explicit: set[str] = set()
    for key, default, _, _ in _TABLE_LOCATIONS:
        given = getattr(section, key)
        if given is None:
            locations[key] = _join_location(root, name, *default)
        else:
            locations[key] = _location(given)
            explicit.add(key)
    for j, (key, _, _, key_is_folder) in enumerate(_TABLE_LOCATIONS):
        for other, _, _, other_is_folder in _TABLE_LOCATIONS[:j]:
            if _relation(locations[key], locations[other]) is None:
                continue
            blamed, against, is_folder = key, other, key_is_folder
            if key not in explicit and other in explicit:  # report the key the file set
                blamed, against, is_folder = other, key, other_is_folder
            raise PipelineConfigError(
                shown,
                f"tables.{blamed}",
                f"expected {'a folder' if is_folder else 'a location'} apart from {_LOCATION_NAMES[against]} "
                f"(neither inside the other), got {locations[blamed]!r} with tables.{against} "
                f"{locations[against]!r}",
            )
    return TablesConfig(
        lakehouse_root=root,
        **locations,
        storage_connection_id=section.storage_connection_id,
        log_retention_days=section.log_retention_days,
        deleted_file_retention_days=section.deleted_file_retention_days,
    )


def default_lakehouse_root() -> str:
    """``KDE_LAKEHOUSE_ROOT`` if set (relative to the working directory, like the
    other ``KDE_*`` folders in :mod:`include.settings`), else ``<KDE_VAR_DIR>/lakehouse``.

    Read at call time, not import time, so one process can load with different settings.
    """
    env = settings.lakehouse_root_override()
    if env is None:
        return str(settings.VAR_DIR / "lakehouse")
    if is_uri(env):
        return env.rstrip("/")
    return os.path.abspath(os.path.expanduser(env))


def _location(value: str) -> str:
    """A location from the file: URIs as written, local paths absolute (relative to the project)."""
    if is_uri(value):
        return value.rstrip("/")
    path = Path(os.path.expanduser(value))
    if not path.is_absolute():
        path = settings.PROJECT_ROOT / path
    return os.path.normpath(path)


def _join_location(root: str, *parts: str) -> str:
    if is_uri(root):
        return "/".join((root.rstrip("/"), *parts))
    return str(Path(root, *parts))


def _relation(location: str, other: str) -> str | None:
    """How ``location`` lies to ``other`` when they overlap (the same, inside, or holding it), compared by what
    they resolve to (:func:`~include.contract.locations.comparable`); ``None`` when apart."""
    location, other = comparable(location), comparable(other)
    if location == other:
        return "the same location as"
    if is_within(location, other):
        return "inside"
    if is_within(other, location):
        return "a folder holding"
    return None


def _reserved_folders() -> tuple[tuple[str, str, bool], ...]:
    """Folders no table, checkpoint, ledger or lock may be at or hold, and whether one may lie inside: a table's
    VACUUM deletes the files it does not know (the run folders' credentials among them, or pipeline files),
    and the pruning of old run folders would delete a table inside them."""
    runs = "the run folders (KDE_VAR_DIR/runs), where the jobs' credentials are"
    return (
        (str(settings.VAR_DIR / "runs"), runs, False),
        (str(settings.pipelines_dir()), "the pipelines folder (KDE_PIPELINES_DIR)", True),
        (str(settings.CACHE_DIR), "the jars and archives cache (KDE_CACHE_DIR)", True),
        (str(settings.PROJECT_ROOT / "dags"), "the DAG folder", True),
    )


def _check_not_reserved(shown: str, mine: list[tuple[str, str]]) -> None:
    """No location of a pipeline overlaps a folder of :func:`_reserved_folders` the way it forbids."""
    for location, key in mine:
        for folder, what, inside_allowed in _reserved_folders():
            relation = _relation(location, folder)
            if relation is not None and not (relation == "inside" and inside_allowed):
                raise PipelineConfigError(
                    shown,
                    f"tables.{key}",
                    f"expected {_LOCATION_NAMES[key]} apart from {what}, got {location!r}, {relation} {folder}; "
                    "choose a folder of the pipeline's own (tables.lakehouse_root)",
                )
