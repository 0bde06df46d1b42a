# Two commands on a fresh machine (Python 3.11, Java 17, pip): `make run` and `make test`.
# Both create the virtualenv and install what they need; reinstall happens when pyproject.toml or setup.py changes.

PYTHON ?= python3
# Bytecode caches for the project's own modules and pytest's rewritten tests (__pycache__ is
# ignored by git): an environment that turns them off (PYTHONDONTWRITEBYTECODE) makes every
# process the suite starts compile them again, 12 s of each test worker's collection alone.
unexport PYTHONDONTWRITEBYTECODE
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# Every distribution pinned for this Python (constraints/generate.py writes the files): pip installs
# them without resolving anything, and CI installs exactly what the suite was run with.
PYVER       := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
CONSTRAINTS := constraints/constraints-$(PYVER).txt

.PHONY: run airflow stack stack-down cluster cluster-down test check lint docs docs-build bench clean reference constraints

# setuptools' editable build always adds a notice ("Editable installation ... folders in your
# working directory"): the install prints nothing else, so that one is filtered out too.
$(STAMP): pyproject.toml setup.py $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=24"
	PYTHONWARNINGS="ignore:Editable installation" $(BIN)/python -m pip install --quiet -e '.[airflow,spark,quality,dev]' -c $(CONSTRAINTS)
	touch $(STAMP)

# Resolve the constraints files again (after a pin changed in pyproject.toml): one fresh
# virtualenv per Python version deltaplane supports that this machine has.
constraints:
	$(PYTHON) constraints/generate.py $(foreach v,3.11 3.12 3.13,$(if $(shell command -v python$(v)),--python python$(v)))

# The project's main job on embedded defaults: the platform's DAGs on a local folder lake,
# a SQLite Airflow home and Spark local[2], all under ./demo/.
run: $(STAMP)
	$(BIN)/python -m deltaplane.devstack.demo --demo ./demo

# The Airflow UI on the same DAGs and home (http://127.0.0.1:8080; user admin, password in
# demo/airflow/simple_auth_manager_passwords.json.generated): api-server, scheduler, dag-processor
# and triggerer started one by one, every socket on 127.0.0.1 (no log servers on 0.0.0.0, unlike
# `airflow standalone`). Ctrl-C stops them by PID; they stop themselves after AIRFLOW_MINUTES.
AIRFLOW_ROOT    ?= $(CURDIR)/demo/airflow
AIRFLOW_PORT    ?= 8080
AIRFLOW_MINUTES ?= 240
airflow: $(STAMP)
	$(BIN)/python -m deltaplane.devstack.stack airflow --root $(AIRFLOW_ROOT) --port $(AIRFLOW_PORT) \
	  --dags $(CURDIR)/dags --config $(CURDIR)/config/tables.yaml --max-minutes $(AIRFLOW_MINUTES)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports

# The docker-compose topology natively on 127.0.0.1 (SeaweedFS, Spark master + worker, Airflow
# api-server/scheduler/dag-processor/triggerer), under ./demo/stack; stops itself after 4 hours.
stack: $(STAMP)
	$(BIN)/python -m deltaplane.devstack.stack up --root ./demo/stack

# Stop exactly the processes `make stack` started (by the PIDs in demo/stack/pids.json).
stack-down:
	$(BIN)/python -m deltaplane.devstack.stack down --root ./demo/stack

# The platform on seven hosts of this machine (network, mount and UTS namespaces on a bridge; needs
# root): SeaweedFS's master + filer/S3 and two volume servers, a Spark master and two workers, and
# a client host, under ./demo/cluster; each host has its own /tmp, only S3 is shared. Stops itself
# after CLUSTER_MINUTES; `make cluster-down` stops exactly what it started, by PID.
CLUSTER_MINUTES ?= 120
cluster: $(STAMP)
	$(BIN)/python -m deltaplane.devstack.cluster up --root ./demo/cluster --max-minutes $(CLUSTER_MINUTES)

cluster-down:
	$(BIN)/python -m deltaplane.devstack.cluster down --root ./demo/cluster

# Delta Spark, the reference implementation, in its own virtualenv (pyspark 4.2 + delta-spark 4.4)
# with Delta's jars from Maven Central, under .cache/delta-spark; redone when its pins change.
REFERENCE := .cache/delta-spark
$(REFERENCE)/stamp: tests/deltaspark/requirements.txt tests/deltaspark/pom.xml
	$(PYTHON) tests/deltaspark/provision.py --home $(REFERENCE)
reference: $(REFERENCE)/stamp

# The docs site (mkdocs.yml, docs/): served on 127.0.0.1 only, rebuilt as pages change.
# DOCS_PORT picks another port. tests/test_docs_site.py builds it with --strict in `make test`.
DOCS_PORT ?= 8000
docs: $(STAMP)
	$(BIN)/mkdocs serve --strict --dev-addr 127.0.0.1:$(DOCS_PORT)

docs-build: $(STAMP)
	$(BIN)/mkdocs build --strict

# The inner loop: lint, the import contracts and every test that starts no external process (no
# Spark, Delta Spark, Airflow component, SeaweedFS or Chromium; tests/tiers.py says which and
# fails a test that starts one anyway) and is not marked slow (scale and end-to-end runs).
# Needs neither Java nor the reference virtualenv.
check: lint
	$(BIN)/python -m pytest --fast -m "not slow" -n 3 -q

# The whole suite: lint, import-layer contract, then every test tier (the differential and
# cross-implementation tests against Delta Spark included).
test: lint $(REFERENCE)/stamp
	$(BIN)/python -m pytest -n 3 --dist loadgroup --durations=30

bench: $(STAMP) $(REFERENCE)/stamp
	$(BIN)/python benchmarks/snapshot_load.py
	$(BIN)/python benchmarks/write_commit.py
	$(BIN)/python benchmarks/partitioned_write.py
	$(BIN)/python benchmarks/dml.py
	$(BIN)/python benchmarks/optimize_compact.py
	$(BIN)/python benchmarks/zorder_skipping.py --spark
	$(BIN)/python benchmarks/page_checksums.py
	$(BIN)/python benchmarks/everyday.py
	$(BIN)/python benchmarks/cold_start.py
	$(BIN)/python benchmarks/spark.py
	$(BIN)/python benchmarks/read_floor.py
	$(BIN)/python benchmarks/spark_planning.py
	$(BIN)/python benchmarks/s3_latency.py
	$(BIN)/python benchmarks/stats_planning.py
	$(BIN)/python benchmarks/clustering_skipping.py
	$(BIN)/python benchmarks/delta_spark.py

clean:
	rm -rf $(VENV) demo demo-table .pytest_cache .ruff_cache
