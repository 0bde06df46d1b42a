# Two commands on a fresh machine (Python 3.11, Java 17, pip): `make run` and `make test`.
# Both create the virtualenv and install what they need; reinstall happens when pyproject changes.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: run test lint unit conformance bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=24"
	$(BIN)/python -m pip install --quiet -e '.[airflow,spark,quality,dev]'
	touch $(STAMP)

# The project's main job on embedded defaults.
run: $(STAMP)
	$(BIN)/deltaplane demo ./demo-table

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports

# The whole suite: lint, import-layer contract, then every test tier.
test: lint
	$(BIN)/python -m pytest -n 2 --dist loadgroup

bench: $(STAMP)
	$(BIN)/python benchmarks/snapshot_load.py
	$(BIN)/python benchmarks/write_commit.py
	$(BIN)/python benchmarks/dml.py
	$(BIN)/python benchmarks/optimize_compact.py
	$(BIN)/python benchmarks/zorder_skipping.py --spark
	$(BIN)/python benchmarks/page_checksums.py
	$(BIN)/python benchmarks/everyday.py
	$(BIN)/python benchmarks/spark.py

clean:
	rm -rf $(VENV) demo-table .pytest_cache .ruff_cache
