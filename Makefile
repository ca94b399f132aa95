# streamtable: `make demo` and `make test` are all a fresh machine needs (see README.md).
# Every target runs with the environment below; override any of it on the command line or in the env.

SHELL := /bin/bash
ROOT := $(CURDIR)
VENV := $(ROOT)/.venv
PY := $(VENV)/bin/python

export AIRFLOW_HOME ?= $(ROOT)/airflow_home
export AIRFLOW__CORE__DAGS_FOLDER ?= $(ROOT)/dags
export AIRFLOW__CORE__LOAD_EXAMPLES ?= False
# SparkSubmitHook: conn_type spark with a host and no port -> `--master local[2]`.
export AIRFLOW_CONN_SPARK_DEFAULT ?= {"conn_type": "spark", "host": "local[2]", "description": "spark-submit on this machine"}
export PYSPARK_PYTHON ?= $(VENV)/bin/python
export PYSPARK_DRIVER_PYTHON ?= $(VENV)/bin/python
export STREAMTABLE_LAKE ?= $(ROOT)/lake
# The seven built-in pipelines are examples: their Airflow DAGs are made only where asked (a team's Airflow shows its
# own pipelines alone). This checkout's Airflow (make demo, the tests, CI) asks for them.
export STREAMTABLE_EXAMPLES ?= 1
# The jars of every Spark job: this checkout's jars/ (make setup fills it; an installed package: `streamtable jars fetch`).
export STREAMTABLE_JARS ?= $(ROOT)/jars
export SPARK_LOCAL_IP ?= 127.0.0.1
export GX_ANALYTICS_ENABLED ?= false
export PATH := $(VENV)/bin:$(PATH)
ifndef JAVA_HOME
  JAVA_HOME := $(shell j=$$(command -v java 2>/dev/null) && dirname "$$(dirname "$$(readlink -f "$$j")")")
endif
ifneq ($(JAVA_HOME),)
  export JAVA_HOME
endif

DEMO_LAKE ?= $(ROOT)/build/demo_lake
PYTEST_ARGS ?=
# mypy's cache outside the checkout: a fresh clone (CI's) checks only what changed, 0.7 s instead of 20 s of CPU
MYPY_CACHE_DIR ?= $(HOME)/.cache/streamtable/mypy
# pytest-xdist: whole files on three workers (on 2 cores: the tests wait on JVMs, Airflow and servers often enough),
# longest first (tests/conftest.py); WORKERS= runs them one by one.
WORKERS ?= -n 3 --dist loadfile --no-loadscope-reorder

.PHONY: help setup wheel demo test test-quick test-all campaign reference lint cluster-start cluster-stop kafka kafka-stop object-store object-store-stop bench env clean distclean

help:
	@echo "make setup     install everything into the project (.venv, jars/, airflow_home/); fast when done"
	@echo "make wheel     build the wheel and sdist into dist/ (uv build, seconds, no setup needed): what a team installs"
	@echo "make demo      run the clicks_per_region example through Airflow on a fresh demo lake"
	@echo "make test      every test, on three workers (what CI runs); the integration test needs PostgreSQL (skipped"
	@echo "               without it unless STREAMTABLE_REQUIRE_INTEGRATION=1); WORKERS= runs them one by one"
	@echo "make test-quick the tests that start no Spark process of their own (-m \"not slow\"): unit, DAGs, in-process Spark"
	@echo "make campaign SEED=1 N=50  generated pipelines vs their models (driver; every CLI_EVERY-th, default 10, CLI too);"
	@echo "               each failure: its pipeline file, inputs and replay command, in build/campaign/case-SEED"
	@echo "make reference docs/reference.md, the API reference, from the docstrings (Sphinx autodoc; scripts/reference.sh)"
	@echo "make lint      ruff check, ruff format --check, mypy (config: pyproject.toml); seconds (mypy's first run on a machine ~20 s, its cache in ~/.cache/streamtable/mypy)"
	@echo "make cluster-start / cluster-stop   a Spark standalone master + worker (scripts/spark-cluster.sh)"
	@echo "make kafka / kafka-stop   a local Kafka broker (scripts/kafka.sh): eval \"\$$(make -s kafka)\" sets STREAMTABLE_KAFKA"
	@echo "make object-store / object-store-stop   a local S3 server (scripts/object-store.sh), bucket streamtable:"
	@echo "               eval \"\$$(make -s object-store)\" sets AWS_ENDPOINT_URL and the credentials for s3://streamtable/..."
	@echo "make bench     the benchmarks (bench/run.py)"
	@echo "make env       print the environment as shell exports: eval \"\$$(make -s env)\""
	@echo "make clean     remove airflow_home/, build/ (the demo lake) and caches; ./lake is kept"
	@echo "make distclean clean, and remove .venv and jars/ too"

setup:
	@bash scripts/setup.sh

# The wheel and sdist in seconds, without the developer setup: the Data Docs assets the wheel ships
# (scripts/fetch_web_assets.py: standard library only, npm tarballs cached per machine), then uv's build (setuptools in
# an isolated environment). uv is the one on PATH (.venv's after make setup), else the version setup pins, installed
# once into build/uv.
UV_VERSION := $(shell sed -n 's/^UV_VERSION=\([0-9.]*\).*/\1/p' scripts/setup.sh)
WHEEL_PYTHON ?= $(or $(wildcard $(PY)),$(STREAMTABLE_PYTHON),python3.11)
wheel:
	rm -rf dist
	$(WHEEL_PYTHON) scripts/fetch_web_assets.py >/dev/null
	@if command -v uv >/dev/null 2>&1; then uv=uv; else uv=build/uv/bin/uv; \
	  [ -x $$uv ] || { $(WHEEL_PYTHON) -m venv build/uv && build/uv/bin/pip install -q --disable-pip-version-check "uv==$(UV_VERSION)"; }; \
	fi; $$uv build -q --out-dir dist
	rm -rf include/streamtable.egg-info  # setuptools' copy of the metadata, on the import path (scripts/setup.sh)
	@ls dist

demo: setup
	@DEMO_LAKE="$(DEMO_LAKE)" bash scripts/demo.sh

# Every test's worker, start, wall and CPU seconds, a JSON line each (tests/conftest.py: how to sum them per file)
TEST_TIMES ?= $(ROOT)/build/test-times.jsonl
test: setup
	STREAMTABLE_TEST_TIMES=$(TEST_TIMES) $(PY) -m pytest -m "not extended" $(WORKERS) $(PYTEST_ARGS)

# The campaign of generated pipelines (issue 36; docs/your-own-pipeline.md, "The campaign"): N cases from SEED.
SEED ?= 1
N ?= 50
CLI_EVERY ?= 10
campaign: setup
	$(PY) scripts/campaign.py --seed $(SEED) -n $(N) --cli-every $(CLI_EVERY)

test-quick: setup
	$(PY) -m pytest -m "not slow" $(WORKERS) $(PYTEST_ARGS)

test-all: setup
	STREAMTABLE_TEST_TIMES=$(TEST_TIMES) $(PY) -m pytest $(WORKERS) $(PYTEST_ARGS)

reference: setup
	@bash scripts/reference.sh

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy --cache-dir "$(MYPY_CACHE_DIR)"

cluster-start: setup
	@bash scripts/spark-cluster.sh start

cluster-stop:
	@bash scripts/spark-cluster.sh stop

# No `setup` prerequisite: stdout must be the export line alone (the jars come from make setup).
kafka:
	@bash scripts/kafka.sh start

kafka-stop:
	@bash scripts/kafka.sh stop

# No `setup` prerequisite either: stdout is the export lines alone (set-up builds the server and links it).
object-store:
	@bash scripts/object-store.sh start

object-store-stop:
	@bash scripts/object-store.sh stop

bench: setup
	$(PY) bench/suite.py $(BENCH_ARGS)

ENV_VARS := AIRFLOW_HOME AIRFLOW__CORE__DAGS_FOLDER AIRFLOW__CORE__LOAD_EXAMPLES AIRFLOW_CONN_SPARK_DEFAULT \
	PYSPARK_PYTHON PYSPARK_DRIVER_PYTHON STREAMTABLE_LAKE STREAMTABLE_EXAMPLES STREAMTABLE_JARS SPARK_LOCAL_IP GX_ANALYTICS_ENABLED JAVA_HOME PATH
env:
	@$(foreach v,$(ENV_VARS),printf "export %s=%q\n" $(v) "$$$(v)";)

clean:
	rm -rf airflow_home build dist spark-warehouse metastore_db derby.log .pytest_cache $(VENV)/.streamtable-setup
	find . -path ./.venv -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) jars/*.jar jars/kafka/*.jar jars/s3a/*.jar
