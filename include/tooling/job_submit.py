"""The stand-alone spark-submit command of one job, for the benchmark, the tests and a run by hand.

Dev tooling: a pipeline run's command is built by Airflow's Spark provider from
the same pieces (``include/orchestration/profiles/``), so the product
layers never call this.

The same command runs against ``local[N]``, a transient standalone cluster or
any existing master; only ``--master`` changes.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence

from include import settings

# Through the module, so a test that replaces one piece of spark_submit changes this command too.
from include.spark import jvm_deps, spark_submit


def submit_command(
    application: str,
    application_args: Sequence[str],
    *,
    master: str,
    conf: Mapping[str, str] | None = None,
    driver_memory: str = "1g",
) -> list[str]:
    """The full spark-submit command for one job of this project."""
    merged = {
        **spark_submit.BASE_CONF,
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.driver.extraJavaOptions": spark_submit.driver_java_options(),
        **(conf or {}),
    }
    cmd = [
        spark_submit.spark_submit_binary(),
        "--master", master,
        "--driver-memory", driver_memory,
        "--jars", ",".join(str(j) for j in jvm_deps.spark_jars()),
        "--py-files", str(spark_submit.package_py_files()),
    ]  # fmt: skip
    for key, value in merged.items():
        cmd += ["--conf", f"{key}={value}"]
    return [*cmd, str(settings.PROJECT_ROOT / application), *application_args]
