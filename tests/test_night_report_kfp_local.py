"""The compiled Kubeflow file's exit handler under kfp.local: three nights of the same file (one
that pushes, one with nothing new, one stopped by the gate) each deliver one message to a real
listener on 127.0.0.1, whose URL reaches the handler only through the file's secret variable
(CIFAR10_NOTIFY_URL here, as store_environment takes the store's keys) and is in neither the
file nor any step's log."""

import json
import os
import shutil
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from test_kfp_local import DATA, _local_kfp, compile_file

import cifar_fixtures as fx
from conftest import versions
from http_stand_in import serve

REPO_ROOT = Path(__file__).resolve().parents[1]


class _Hook(BaseHTTPRequestHandler):
    received: list = []

    def do_POST(self):
        type(self).received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.mark.integration
@pytest.mark.kfp_local_run
def test_each_night_of_the_kubeflow_file_delivers_one_message(tiny_archive, tmp_path, monkeypatch):
    hook = type("Hook", (_Hook,), {"received": []})
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    path = compile_file(tmp_path / "k.yaml", "kubeflow", DATA, "--notify-secret", "hooks")
    data, out = tmp_path / "data", tmp_path / "out"
    (data / "span-1").mkdir(parents=True)
    shutil.copy(tiny_archive, data / "span-1" / "cifar.tar.gz")
    with serve(hook, threading.Event()) as base:
        url = f"{base}/hooks/token-never-logged"
        monkeypatch.delenv("CIFAR10_NOTIFY_URL", raising=False)
        refused = _local_kfp(path, data, out)  # the file names the secret: the variable is needed
        assert refused.returncode == 2 and "CIFAR10_NOTIFY_URL" in refused.stderr
        monkeypatch.setenv("CIFAR10_NOTIFY_URL", url)
        nights = [_local_kfp(path, data, out), _local_kfp(path, data, out)]
        dark = fx.scaled_archive(tmp_path / "dark.tar.gz", 0.6, per_class=60)
        nights.append(_local_kfp(path, dark, out))
    assert [n.returncode for n in nights] == [0, 0, 1], nights[-1].stderr[-3000:]
    got = [(m["outcome"], m["runner"]) for m in hook.received]
    assert got == [("pushed", "kubeflow"), ("no_new_span", "kubeflow"), ("drift", "kubeflow")]
    pushed, nothing_new, drift = hook.received
    [version] = versions(out)
    assert pushed["served_before"] is None and pushed["served_after"] == version
    assert pushed["spans"] == [1] and pushed["eval_accuracy"] is not None
    assert nothing_new["served_before"] == nothing_new["served_after"] == version
    assert drift["failed_step"] == "DataValidationGate" and drift["exit_status"] == 3
    assert any("Jensen-Shannon" in line for line in drift["stops"]), drift["stops"]
    for night in nights:  # the summary shows the handler's step and what it said
        assert "  NightReport            SUCCESS" in night.stdout, night.stdout
        assert "  notification   delivered to http://127.0.0.1:" in night.stdout
    serving = out / "serving" / "cifar10" / ".nights"
    assert json.loads((serving / "latest.json").read_text())["outcome"] == "drift"
    assert not any((serving / "running").iterdir())
    logs = [p.read_text(errors="replace") for p in (out / "logs").rglob("*.log")]
    for text in [path.read_text(), *logs, *(n.stdout + n.stderr for n in nights)]:
        assert "token-never-logged" not in text
    assert os.environ["CIFAR10_NOTIFY_URL"] == url
