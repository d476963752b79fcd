"""A local HTTP stand-in for a cloud API, started and stopped by a test fixture.

The stand-in must not outlive its test: a reply still being written after the test ended
(a deliberately hung poll the client has long given up on) would otherwise fail on the
closed socket and print a traceback into whatever test runs next, whose captured stderr
then no longer holds just the command's own output. So the handler threads are joined on
close, a hang ends when the fixture releases it, and a client that hung up is not an error.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _StandInServer(ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins every handler thread
    block_on_close = True

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], ConnectionError):  # the client hung up first
            return
        super().handle_error(request, client_address)


@contextlib.contextmanager
def serve(handler_class, release: threading.Event | None = None):
    """Serves ``handler_class`` on 127.0.0.1 at a free port; yields its base URL.

    ``release`` is set before the server closes, so a handler waiting on it returns.
    """
    server = _StandInServer(("127.0.0.1", 0), handler_class)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        if release is not None:
            release.set()
        server.shutdown()
        server.server_close()
        thread.join()


class _Webhook(BaseHTTPRequestHandler):
    """Keeps each JSON body POSTed to it (`received`); with `delay`, answers that much later
    (or when the stand-in closes)."""

    received: list
    delay = 0.0
    release: threading.Event

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if type(self).delay:
            type(self).release.wait(type(self).delay)
        type(self).received.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def webhook(path: str = "/hooks/secret-token"):
    """A webhook listener on 127.0.0.1: yields (its handler class, its URL with `path`)."""
    handler = type("Webhook", (_Webhook,), {"received": [], "release": threading.Event()})
    with serve(handler, handler.release) as url:
        yield handler, f"{url}{path}"


class JsonHandler(BaseHTTPRequestHandler):
    """A stand-in API's handler: `reply` answers with a JSON body."""

    def reply(self, body: dict, status: int = 200) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
