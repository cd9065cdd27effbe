"""Process-wide settings, read once from the environment with typed defaults.

Every path the project writes to on its own (jar cache, local broker data,
the demo lakehouse) hangs off two folders, both ignored by git:

- ``KDE_CACHE_DIR`` (default ``<project>/.cache``): downloaded jars and the
  Maven repository; kept between runs so later runs are offline.
- ``KDE_VAR_DIR`` (default ``<project>/var``): runtime state of the local
  broker, demo tables and the embedded Airflow home.
"""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT: Path = Path(__file__).resolve().parent.parent

CACHE_DIR: Path = Path(os.environ.get("KDE_CACHE_DIR", PROJECT_ROOT / ".cache")).resolve()
VAR_DIR: Path = Path(os.environ.get("KDE_VAR_DIR", PROJECT_ROOT / "var")).resolve()

#: Versions of the JVM parts. The Python side (pyspark, delta-spark) is pinned
#: in requirements.txt to match these.
SPARK_VERSION = "4.2.0"
SCALA_BINARY = "2.13"
DELTA_VERSION = "4.4.0"
KAFKA_BROKER_VERSION = "4.3.1"
#: spark-token-provider-kafka-0-10 is not published on Maven Central for any
#: Spark release after 4.0.0 that this machine can reach; 4.0.0's classes are
#: the ones spark-sql-kafka-0-10 4.2.0 calls (checked by the integration tests,
#: which run every Kafka read through them).
SPARK_TOKEN_PROVIDER_VERSION = "4.0.0"
