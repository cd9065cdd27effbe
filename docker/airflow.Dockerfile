# The project's Airflow image for docker-compose.yaml: the official Airflow image
# at the exact version requirements.txt pins, plus what the pipelines need at
# run time — the project's Python packages (requirements.txt + constraints.txt),
# a Java runtime for pyspark's spark-submit and the transient standalone
# cluster, and the pinned JVM jars (Kafka connector, Delta).
#
# Build context: the project root (docker compose does this; by hand:
#   docker build -f docker/airflow.Dockerfile -t kafka-delta-elt-airflow:3.3.2-python3.11 .)
# docker/airflow.Dockerfile.dockerignore keeps .venv, .cache and var out of the context.

# Pinned to apache-airflow in requirements.txt and to the Python constraints.txt
# was locked on; tests/test_compose.py fails when either moves alone. A build
# argument, so a builder with no registry can pass a base it built itself (the
# Podman test does: tests/compose_stack/); the default is the official image.
ARG AIRFLOW_BASE_IMAGE=apache/airflow:3.3.2-python3.11
FROM ${AIRFLOW_BASE_IMAGE}

USER root
# Debian's OpenJDK 17, the Java major of the Spark image (Temurin 17) and of
# the machines the tests run on; the JDK, for javac to compile the project's
# Spark SQL functions (include/spark/jvm/src). Maven resolves the jars below; it
# stays in the image so a changed pin in include/settings.py still resolves at first use.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        openjdk-17-jdk-headless maven \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /opt/kde /opt/kde-cache /opt/kde-var /lakehouse \
    && chown -R airflow:0 /opt/kde /opt/kde-cache /opt/kde-var /lakehouse

USER airflow
# requirements.txt names constraints.txt with "-c", relative to itself.
COPY --chown=airflow:0 requirements.txt constraints.txt /opt/kde/
RUN pip install --no-cache-dir -r /opt/kde/requirements.txt

ENV PYTHONPATH=/opt/kde \
    KDE_CACHE_DIR=/opt/kde-cache \
    KDE_VAR_DIR=/opt/kde-var \
    KDE_LAKEHOUSE_ROOT=/lakehouse

# The jars are fetched (and the project's functions compiled) here, at build time, so containers start offline and
# every container of the stack uses the same set. The Maven repository copy is
# dropped: the resolved bundles under /opt/kde-cache/jars are all that is read.
# include/tooling is left out by the .dockerignore: dev code no scheduler or worker imports.
COPY --chown=airflow:0 include /opt/kde/include
RUN cd /opt/kde \
    && python -m include.spark.jvm_deps \
    && rm -rf /opt/kde-cache/m2

# The code is baked in too, so the image runs without the compose file's bind
# mounts (which lay the working tree over these copies for live edits).
COPY --chown=airflow:0 dags /opt/kde/dags
COPY --chown=airflow:0 plugins /opt/kde/plugins
COPY --chown=airflow:0 spark_jobs /opt/kde/spark_jobs
COPY --chown=airflow:0 docker /opt/kde/docker
