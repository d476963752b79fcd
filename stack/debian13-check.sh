#!/usr/bin/env bash
# `make test-current-stack`: proves the current stack (TFX 1.21, TensorFlow 2.21, Python 3.13)
# on a host too old to install it. Root only (debootstrap, chroot, mount).
#
# 1. a Debian 13 (trixie) root filesystem from Debian's packages, built once and reused while
#    its package list is unchanged;
# 2. this checkout copied in and installed by stack/install.sh, as Dockerfile.current does;
# 3. inside it: the unit tests, then a tiny pipeline run (1 epoch, accuracy gate 0) in which
#    every component must succeed and a model must be pushed;
# 4. the same tiny run on the host stack (.venv); then each stack's pushed model served by the
#    other stack (`predict`), its answers equal to the ones its own stack gives.
#
# With --bench (`make bench-current-stack`), instead of 3 and 4: `make bench` inside, on
# $CIFAR10_DATA (its pipeline step is a full-size `run --no-cache`), and its figures written
# into the host's docs as this CPU kind's current-stack section (benchmarks/bench_docs.py).
#
#   stack/debian13-check.sh ROOTFS [--bench | PYTEST_ARGS...]
set -euo pipefail
ROOTFS=${1:?usage: $0 ROOTFS [--bench | PYTEST_ARGS...]}
shift
BENCH=
if [ "${1:-}" = --bench ]; then
  BENCH=1
  shift
  [ -f "${CIFAR10_DATA:-}" ] ||
    { echo "error: --bench needs CIFAR10_DATA, the archive to train on (make sets it)" >&2; exit 1; }
fi
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PACKAGES=python3,python3-venv,python3-dev,build-essential,ca-certificates
HOST_UV_CACHE=${UV_CACHE_DIR:-$HOME/.cache/uv}
REPO=$(cd "$(dirname "$0")/.." && pwd)
CHECK=/tmp/cifar10-check  # inside the root filesystem
# Not /pipeline, the image's folder: the compile tests check that no path of the checkout
# leaks into a compiled file, which they cannot tell apart from the image's own paths.
PROJECT=/src/cifar10-tfx-pipeline

[ "$(id -u)" = 0 ] || { echo "error: $0 needs root (debootstrap, chroot, mount)" >&2; exit 1; }
command -v debootstrap >/dev/null ||
  { echo "error: debootstrap is not installed; apt-get install -y debootstrap" >&2; exit 1; }
[ -x "$REPO/.venv/bin/cifar10-pipeline" ] ||
  { echo "error: $REPO/.venv is not set up (make setup): it serves the pushed model" >&2; exit 1; }

# A run killed before its cleanup leaves its mounts: unmount them before anything under
# ROOTFS is removed, or `rm -rf` would reach the host's /dev and uv cache through them.
awk -v root="$ROOTFS/" 'index($2, root) == 1 { print $2 }' /proc/mounts | sort -r |
  while read -r stale; do umount "$stale" 2>/dev/null || umount -l "$stale"; done
if awk -v root="$ROOTFS/" 'index($2, root) == 1 { found = 1 } END { exit !found }' /proc/mounts; then
  echo "error: something is still mounted under $ROOTFS; unmount it first" >&2
  exit 1
fi

key="trixie minbase $PACKAGES"
if [ "$(cat "$ROOTFS/.cifar10-base" 2>/dev/null)" != "$key" ]; then
  echo "== [${SECONDS}s] building the Debian 13 root filesystem in $ROOTFS (about 2 minutes)"
  # Built beside its final place and renamed: an interrupted build leaves no half root.
  rm -rf "$ROOTFS.new"
  mkdir -p "$(dirname "$ROOTFS")"
  debootstrap --variant=minbase --include="$PACKAGES" trixie "$ROOTFS.new" "$MIRROR" \
    >"$ROOTFS.debootstrap.log" 2>&1 ||
    { echo "error: debootstrap failed; see $ROOTFS.debootstrap.log" >&2; exit 1; }
  echo "$key" >"$ROOTFS.new/.cifar10-base"
  rm -rf "$ROOTFS"
  mv "$ROOTFS.new" "$ROOTFS"
else
  echo "== [${SECONDS}s] reusing the Debian 13 root filesystem in $ROOTFS"
fi

mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" || true
  done
}
trap cleanup EXIT
bind() {  # bind SOURCE TARGET: mount for this script only, unmounted on any exit
  mkdir -p "$2"
  mount --bind "$1" "$2"
  mounted+=("$2")
}
mkdir -p "$ROOTFS/proc" "$HOST_UV_CACHE"
mount -t proc proc "$ROOTFS/proc"
mounted+=("$ROOTFS/proc")
bind /dev "$ROOTFS/dev"
# The host's uv cache: a second run downloads nothing.
bind "$HOST_UV_CACHE" "$ROOTFS/root/.cache/uv"
cp /etc/resolv.conf "$ROOTFS/etc/resolv.conf"
cp /etc/ssl/certs/ca-certificates.crt "$ROOTFS/etc/ssl/certs/ca-certificates.crt"

# The checkout as `COPY` puts it in the image: tracked and new files, nothing git ignores.
rm -rf "$ROOTFS$PROJECT" "$ROOTFS$CHECK"
mkdir -p "$ROOTFS$PROJECT" "$ROOTFS$CHECK/images"
git -C "$REPO" ls-files -z --cached --others --exclude-standard |
  (cd "$REPO" && tar --null -T - -cf - 2>/dev/null) | tar -xf - -C "$ROOTFS$PROJECT"

in_root() {  # in_root COMMAND: run in the root filesystem with a clean environment
  chroot "$ROOTFS" /usr/bin/env -i PATH=/opt/venv/bin:/usr/bin:/bin HOME=/root LANG=C.UTF-8 \
    UV_LINK_MODE=copy SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    bash -c "cd $PROJECT && $1"
}

echo "== [${SECONDS}s] installing the project as the image does (stack/install.sh)"
in_root "stack/install.sh python3 /opt/venv requirements-current.lock" >"$ROOTFS$CHECK/install.log" 2>&1 ||
  { tail -20 "$ROOTFS$CHECK/install.log" >&2; exit 1; }
in_root "python -c 'import sys, tfx, tensorflow as tf, google.protobuf as pb; print(\"Python\", sys.version.split()[0], \"TFX\", tfx.__version__, \"TensorFlow\", tf.__version__, \"protobuf\", pb.__version__)'" 2>/dev/null

if [ -n "$BENCH" ]; then
  bind "$(dirname "$(realpath "$CIFAR10_DATA")")" "$ROOTFS$CHECK/data"
  data="$CHECK/data/$(basename "$(realpath "$CIFAR10_DATA")")"
  commit=$(git -C "$REPO" rev-parse --short HEAD)
  [ -z "$(git -C "$REPO" status --porcelain --untracked-files=no -- . ':!docs' ':!README.md')" ] ||
    commit="$commit with uncommitted changes"
  echo "== [${SECONDS}s] make bench on the current stack (its pipeline step: a full-size run)"
  in_root "CIFAR10_SOURCE_COMMIT='$commit' python -m benchmarks.bench --no-docs --data $data \
    --output-dir $CHECK/bench"
  mkdir -p "$REPO/outputs"
  cp "$ROOTFS$CHECK/bench/bench.json" "$REPO/outputs/bench-current-stack.json"
  "$REPO/.venv/bin/python" -m benchmarks.bench_docs "$REPO/outputs/bench-current-stack.json"
  echo "== [${SECONDS}s] done"
  exit 0
fi

echo "== [${SECONDS}s] unit tests on the current stack"
in_root "python -m pytest -p no:cacheprovider -n 2 --dist loadgroup -m 'not integration and not s3_store' -q $*"

echo "== [${SECONDS}s] a tiny pipeline run on the current stack"
(cd "$REPO/tests" && "$REPO/.venv/bin/python" -c "
import sys
from pathlib import Path
import numpy as np
from PIL import Image
import cifar_fixtures as fx
root = Path(sys.argv[1])
fx.binary_archive(root / 'cifar.tar.gz', batches=2, per_class=60)
for i in range(4):
    pixels = np.random.RandomState(i).randint(0, 256, (32, 32, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(root / 'images' / f'{i}.png')
" "$ROOTFS$CHECK")
tiny=(--epochs 1 --accuracy-gate 0 --per-replica-batch-size 64 --precision float32)
in_root "cifar10-pipeline run --data $CHECK/cifar.tar.gz --output-dir $CHECK/current ${tiny[*]}"

echo "== [${SECONDS}s] the same tiny run on the host stack, for the way back"
host_cli="$REPO/.venv/bin/cifar10-pipeline"
"$host_cli" run --data "$ROOTFS$CHECK/cifar.tar.gz" --output-dir "$ROOTFS$CHECK/host" "${tiny[@]}" \
  >"$ROOTFS$CHECK/host-run.log" 2>&1 || { tail -5 "$ROOTFS$CHECK/host-run.log" >&2; exit 1; }

echo "== [${SECONDS}s] each stack's pushed model served by the other stack"
for model in current host; do
  in_root "cifar10-pipeline predict --json --model-dir $CHECK/$model/serving/cifar10 \
    $CHECK/images/*.png" >"$ROOTFS$CHECK/$model-on-current.jsonl" 2>/dev/null
  "$host_cli" predict --json --model-dir "$ROOTFS$CHECK/$model/serving/cifar10" \
    "$ROOTFS$CHECK"/images/*.png >"$ROOTFS$CHECK/$model-on-host.jsonl" 2>/dev/null
done
"$REPO/.venv/bin/python" -m pipeline.local.stack_check "$ROOTFS$CHECK/current/run_summary.json" \
  "$ROOTFS$CHECK/current-on-current.jsonl" "$ROOTFS$CHECK/current-on-host.jsonl"
"$REPO/.venv/bin/python" -m pipeline.local.stack_check "$ROOTFS$CHECK/host/run_summary.json" \
  "$ROOTFS$CHECK/host-on-host.jsonl" "$ROOTFS$CHECK/host-on-current.jsonl"
echo "== [${SECONDS}s] done"
