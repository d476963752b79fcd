#!/usr/bin/env bash
# The one way this project is installed: `make setup`, the pipeline images (Dockerfile,
# Dockerfile.current) and `make test-current-stack` (inside a Debian 13 root filesystem) all
# run this script, so what the tests run is what the image holds.
#
#   stack/install.sh PYTHON VENV LOCK
#
# PYTHON makes VENV when it has no interpreter yet; VENV then holds exactly LOCK's pins and
# this checkout, installed editable (data/schema stays where compiled pipelines expect it).
set -euo pipefail
UV_VERSION=0.13.9
if [ $# -ne 3 ]; then
  echo "usage: $0 PYTHON VENV LOCK" >&2
  exit 2
fi
python=$1 venv=$2 lock=$3
if [ ! -f "$lock" ]; then
  echo "error: $lock: no such lock file" >&2
  exit 1
fi
cd "$(dirname "$0")/.."
version='import sys; print(*sys.version_info[:2])'
# A venv of the other stack's Python (the host changed, or STACK= did) is made again.
if [ -x "$venv/bin/python" ] && [ "$("$venv/bin/python" -c "$version")" != "$("$python" -c "$version")" ]; then
  echo "$venv was made with another Python; making it again with $python" >&2
  rm -rf "$venv"
fi
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
# Bytecode now (about 1.5 min once): uv skips it, and where PYTHONDONTWRITEBYTECODE is set
# (this project's machines) every process would otherwise compile TensorFlow, TFX and Beam
# from source on import: 70 s against 23 s to import them here.
"$venv/bin/uv" pip sync --python "$venv/bin/python" --compile-bytecode "$lock"
# --no-deps: the lock already lists every dependency at its resolved version.
"$venv/bin/uv" pip install --python "$venv/bin/python" --no-deps -e .
