# Two commands do all set-up on a fresh machine: `make serve` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 30000

.PHONY: install serve test test-fast clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# CPU build of torch, pinned; everything else from pyproject.
	$(PIP) install -q "torch==2.13.0"
	$(PIP) install -q -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

serve: $(STAMP)
	$(VENV)/bin/sglang serve --host $(HOST) --port $(PORT)

test: $(STAMP)
	$(PY) -m pytest -q test

test-fast: $(STAMP)
	$(PY) -m pytest -q test -m "not slow"

clean:
	rm -rf $(VENV) build python/*.egg-info
