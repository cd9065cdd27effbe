# Two commands do all the set-up on a fresh machine:
#   make demo   - local Kafka broker, demo data, the pipeline DAGs end to end, a summary
#                 (STORE=s3: the lakehouse on a local S3-compatible server)
#   make test   - the fast tier: ruff, mypy, unit tests, integration tests with real Kafka, Spark, Delta and
#                 Airflow (one DAG run per DAG shape and trigger-form family) and the fault smoke
# make test-all runs every test (every DAG-run scenario, the 30-fault soak slice); make soak the long soak.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup test-tools browser-tools db-tools container-tools demo ui screenshots test test-all test-cpu test-compose clean-containers soak soak-scheduler lint typecheck bench profile-transform lock clean

# uv installs the same locked set as pip (constraints.txt), in about half pip's time with no cache.
# --compile-bytecode as pip does: with PYTHONDONTWRITEBYTECODE set (as on CI) every process would
# otherwise compile every module it imports, again and again. If uv cannot reach the index (it reads
# no pip.conf), pip installs the same set.
# No cache outside the clone: pyspark ships only as a source archive, and uv keeps a fresh build of
# it (about 900 MB) in ~/.cache/uv on every install whose index answer it cannot revalidate, so
# repeated fresh clones filled the disk. Without a cache the install takes about 30 s.
UV_VERSION := 0.13.9
$(STAMP): requirements.txt constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --no-cache-dir uv==$(UV_VERSION)
	$(PY) -m uv pip install --quiet --no-cache --compile-bytecode --python $(PY) -r requirements.txt \
	  || $(PY) -m pip install --quiet --no-cache-dir -r requirements.txt
	touch $(STAMP)

# Python packages into .venv, JVM jars (Kafka broker, Spark connector, Delta, protobuf-java) and the
# project's own Spark SQL functions (compiled with javac) into .cache, and
# class-data-sharing archives for the Spark driver (about 30 s) and for Kafka's broker and tools
# (about 20 s), each built once and never failing setup
setup: $(STAMP)
	$(PY) -m include.spark.jvm_deps
	$(PY) -m include.tooling.jvm_cds_build
	$(PY) -m include.tooling.local_kafka archive

# Debian packages the tests use (never a downloaded browser): docker-compose for the Compose
# specification schema that tests/test_compose.py validates docker-compose.yaml against (no Docker
# engine needed); for make test-all also chromium and chromedriver, for the UI plugin's browser test.
COMPOSE_SCHEMA := /usr/lib/python3/dist-packages/compose/config/compose_spec.json
APT_INSTALL = SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); $$SUDO apt-get update -qq \
	  && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends
test-tools:
	@[ -f $(COMPOSE_SCHEMA) ] || { $(APT_INSTALL) docker-compose >/dev/null; }

# PostgreSQL (Debian's server package) for the change-data-capture test, unless a server is installed.
db-tools:
	@ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || { $(APT_INSTALL) postgresql >/dev/null; }

# Podman, runc, debootstrap (Debian's packages) and docker-compose for make test-compose.
container-tools: test-tools
	@command -v podman >/dev/null && command -v runc >/dev/null && command -v debootstrap >/dev/null || { \
	  $(APT_INSTALL) podman runc debootstrap >/dev/null; }

browser-tools:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
	  $(APT_INSTALL) chromium chromium-driver >/dev/null; }

demo: setup
	$(PY) -m include.tooling.demo $(if $(STORE),--store $(STORE))

ui: setup
	$(PY) -m include.tooling.ui

# The README's monitoring screenshots, from the demo's pipelines (after make demo), in the headless Chromium
# the UI test uses; docs/images/screenshots.json records each image's sha256 (tests/test_docs.py checks it).
screenshots: setup browser-tools
	$(PY) -m include.tooling.screenshots

# Three workers (pytest-xdist). --dist loadgroup keeps each costly thing a test needs on one worker
# (tests/conftest.py: the in-process SparkSession, the Airflow home, the fault soak), so it is paid for
# once; tests that need none of them fill the gaps. TEST_WORKERS=0: one process.
TEST_WORKERS ?= 3
XDIST := -n $(TEST_WORKERS) --dist loadgroup
# The fast tier: every test not marked `full` (pytest.ini). `make test-all` adds the full tier.
FAST := -m "not full and not scheduler_soak and not compose_stack"
# mypy's time is printed: on a fresh clone (as CI's) its cache is cold, the case that bounds CI.
MYPY_TIMED = cache=$$([ -d .cache/mypy ] && echo warm || echo cold); start=$$(date +%s); $(PY) -m mypy; status=$$?; \
	echo "mypy strict: $$(( $$(date +%s) - start )) s wall, $$cache cache"; exit $$status
test: setup test-tools
	$(PY) -m ruff check .
	$(PY) -m ruff format --check $(FORMATTED)
	@$(MYPY_TIMED)
	$(PY) -m pytest $(FAST) $(XDIST)

test-all: setup test-tools browser-tools db-tools
	$(PY) -m ruff check .
	$(PY) -m ruff format --check $(FORMATTED)
	@$(MYPY_TIMED)
	$(PY) -m pytest -m "not scheduler_soak and not compose_stack" $(XDIST)

# The fast tier, with each test's CPU measured over its worker's process tree: the costliest files and
# tests are printed at the end and kept in .cache/test-cpu/report.md (tests/cpu_report.py).
# `make test-cpu FAST=` measures every test.
test-cpu: setup test-tools browser-tools
	KDE_TEST_CPU_REPORT=$(CURDIR)/.cache/test-cpu $(PY) -m pytest $(FAST) $(XDIST)

# The fault soak's long mode: random kills and bounces across real DAG runs, exact checks after each fault
# (tests/soak). make test runs its smoke (each kind once), make test-all its 30-fault slice, both with a
# fixed seed. SOAK_SEED=<n> replays a sequence; SOAK_KINDS=driver,broker,... keeps only those kinds.
SOAK_FAULTS ?= 300
SOAK_SEED ?= random
soak: setup
	SOAK_FAULTS=$(SOAK_FAULTS) SOAK_SEED=$(SOAK_SEED) $(PY) -m pytest \
	  tests/soak/test_soak.py::test_random_faults_across_runs_lose_and_duplicate_nothing -p no:xdist -s --timeout 0

# The fault soak under a real scheduler (tests/soak/scheduler_soak.py), a tier of its own: the components
# started one by one, the pipeline's default retries, scheduled runs with data arriving, REST-triggered
# backfills, replays and normal runs, and 30 faults (SCHEDULER_SOAK_FAULTS) across every kind.
SCHEDULER_SOAK_FAULTS ?= 30
SCHEDULER_SOAK_SEED ?= 20261201
soak-scheduler: setup
	SOAK_FAULTS=$(SCHEDULER_SOAK_FAULTS) SOAK_SEED=$(SCHEDULER_SOAK_SEED) SOAK_KINDS=$(SOAK_KINDS) $(PY) -m pytest \
	  tests/soak/test_scheduler_soak.py -p no:xdist -s --timeout 0 -m scheduler_soak

# docker-compose.yaml started under Podman, a tier of its own (tests/compose_stack): every image built here
# (first use: see docs/docker-compose.md), two scheduled runs on the stack's own scheduler, the
# existing_master pipeline on its Spark master, then down -v. Images stay in .cache/containers.
test-compose: setup container-tools browser-tools
	$(PY) -m pytest tests/compose_stack -p no:xdist -s --timeout 0 -m compose_stack

# Everything the Compose test built (vfs keeps every layer as a full copy).
clean-containers:
	rm -rf .cache/containers

bench: setup
	$(PY) -m include.tooling.benchmark $(BENCH_ARGS)

# Where the transform's batch spends its time (a profile on this machine, not a comparison).
profile-transform: setup
	$(PY) -m include.tooling.transform_profile $(PROFILE_ARGS)

# ruff's linter, and its formatter as a check on the packages it lays out: include/contract and
# include/config are `ruff format`-clean with no `# fmt: skip`; the rest of the code keeps hand-aligned
# argument lists (marked `# fmt: skip`) that the formatter would rewrap. `make test` runs these same checks.
FORMATTED := include/contract include/config
lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check $(FORMATTED)

# mypy, strict on every layer of include/ but the tooling, and on spark_jobs/, dags/ and plugins/
# (pyproject.toml's [tool.mypy]; its cache is in .cache/mypy): pure Python from PyPI, where pyright needs a
# Node runtime; its pydantic plugin reads the config models, and PySpark and Airflow ship inline types.
# `make test` and `make test-all` run it right after ruff.
typecheck: setup
	$(PY) -m mypy

# Re-resolve every transitive version from requirements.txt alone, then lock it.
lock:
	rm -rf /tmp/kde-lock-venv && $(PYTHON) -m venv /tmp/kde-lock-venv
	grep -v '^-c ' requirements.txt > /tmp/kde-lock-requirements.txt
	/tmp/kde-lock-venv/bin/pip install --quiet --no-cache-dir -r /tmp/kde-lock-requirements.txt
	(echo "# Full lock of the project's Python environment (make lock)."; \
	 /tmp/kde-lock-venv/bin/pip freeze) > constraints.txt

clean:
	rm -rf $(VENV) var .cache/build
