"""Section ``cluster.kubernetes`` of a pipeline file: the pods' image, namespace, volume and secrets.

Which of its keys a cluster profile needs, allows or refuses is the profile's rule
(:mod:`include.config.profiles`); this model checks each value on its own.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal, get_args

from pydantic import Field
from pydantic.dataclasses import dataclass as pydantic_dataclass

from include.config.sections import _SECTION_CONFIG, _Section
from include.config.validators import _choice, _folder, _matching

#: ``cluster.kubernetes.delete_driver_pod`` choices: when the operator removes a finished driver pod.
DriverPodDeletion = Literal["on_success", "always", "never"]
DRIVER_POD_DELETION: tuple[str, ...] = get_args(DriverPodDeletion)
#: Kubernetes names: a DNS-1123 label (namespaces) and subdomain (service
#: accounts, claims, secrets); secret keys are file names.
_K8S_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_K8S_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_K8S_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
_IMAGE = re.compile(r"^[^\s]+$")
#: Where the project lives inside the Kubernetes image (``cluster.kubernetes.app_dir``).
DEFAULT_APP_DIR = "/opt/kafka-delta-elt"
_K8S_NAME = "a Kubernetes object name (lower-case letters, digits, '-' and '.', at most 253 characters)"


@pydantic_dataclass(frozen=True, config=_SECTION_CONFIG)
class KubernetesConfig(_Section):
    """Kubernetes settings of the cluster (section ``cluster.kubernetes``).

    With profile ``kubernetes`` (cluster mode), ``spark-submit`` asks the
    Kubernetes API for a driver pod per job, the driver asks for
    ``cluster.workers`` executor pods, and Spark deletes the executor pods
    when the job ends; the operator then deletes the driver pod (see
    ``delete_driver_pod``). The driver runs in a pod, not on the Airflow
    worker, so:

    - the job code is baked into ``image`` (nothing is uploaded): the
      project's ``spark_jobs/`` folder and the ``--py-files`` archive
      ``kde_jobs.zip`` (``include.spark.spark_submit.package_py_files``) under
      ``app_dir``, and the jars of ``include.spark.jvm_deps.spark_jars()`` (the
      Kafka connector, Delta, spark-avro, protobuf-java and the project's own
      functions) in the image's ``$SPARK_HOME/jars``;
    - the run's request files (preflight result, backfill request,
      transform spec) and the job's summary JSON go through ``shared_dir``,
      a volume mounted at that same path on the Airflow workers and, from
      the claim ``shared_volume_claim``, in the driver and executor pods;
      checkpoints and local table paths must lie inside it too;
    - Kafka client settings come from the Kubernetes secret
      ``kafka_options_secret``, mounted in the driver pod only; they never
      pass through Airflow or the command line.

    Not exercised on a real Kubernetes cluster here: the submit command is
    unit-tested only.

    With profile ``existing_master`` and a ``k8s://`` master (client mode:
    the driver stays on the Airflow worker), only ``image`` and
    ``namespace`` may be given; ``image`` is then required for the executor
    pods (checked when the task runs, as only then is the master known).
    """

    image: Annotated[
        str, _matching(_IMAGE, "a container image reference without spaces, e.g. 'registry/app:1.0'")
    ] = Field(
        description="Required whenever the section is given (it is needed with profile kubernetes, and with "
        "existing_master on a k8s:// master). Container image of the driver and executor pods "
        "(spark.kubernetes.container.image), e.g. registry.example/kafka-delta-elt:1.4. It holds spark_jobs/ "
        "and kde_jobs.zip under app_dir, and the jars of include.spark.jvm_deps.spark_jars() in $SPARK_HOME/jars."
    )
    namespace: (
        Annotated[
            str,
            _matching(
                _K8S_LABEL,
                "a Kubernetes namespace name (lower-case letters, digits and '-', at most 63 characters)",
            ),
        ]
        | None
    ) = Field(
        default=None,
        description="Kubernetes namespace of the pods (spark.kubernetes.namespace): a DNS label. Required "
        "with profile kubernetes; optional with existing_master (the Spark connection's namespace extra, "
        "else default).",
    )
    service_account: Annotated[str, _matching(_K8S_SUBDOMAIN, _K8S_NAME)] | None = Field(
        default=None,
        description="Service account of the driver pod, allowed to create and delete pods, services and "
        "config maps in namespace (spark.kubernetes.authenticate.driver.serviceAccountName). Required with "
        "profile kubernetes.",
    )
    app_dir: Annotated[str, _folder(if_null=DEFAULT_APP_DIR)] = Field(
        default=DEFAULT_APP_DIR,
        description="Absolute path of the project inside image, default /opt/kafka-delta-elt: it holds "
        "spark_jobs/*.py and kde_jobs.zip, submitted as local:// URIs.",
    )
    shared_volume_claim: Annotated[str, _matching(_K8S_SUBDOMAIN, _K8S_NAME)] | None = Field(
        default=None,
        description="Required with profile kubernetes: name of a ReadWriteMany persistent volume claim in "
        "namespace, mounted at shared_dir in the driver and executor pods.",
    )
    shared_dir: Annotated[str, _folder()] | None = Field(
        default=None,
        description="Required with profile kubernetes: absolute path where that volume is mounted, the "
        "same on the Airflow workers and in the pods. Run files live in <shared_dir>/runs/<name>/<run>. "
        "tables.bronze_path, silver_path, quarantine_path, checkpoint_root and transform_checkpoint_root must "
        "lie inside it unless they are URIs.",
    )
    kafka_options_secret: Annotated[str, _matching(_K8S_SUBDOMAIN, _K8S_NAME)] | None = Field(
        default=None,
        description="Name of a Kubernetes secret in namespace whose key kafka_options_key holds the job's "
        "Kafka client settings as a JSON object in the Java client's names (e.g. security.protocol, "
        "sasl.mechanism, sasl.jaas.config), with any non-secret consumer settings besides. Mounted "
        "read-only in the driver pod at /etc/kafka-delta-elt/kafka. Optional (a plaintext broker needs "
        "none). With profile kubernetes, kafka.options must be empty: put them in this secret.",
    )
    kafka_options_key: Annotated[
        str,
        _matching(
            _K8S_SECRET_KEY, "a secret key (letters, digits, '-', '_' and '.')", if_null="kafka-options.json"
        ),
    ] = Field(default="kafka-options.json", description="Key of that secret, default kafka-options.json.")
    registry_secret: Annotated[str, _matching(_K8S_SUBDOMAIN, _K8S_NAME)] | None = Field(
        default=None,
        description="Name of a Kubernetes secret in namespace whose key registry_secret_key holds the schema "
        "registry's settings as a JSON object (url, and username and password if it needs them). Mounted "
        "read-only in the driver pod at /etc/kafka-delta-elt/registry. Required with profile kubernetes when "
        "transform.value_schema names a registry: the credentials never pass through Airflow or the shared "
        "volume.",
    )
    registry_secret_key: Annotated[
        str,
        _matching(
            _K8S_SECRET_KEY,
            "a secret key (letters, digits, '-', '_' and '.')",
            if_null="schema-registry.json",
        ),
    ] = Field(default="schema-registry.json", description="Key of that secret, default schema-registry.json.")
    delete_driver_pod: Annotated[DriverPodDeletion, _choice(DRIVER_POD_DELETION)] = Field(
        default="on_success",
        description="on_success (default): the operator deletes a driver pod that finished well and keeps a "
        "failed one for kubectl logs; always; never.",
    )
