"""Where the CIFAR-10 data comes from: --data, then $CIFAR10_DATA, then the local
cache, then a checked download of the official archive."""

from __future__ import annotations

import hashlib
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

from components.storage import object_store

OFFICIAL_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"
OFFICIAL_MD5 = "c32a1d4ab5d03f1284b67883e8d87530"
ENV_VAR = "CIFAR10_DATA"


class DataSourceError(RuntimeError):
    """The data could not be located or downloaded; the message says what to do."""


def cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(root) / "cifar10-pipeline"


def _is_url(value: str) -> bool:
    return value.startswith(("http://", "https://"))


def _progress(done: int, total: int) -> None:
    if total > 0 and sys.stderr.isatty():
        width = 40
        filled = width * done // total
        sys.stderr.write(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {done / 1e6:6.1f}/{total / 1e6:.1f} MB"
        )
        sys.stderr.flush()


def download(url: str, target: Path, md5: str | None = None, timeout: float = 30.0) -> Path:
    """Downloads to `<target>.part`, checks the MD5, then renames: never a partial file at
    `target`."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".part")
    digest = hashlib.md5()
    print(f"Downloading {url} -> {target}", file=sys.stderr)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, open(partial, "wb") as out:
            total = int(response.headers.get("Content-Length") or 0)
            done = 0
            while chunk := response.read(1 << 20):
                out.write(chunk)
                digest.update(chunk)
                done += len(chunk)
                _progress(done, total)
    except (urllib.error.URLError, OSError, TimeoutError) as err:
        partial.unlink(missing_ok=True)
        reason = getattr(err, "reason", err)
        raise DataSourceError(
            f"could not download {url} ({reason}); pass --data PATH_OR_URL (or set "
            f"{ENV_VAR}) to use a local copy of the CIFAR-10 archive"
        ) from err
    finally:
        if sys.stderr.isatty():
            sys.stderr.write("\n")
    if md5 and digest.hexdigest() != md5:
        partial.unlink(missing_ok=True)
        raise DataSourceError(
            f"{url}: checksum mismatch (MD5 {digest.hexdigest()}, expected {md5}); "
            "the download is corrupt or not the official archive"
        )
    partial.rename(target)
    return target


def resolve(data: str | None) -> str:
    """A local path, gs:// or s3:// URI of the source to ingest. An s3:// one is refused
    (ValueError, one line) when this stack cannot read it or its bucket cannot be reached."""
    value = data or os.environ.get(ENV_VAR, "")
    if value:
        if _is_url(value):
            name = os.path.basename(value.split("?")[0]) or "cifar10-download.tar.gz"
            cached = cache_dir() / name
            if cached.exists():
                return str(cached)
            return str(download(value, cached, OFFICIAL_MD5 if value == OFFICIAL_URL else None))
        object_store.check_bucket(value)  # s3:// only: endpoint, credentials, bucket
        if "://" not in value and not os.path.exists(value):
            origin = "--data" if data else ENV_VAR
            raise DataSourceError(f"{value}: no such file or folder (from {origin})")
        return value if "://" in value else os.path.abspath(value)
    cached = cache_dir() / os.path.basename(OFFICIAL_URL)
    if cached.exists():
        return str(cached)
    return str(download(OFFICIAL_URL, cached, OFFICIAL_MD5))
