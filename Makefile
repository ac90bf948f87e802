# The two quick-start commands: `make run` and `make test`. Both set up everything they need.
.PHONY: run test test-faked-time lint typecheck bench setup-local setup-test

VENV ?= .venv
PY := $(VENV)/bin/python

run: setup-local
	$(VENV)/bin/engram serve $(ARGS)

test: setup-test lint typecheck
	$(PY) -m pytest -m "not slow and not aws" $(ARGS)

# The unit and contract suites at fixed faked moments (CI runs this after `make test`).
test-faked-time: setup-test
	ENGRAM_VENV=$(VENV) scripts/test-at-fixed-times.sh $(ARGS)

lint:
	$(VENV)/bin/ruff check functions tests bench infra app.py
	$(VENV)/bin/ruff format --check functions tests bench infra app.py

typecheck:
	$(VENV)/bin/mypy

bench: setup-test
	$(PY) bench/run_all.py $(ARGS)

setup-local:
	@ENGRAM_VENV=$(VENV) scripts/setup.sh local

setup-test:
	@ENGRAM_VENV=$(VENV) scripts/setup.sh test
