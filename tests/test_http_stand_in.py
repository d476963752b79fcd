"""The cloud API stand-ins end with their test: a reply still hanging when the test is over
must neither outlive it nor print into the next test's captured output."""

import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler

import http_stand_in


class _Hanging(BaseHTTPRequestHandler):
    release: threading.Event
    finished = threading.Event()
    released = False

    def do_GET(self):
        _Hanging.released = _Hanging.release.wait(10)
        time.sleep(0.3)  # the late reply takes a moment: only a join waits for it
        try:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"late")
        finally:
            _Hanging.finished.set()

    def log_message(self, *args):
        pass


def test_a_hung_reply_is_released_and_joined_when_the_stand_in_closes(capsys):
    _Hanging.release, _Hanging.finished = threading.Event(), threading.Event()
    _Hanging.released = False
    with http_stand_in.serve(_Hanging, release=_Hanging.release) as url:
        try:
            urllib.request.urlopen(url, timeout=0.2)
            raise AssertionError("the hung reply was answered")
        except (TimeoutError, urllib.error.URLError):
            pass  # the client gave up, as the Vertex client does on a hung poll
        assert not _Hanging.finished.is_set()
    # Closed: the handler was released and joined, its late write to the closed socket
    # was no error, and nothing reached stderr.
    assert _Hanging.released and _Hanging.finished.is_set()
    assert capsys.readouterr().err == ""
