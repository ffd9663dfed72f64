# The front door: `make demo`, `make test`. Each builds .venv first when it is missing or stale.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: install demo test test-fast lint format lock clean test-deploy bench bench-fixed-cost \
	cluster-up cluster-down cluster-status test-cluster wheel test-compat test-release \
	test-guarantees test-reference compat-venv s3-server s3-faults

install: $(STAMP)

# The venvs are filled by uv (pinned here, pip-installed into .venv first), from the same pins
# as pip would: a fresh .venv in 42 and 37 s against pip's 114 s, the Airflow venv in 5 s
# against 115 s (2026-12-07, this machine, both tools' caches warm: what a fresh clone on a
# machine that built one before meets). `pip check` still judges each venv.
UV_VERSION := 0.13.9
UV := $(BIN)/uv

$(UV):
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

$(STAMP): pyproject.toml constraints.txt Makefile | $(UV)
	$(UV) pip install --quiet --python $(BIN)/python -c constraints.txt -e '.[local,dev,bench]'
	$(BIN)/python -m pip check
	@touch $(STAMP)

demo: install
	$(BIN)/logmetrics demo

# The real S3 server of the object-storage tests and benchmark (SeaweedFS, built from its pinned
# Go module into ~/.cache/logmetrics, outside the clone: a few minutes once per machine, then
# nothing): deploy/s3/seaweedfs.sh, benchmarks/s3_server.py.
s3-server:
	@bash deploy/s3/seaweedfs.sh build >/dev/null

# The storage-fault tests' injector between S3A and that server (Toxiproxy, built from its pinned
# Go module into the same cache: a minute once per machine): deploy/s3/toxiproxy.sh,
# tests/storage_faults.py.
s3-faults: s3-server
	@bash deploy/s3/toxiproxy.sh build >/dev/null

# The suite on three workers (pytest-xdist, a module per worker at a time: tests/conftest.py
# hands out the longest first) on plain Spark (the suite's engine: tests/suite_session.py), but
# the guarantees of whole processes and stores (`reliability`, `objectstore`), the modules that
# compare every published table with the pure-Python reference (REFERENCE_TESTS) and the whole
# runs of many thousands of requests a user meets first (WHOLE_RUN_TESTS): .ci/run runs, after
# it, `make test-guarantees` (those guarantees, then REFERENCE_TESTS and WHOLE_RUN_TESTS on
# Comet, the default engine, with a large cluster table's other plans, marked `plans`), `make
# test-compat` (the Spark 4.0 line, the wheel on a runtime) and `make test-deploy` (the Airflow
# DAGs and the bundle, in their own venv); `make test-release` what needs no checking per change
# (a Hive metastore, the reference tests on plain Spark 4.1 and 4.0, the snippets' venvs). `make
# test` keeps one reference test on plain Spark: tests/test_log_shapes.py's property test, every
# log shape and mapping against the reference. `make test-reference`: REFERENCE_TESTS and
# WHOLE_RUN_TESTS on plain Spark.
REFERENCE_TESTS := tests/test_properties.py tests/test_end_to_end.py tests/test_hostile.py \
	tests/test_traces_end_to_end.py
# The README as a stranger runs it (`logmetrics demo`: 600,000 served rows, then every command
# the README shows) and the alerts found on 45,000 generated requests, each row against the
# independent rule: on the engine a user's run starts, Comet. 358 and 148 s of the 1892 s of
# worker time `make test` took with them (2026-12-07, a fresh clone, platform floor 14 s: 10:45).
WHOLE_RUN_TESTS := tests/test_readme.py tests/test_alerts_end_to_end.py
# Three workers on 2 cores: the suite's backfills wait on Delta commits and on the processes some
# tests start, so a third worker fills the cores (2026-12-02, the same hour, platform floor 14 s:
# 20:18 on two workers, 16:55 on three; 2026-12-04, one pair in a working tree, four first:
# 16:02 on four, 15:44 on three). xdist's own order (by number of tests) is turned off.
XDIST := -n 3 --dist loadfile --no-loadscope-reorder

test: install s3-server
	$(BIN)/python -m pytest $(XDIST) $(REFERENCE_TESTS:%=--ignore=%) $(WHOLE_RUN_TESTS:%=--ignore=%) \
		-m "not platform and not reliability and not objectstore and not snippets and not plans" \
		--durations=30

# The Spark 4.0 line (pyspark 4.0.1 + delta-spark 4.0.1, what Databricks 17.3 LTS runs), not part
# of `make test` (.ci/run runs it after): .venv-compat holds the wheel with its `local` extra
# pinned by constraints-spark40.txt and runs, on plain Spark (Comet has no Spark 4.0 build) with
# generated code on (the engine's production path; `make test` runs interpreted:
# tests/suite_session.py), tests/test_wheel.py (the wheel pip-installed into a venv holding only
# pyspark 4.0 leaves it as it is, and backfills through spark-submit), the session's settings, and
# the write orders of an append beside a replace (Delta 4.0's history and userMetadata).

COMPAT_VENV  := .venv-compat
COMPAT_STAMP := $(COMPAT_VENV)/.installed-stamp

wheel: install
	rm -rf dist
	$(BIN)/python -m pip wheel --quiet --disable-pip-version-check --no-deps -w dist .

# Its dependencies, from the wheel `wheel` has just built (test-compat builds it first).
$(COMPAT_STAMP): pyproject.toml constraints-spark40.txt | $(UV)
	@test -x $(COMPAT_VENV)/bin/python || $(PYTHON) -m venv $(COMPAT_VENV)
	$(UV) pip install --quiet --python $(COMPAT_VENV)/bin/python -c constraints-spark40.txt \
		"$$(ls dist/logmetrics-*.whl)[local,dev]" uv==$(UV_VERSION)
	@touch $(COMPAT_STAMP)

compat-venv: wheel $(COMPAT_STAMP)
	$(UV) pip install --quiet --python $(COMPAT_VENV)/bin/python --no-deps --reinstall \
		dist/logmetrics-*.whl
	$(COMPAT_VENV)/bin/python -m pip check

COMPAT_TESTS := tests/test_wheel.py tests/test_session.py tests/flows/test_append_writes.py

test-compat: compat-venv
	LOGMETRICS_TEST_CODEGEN=on $(COMPAT_VENV)/bin/python -m pytest $(XDIST) -p no:cacheprovider \
		--durations=15 --run-wheel $(COMPAT_TESTS)

# The guarantees, checked on every change (.ci/run runs them after `make test`; about half an
# hour on 2 cores, docs/development.md "What CI runs"): a nightly killed at its commits and two
# runs of one day at once, signals to a run's process group in its main pass and its commits,
# twice, and a SIGKILL, backfills killed and resumed and three at once, a broadcast too large
# for its driver, a restatement held over published days (marked `reliability`); whole runs on a
# real S3 server, and the storage faults where each client of the store meets each fault
# (`objectstore`); then the tests that compare every published table with the pure-Python
# reference (REFERENCE_TESTS) on Comet, the default engine, among them a large cluster table's
# other plans (`plans`: kept keys, a cut-down broadcast, a shuffle join), and the README's demo
# and commands and the alerts on generated history (WHOLE_RUN_TESTS) on it too.
GUARANTEE_TESTS := tests/flows/test_nightly_commits.py tests/test_stopping.py \
	tests/test_object_storage_runs.py tests/test_orchestration.py tests/test_cli_process.py \
	tests/flows/test_held_days.py tests/faults
GUARANTEES := $(BIN)/python -m pytest $(XDIST) --durations=15 $(GUARANTEE_TESTS) -m
ON_COMET   := LOGMETRICS_TEST_ACCELERATOR=comet $(BIN)/python -m pytest $(XDIST) --durations=15 \
	$(REFERENCE_TESTS) $(WHOLE_RUN_TESTS) -m

test-guarantees: install s3-faults
	$(GUARANTEES) "(reliability or objectstore) and not exhaustive"
	$(ON_COMET) "not platform and not snippets"

# `make test-release` (run by hand before a release, and after changing how runs commit, stop or
# store: about an hour on 2 cores): what .ci/run leaves out, since a change does not move it, with
# the guarantees whole. In .venv the catalog tables on a real Hive metastore (marked `platform`),
# the guarantees with every storage fault at every point of a nightly (`exhaustive`: .ci/run
# meets each at some), the reference tests on Comet with docs/tables.md's read-without-Spark
# snippets, each in a fresh venv of its own pip line (`snippets`); the reference tests on plain
# Spark 4.1 (`make test-reference`); then on the Spark 4.0 line, compiled. So the reference tests
# run three times: Comet 4.1 (.ci/run), plain Spark 4.1 and plain compiled Spark 4.0.
test-release: compat-venv s3-faults
	$(BIN)/python -m pytest $(XDIST) -m platform tests/test_hive_metastore.py
	$(GUARANTEES) "reliability or objectstore"
	$(ON_COMET) "not platform"
	$(MAKE) test-reference
	LOGMETRICS_TEST_CODEGEN=on $(COMPAT_VENV)/bin/python -m pytest $(XDIST) -p no:cacheprovider \
		-m "not snippets" --durations=15 $(REFERENCE_TESTS)

test-reference: install s3-server
	$(BIN)/python -m pytest $(XDIST) --durations=15 $(REFERENCE_TESTS) $(WHOLE_RUN_TESTS) \
		-m "not snippets"

# Two workers, a JVM each: 4:21 and 4:25 against 5:58 and 6:36 in one process, three workers
# 4:54 and 5:00 (2026-12-03, alternating, platform floor 23 s that hour). On the suite's engine
# (plain Spark): 4:23 against 4:04 on Comet, one pair (plain first, floor 32 s): no gain here.
test-fast: install s3-server
	$(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder -m "not slow"

# The performance benchmark (benchmarks/README.md), not part of `make test`: logmetrics (Comet on,
# Comet off, one 90-day chunk) against a DuckDB reference, a plain-Spark floor and a naive Spark
# plan on 90 days of generated traffic, alternately, outputs checked, peak PSS measured.
# Its extra packages (the `bench` extra: duckdb, psutil) are in .venv: `make install` puts them
# there, since tests/test_benchmarks.py checks the benchmark's bookkeeping in `make test`.
# BENCH_ARGS, e.g. `--repeats 1`, are passed on (`.venv/bin/python -m benchmarks --help`).
bench: install
	$(BIN)/python -m benchmarks $(BENCH_ARGS)

# The fixed-cost stage of `make bench` alone (benchmarks/README.md, "Fixed cost"): the platform
# floor, a nightly day and a tiny day, alternately. E.g. BENCH_ARGS='--rounds 5'.
bench-fixed-cost: install
	$(BIN)/python -m benchmarks.fixed_cost $(BENCH_ARGS)

# A Spark standalone master, two workers and a Spark Connect server with Delta, on loopback
# (docs/cluster.md): the same job through spark-submit and through SPARK_REMOTE. Ports from
# SPARK_MASTER_PORT, SPARK_MASTER_WEBUI_PORT, SPARK_WORKER_WEBUI_PORT, SPARK_CONNECT_PORT;
# logs and pids under .cluster/. `cluster-down` leaves no process behind.
cluster-up: install
	bash deploy/cluster/cluster.sh up

cluster-down:
	bash deploy/cluster/cluster.sh down

cluster-status:
	bash deploy/cluster/cluster.sh status

# Not part of `make test` (it skips these tests, saying so): brings the cluster up, backfills the
# same generated logs locally, with spark-submit and through Spark Connect, compares the tables,
# and brings the cluster down whatever happened. A few minutes on 2 cores.
test-cluster: install
	$(BIN)/python -m pytest tests/test_cluster.py --run-cluster -p no:cacheprovider

lint: install
	$(BIN)/ruff check src tests jobs benchmarks
	$(BIN)/ruff format --check src tests jobs benchmarks
	$(BIN)/mypy

format: install
	$(BIN)/ruff format src tests jobs benchmarks
	$(BIN)/ruff check --fix src tests jobs benchmarks

# Re-resolve the pins from pyproject.toml in a scratch venv and write constraints.txt.
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/python -m pip install --quiet -e '.[local,dev,bench]'
	.lock-venv/bin/python -m pip check
	{ head -n 2 constraints.txt; .lock-venv/bin/python -m pip freeze --exclude-editable; } > constraints.txt.new
	mv constraints.txt.new constraints.txt && rm -rf .lock-venv

clean:
	rm -rf $(VENV) $(COMPAT_VENV) dist .ivy2 .cluster warehouse data logs reports spark-warehouse .pytest_cache .hypothesis \
		bench-data bench-out

# Not part of `make test` (.ci/run runs it after test-compat).
# DAG tests for deploy/airflow/dags (+ the bundle checks), in their own venv: Airflow pins clash
# with the main one. They parse and render the DAGs and play deploy/airflow/README.md's first
# deployment: its `make wheel` (so `install`: the wheel is built from .venv), then its two
# workers built by its own commands into a temporary folder for /opt/logmetrics, step 3's (the
# wheel with its `[local]` extra), then step 4's (the wheel alone), in the background while the
# tests that need neither run (tests/deploy/conftest.py; the summary says what they cost). On
# them: `logmetrics ready` on both, `run` and `backfill` where there is no PySpark, and the
# backfill and nightly DAGs for real (`airflow dags test` and dag.test(), a SQLite database in
# the throwaway AIRFLOW_HOME) through the worker's spark-submit on generated logs. A worker
# that cannot be built fails its tests: nothing here skips. The 9 tests that import logmetrics
# in their own process (marked `imports_logmetrics`: the bundle's arguments through the real
# parser, the uploaded config loaded, the Delta jars of the pinned pairs) are deselected here
# by tests/deploy/conftest.py, as this venv has no logmetrics; `make test` runs them in .venv.
# Starts local Spark: a few minutes on 2 cores.
AF_VENV  := .venv-airflow
AF_STAMP := $(AF_VENV)/.installed-stamp

$(AF_STAMP): deploy/airflow/requirements.txt deploy/airflow/constraints.txt | $(UV)
	@test -x $(AF_VENV)/bin/python || $(PYTHON) -m venv $(AF_VENV)
	$(UV) pip install --quiet --python $(AF_VENV)/bin/python -r deploy/airflow/requirements.txt
	$(AF_VENV)/bin/python -m pip check
	@touch $(AF_STAMP)

test-deploy: install $(AF_STAMP)
	rm -rf $(AF_VENV)/airflow-home
	AIRFLOW_HOME=$(CURDIR)/$(AF_VENV)/airflow-home AIRFLOW__CORE__LOAD_EXAMPLES=False \
		$(AF_VENV)/bin/python -m pytest tests/deploy -q --confcutdir=tests/deploy -p no:cacheprovider
