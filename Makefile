# One entry point for people and CI alike: `.ci/run` calls `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV := .venv
PY := $(VENV)/bin/python
ENV := . .stack/env.sh &&
PYTEST_ARGS ?=

.PHONY: install lock browser stack-up stack-down stack-status lint test test-unit demo bench api clean

install: $(VENV)/.installed

# pip itself and the build's setuptools are pinned too (build-constraints.txt): a new release
# of either must not change what a fresh machine installs.
$(VENV)/.installed: pyproject.toml constraints.txt build-constraints.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q -c build-constraints.txt pip
	$(VENV)/bin/pip install -q -c constraints.txt --build-constraint build-constraints.txt -e '.[dev]'
	touch $@

# Refresh constraints.txt from a fresh resolution of pyproject.toml's ranges.
lock:
	rm -rf .lock-venv && python3 -m venv .lock-venv
	.lock-venv/bin/pip install -q -c build-constraints.txt pip
	.lock-venv/bin/pip install -q --build-constraint build-constraints.txt -e '.[dev]'
	{ echo "# Exact versions CI and 'make install' use (pip constraints). Regenerate: make lock"; \
	  .lock-venv/bin/pip freeze --exclude-editable; } > constraints.txt
	rm -rf .lock-venv

# A Chromium for the review-desk browser test (Playwright drives it; nothing is downloaded): the
# `chromium` on PATH, which the test looks up the same way; Debian's package when there is none.
browser:
	@command -v chromium >/dev/null || { \
	  [ "$$(id -u)" -eq 0 ] || { echo "missing system package: chromium (run as root, or: sudo apt-get install -y chromium)" >&2; exit 1; }; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

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

test: install browser stack-up
	$(MAKE) --no-print-directory lint
	$(ENV) $(PY) -m pytest $(PYTEST_ARGS)

demo: install stack-up
	$(ENV) $(PY) -m refund_bench.demo

bench: install stack-up
	$(ENV) $(PY) -m bench

# The intake API and review desk on :8080 (set API_TOKENS, SESSION_SECRET, REVIEWERS first).
api: install stack-up
	$(ENV) $(PY) -m services.api

clean:
	stack/down.sh --wipe
	rm -rf $(VENV) test-artifacts
