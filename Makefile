# One entry point for people and CI alike: `.ci/run` calls `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV := .venv
PY := $(VENV)/bin/python
ENV := . .stack/env.sh &&
PYTEST_ARGS ?=

.PHONY: install stack-up stack-down stack-status topics lint test test-unit demo bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $@

stack-up: install
	stack/up.sh
	$(ENV) $(PY) -m refund_bench.provision

stack-down:
	stack/down.sh

stack-status:
	stack/status.sh

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

test-unit: install
	$(PY) -m pytest tests/unit -q $(PYTEST_ARGS)

test: install stack-up
	$(MAKE) --no-print-directory lint
	$(ENV) $(PY) -m pytest $(PYTEST_ARGS)

demo: install stack-up
	$(ENV) $(PY) -m refund_bench.demo

bench: install stack-up
	$(ENV) $(PY) -m bench

clean:
	stack/down.sh --wipe
	rm -rf $(VENV) test-artifacts
