PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test install bench clean kcat

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	exec $(BIN)/kbroker serve --override log.dirs=./data

kcat:
	@command -v kcat >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || command -v sudo >/dev/null && echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq kcat; }

test: $(STAMP) kcat
	$(BIN)/python -m pytest -q -p no:cacheprovider; rc=$$?; [ $$rc -eq 5 ] && rc=0; exit $$rc

bench: $(STAMP)
	$(BIN)/python -m benchmarks.produce_consume

clean:
	rm -rf $(VENV) data
