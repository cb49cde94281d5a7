# Two commands do all set-up on a fresh machine: `make serve` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 30000

.PHONY: install serve lint test test-fast system-deps clean gpu-bundle gpu-rehearsal

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# CPU build of torch, pinned; everything else from pyproject.
	$(PIP) install -q "torch==2.13.0"
	$(PIP) install -q -e ".[test,tracing,ray]"
	# The scheduler's allocator (docs/cpu.md): Debian's libjemalloc2 where apt can install it.
	# Without it the server still runs (glibc malloc with trims); the memory tests expect it.
	$(PY) -c "from sglang.srt.utils.allocator import find_allocator as f; raise SystemExit(f('jemalloc') is None)" \
	  || apt-get install -y -q libjemalloc2 || (apt-get update -q && apt-get install -y -q libjemalloc2) \
	  || echo "warning: could not install libjemalloc2: the scheduler will use glibc malloc (docs/cpu.md)"
	touch $(STAMP)

install: $(STAMP)

serve: $(STAMP)
	$(VENV)/bin/sglang serve --host $(HOST) --port $(PORT)

# ruff's lint rules and format (pyproject.toml); the import-layering check is test/test_import_layers.py.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# Everything: lint, unit tests and the end-to-end tests that start servers.
test: lint system-deps
	$(PY) -m pytest -q test

# Seconds: lint and the unit tests (no test that starts a process; see the `slow` marker).
test-fast: lint
	$(PY) -m pytest -q test -m "not slow"

# System packages some tests drive (Debian's), installed with apt when missing and we are root (CI);
# otherwise those tests fail and say how to install them:
# - systemd-analyze (the systemd unit's test runs `systemd-analyze verify`);
# - nginx (test/docker/ puts a real nginx in front of the server: nginx-light, or plain `nginx` on
#   releases without -light).
system-deps:
	@if ! command -v systemd-analyze >/dev/null 2>&1; then \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	        echo "installing systemd (apt) for systemd-analyze"; \
	        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd >/dev/null; \
	    else \
	        echo "warning: systemd-analyze is missing; the systemd unit test needs it: sudo apt-get install -y systemd"; \
	    fi; \
	fi
	@if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	        echo "installing nginx-light (apt)"; \
	        apt-get update -qq && (DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light \
	            || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx) >/dev/null; \
	    else \
	        echo "warning: nginx is missing; the fleet tests need it: sudo apt-get install -y nginx-light"; \
	    fi; \
	fi

# The GPU check (docs/gpu.md "Checking a GPU machine"), not part of `make test`: gpu-bundle builds
# the bundle a GPU machine without network runs from; gpu-rehearsal runs that check here on the CPU
# in a Python 3.12 environment mirroring the GPU image (about 4 GB, built once) and prints
# $(GPU_BUNDLE)/rehearsal.json.
GPU_BUNDLE ?= .gpu-bundle
REHEARSAL_VENV ?= $(HOME)/.cache/sglang-gpu-rehearsal-venv
gpu-bundle: $(STAMP)
	bash benchmark/prepare_gpu_assets.sh $(GPU_BUNDLE)

gpu-rehearsal: gpu-bundle
	bash benchmark/rehearsal_env.sh $(REHEARSAL_VENV)
	PYTHON=$(REHEARSAL_VENV)/bin/python bash benchmark/gpu_check.sh --rehearse $(GPU_BUNDLE)

clean:
	rm -rf $(VENV) build python/*.egg-info
