"""Pipeline configuration: one YAML file per pipeline, typed and validated when loaded.

A pipeline file (``include/pipelines/<name>.yaml``) declares what one Airflow
DAG ingests and how: topics, starting position, tables, schedule, lag
thresholds, data-loss policy, cluster profile and, optionally, how bronze
records become silver rows (the ``transform`` section). :func:`load_pipeline`
turns it into a frozen :class:`PipelineConfig` or raises
:class:`PipelineConfigError` whose message names the file, the field and what
was expected against what was found, e.g.::

    include/pipelines/orders.yaml: kafka.max_offsets_per_trigger: expected a positive integer, got 'lots' (str)

One module per concern, each importing only the ones before it:

- :mod:`~include.config.errors`: :class:`PipelineConfigError` and how a check reports a problem;
- :mod:`~include.config.yaml_reader`: YAML reading that refuses duplicate keys;
- :mod:`~include.config.validators`: the checks of single values and the value types built on them;
- :mod:`~include.config.cron`: the ``schedule`` key;
- :mod:`~include.config.sections`: the ``kafka``, ``tables``, ``lag`` and ``maintenance`` models;
- :mod:`~include.config.kubernetes`: the ``cluster.kubernetes`` model;
- :mod:`~include.config.profiles`: each cluster profile's rules on the ``cluster`` keys, by name;
- :mod:`~include.config.cluster`: the ``cluster`` model, which hands those rules the keys given;
- :mod:`~include.config.transform_fields`: a transform's fields (``transform.schema``) and its schema file;
- :mod:`~include.config.value_schema`: ``transform.value_schema`` and the Avro schema file it names;
- :mod:`~include.config.transform`: the ``transform`` section;
- :mod:`~include.config.pipeline`: :class:`PipelineFile` (the top level) and :class:`PipelineConfig`;
- :mod:`~include.config.loader`: loading files and folders, and where the tables go;
- :mod:`~include.config.reference`: the JSON Schema and Markdown reference generated from the models
  (``python -m include.config.reference --schema | --reference``).

The DAG factory calls :func:`load_pipelines` while Airflow parses DAG files, so
this package imports only the standard library, PyYAML, pydantic, croniter,
:mod:`include.settings`, :mod:`include.contract.transform_spec`,
:mod:`include.contract.value_formats` and :mod:`include.contract.maintenance`: no Kafka, Spark or Airflow, no network.
"""

from __future__ import annotations

from include.config.cluster import ClusterConfig
from include.config.errors import PipelineConfigError
from include.config.kubernetes import KubernetesConfig
from include.config.loader import load_pipeline, load_pipelines
from include.config.pipeline import PipelineConfig, PipelineFile, TablesConfig
from include.config.sections import (
    KafkaConfig,
    LagConfig,
    MaintenanceConfig,
    TablesSection,
)
from include.config.transform import TransformSection
from include.config.transform_fields import SchemaField
from include.config.value_schema import ValueSchemaSection

__all__ = [
    "ClusterConfig",
    "KafkaConfig",
    "KubernetesConfig",
    "LagConfig",
    "MaintenanceConfig",
    "PipelineConfig",
    "PipelineConfigError",
    "PipelineFile",
    "SchemaField",
    "TablesConfig",
    "TablesSection",
    "TransformSection",
    "ValueSchemaSection",
    "load_pipeline",
    "load_pipelines",
]
