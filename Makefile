PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Touched after a successful install: pip runs again only when pyproject.toml is newer.
STAMP := $(VENV)/.installed

.PHONY: run test install kcat bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	exec $(BIN)/kbroker serve --override log.dirs=./data

# The kcat integration tests need the real binary; root installs directly, others through sudo.
kcat:
	@if ! command -v kcat >/dev/null 2>&1; then \
	  SUDO=; \
	  if [ "$$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq kcat; \
	fi

# pytest exits 5 when it collects no tests: that is not a failure here.
test: $(STAMP) kcat
	$(BIN)/python -m pytest -q -p no:cacheprovider; rc=$$?; if [ $$rc -eq 5 ]; then rc=0; fi; exit $$rc

bench: $(STAMP)
	$(BIN)/python -m benchmarks.produce_consume

clean:
	rm -rf $(VENV) data
