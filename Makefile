# Two commands do everything: `make run` and `make test`. Each sets up .venv first
# (Python 3.10, packages from requirements.lock) when it is missing or stale.

SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
UV_VERSION := 0.13.9
STAMP := $(VENV)/.installed
# kfp.local's own environment (requirements-kfp.lock): a current kfp SDK needs protobuf >= 6,
# TFX 1.16 < 5, so it cannot share .venv. `cifar10-pipeline local-kfp` runs in it.
KFP_VENV := .venv-kfp
KFP_STAMP := $(KFP_VENV)/.installed
SHARED_DATA := ../shared/datasets/cifar10/cifar-10-binary-train.tar.gz
ARGS ?=

# TFX 1.16 needs Python 3.10; take the first interpreter that really runs
# (a pyenv shim can exist without the version being active).
PYTHON310 ?= $(shell for p in python3.10 $$HOME/.pyenv/versions/3.10*/bin/python3.10 \
	/usr/local/bin/python3.10 /usr/bin/python3.10; do \
	"$$p" -c 'import sys; assert sys.version_info[:2] == (3, 10)' 2>/dev/null && { echo "$$p"; break; }; done)

# On machines that carry the shared offline copy, use it unless told otherwise.
ifeq ($(CIFAR10_DATA),)
ifneq ($(wildcard $(SHARED_DATA)),)
export CIFAR10_DATA := $(abspath $(SHARED_DATA))
endif
endif

.PHONY: run test test-unit test-multi-worker lint bench lock setup setup-kfp local-kfp clean

setup: $(STAMP)

$(STAMP): requirements.lock pyproject.toml
	@test -n "$(PYTHON310)" || { echo "error: Python 3.10 not found (TFX 1.16 needs it); install it or pass PYTHON310=/path/to/python3.10" >&2; exit 1; }
	@test -x $(PY) || $(PYTHON310) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)
	# Bytecode now (about 1.5 min once): uv skips it, and where PYTHONDONTWRITEBYTECODE is
	# set (this project's machines) every process would otherwise compile TensorFlow, TFX and
	# Beam from source on import: 70 s against 23 s to import them here.
	$(UV) pip sync --python $(PY) --compile-bytecode requirements.lock
	$(UV) pip install --python $(PY) --no-deps -e .
	@touch $(STAMP)

# The project itself is installed too, for `python -m pipeline.kfp_local`; uv reuses .venv's
# cache, so this takes seconds.
setup-kfp: $(KFP_STAMP)

$(KFP_STAMP): requirements-kfp.lock pyproject.toml $(STAMP)
	@test -x $(KFP_VENV)/bin/python || $(PYTHON310) -m venv $(KFP_VENV)
	$(UV) pip sync --python $(KFP_VENV)/bin/python --compile-bytecode requirements-kfp.lock
	$(UV) pip install --python $(KFP_VENV)/bin/python --no-deps -e .
	@touch $(KFP_STAMP)

run: $(STAMP)
	$(VENV)/bin/cifar10-pipeline run $(ARGS)

# Two pytest-xdist workers: much of a pipeline run is single-threaded (process start,
# imports, Beam and metadata bookkeeping), so two overlap well on two cores. Tests that
# share a session run stay on one worker (tests/conftest.py). More workers need more memory.
TEST_WORKERS ?= 2

# Run a compiled pipeline file under kfp.local before building an image, e.g.
# make local-kfp ARGS='cifar10.yaml --data cifar-10-binary.tar.gz'
local-kfp: $(STAMP) $(KFP_STAMP)
	$(VENV)/bin/cifar10-pipeline local-kfp $(ARGS)

test: lint $(KFP_STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup -m "not multi_worker" $(ARGS)

test-unit: lint $(KFP_STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup -m "not integration and not multi_worker" $(ARGS)

# `run --workers 2` with a worker killed mid-training (about 6 minutes on 2 cores: two
# training processes, each started twice). .ci/run calls it after `make test`.
test-multi-worker: $(STAMP)
	$(PY) -m pytest -m multi_worker $(ARGS)

# Layers import only downward; style and formatting are checked, not debated.
lint: $(STAMP)
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: $(STAMP)
	$(PY) -m benchmarks.bench $(ARGS)

# Re-resolve the lock file after editing requirements.in (pip's resolver takes >10 min here).
lock: $(STAMP)
	$(UV) pip compile requirements.in --python-version 3.10 \
		--python-platform x86_64-manylinux_2_36 -o requirements.lock
	$(UV) pip compile requirements-kfp.in --python-version 3.10 \
		--python-platform x86_64-manylinux_2_36 -o requirements-kfp.lock

clean:
	rm -rf $(VENV) $(KFP_VENV) outputs
