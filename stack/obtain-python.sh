#!/usr/bin/env bash
# make's fallback when the host lacks the stack's Python: obtains it with uv
# (`uv python install`) and prints the interpreter's path.
#
#   stack/obtain-python.sh VERSION
#
# uv is the one on PATH, else its pinned wheel, fetched once with the host's pip (and so
# its index settings) into the cache. uv downloads Python builds from GitHub
# (python-build-standalone), or from $UV_PYTHON_INSTALL_MIRROR.
set -euo pipefail
UV_VERSION=${UV_VERSION:-0.13.9}
if [ $# -ne 1 ]; then
  echo "usage: $0 VERSION" >&2
  exit 2
fi
version=$1
uv=$(command -v uv || true)
if [ -z "$uv" ]; then
  uv=${XDG_CACHE_HOME:-$HOME/.cache}/cifar10-pipeline/uv-$UV_VERSION/uv
  if [ ! -x "$uv" ]; then
    wheels=$(mktemp -d)
    trap 'rm -rf "$wheels"' EXIT
    python3 -m pip download --quiet --disable-pip-version-check --no-deps \
      --only-binary=:all: "uv==$UV_VERSION" -d "$wheels" >&2
    # The wheel is a zip holding the binary under uv-VERSION.data/scripts/.
    python3 - "$wheels" "$uv" <<'PY'
import glob, os, sys, zipfile
wheels, target = sys.argv[1:]
[wheel] = glob.glob(os.path.join(wheels, "uv-*.whl"))
with zipfile.ZipFile(wheel) as archive:
    [name] = [n for n in archive.namelist() if n.endswith(".data/scripts/uv")]
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target + ".part", "wb") as out:
        out.write(archive.read(name))
os.chmod(target + ".part", 0o755)
os.replace(target + ".part", target)
PY
  fi
fi
"$uv" python install "$version" >&2
"$uv" python find --python-preference only-managed "$version"
