"""Every night reports: one JSON message per `run`, whatever its outcome, kept in the serving
folder and POSTed to the webhook `--notify URL` (or $CIFAR10_NOTIFY_URL) names; a webhook
that is down or slow never changes the outcome or the exit status and costs a bounded time;
the URL (it often carries a token) is never printed or kept in clear."""

import json
import time

import pytest

from components.night_report import message as nights

import http_stand_in
from conftest import FAST_TRAINING, cli


@pytest.fixture
def webhook():
    with http_stand_in.webhook("/hooks/secret-token-123") as found:
        yield found


def test_a_message_is_delivered_once(webhook):
    handler, url = webhook
    said = nights.deliver(url, {"outcome": "pushed"})
    assert said.startswith("delivered to http://127.0.0.1:") and "secret-token" not in said
    assert handler.received == [{"outcome": "pushed"}]


def test_a_slow_webhook_costs_at_most_the_budget(webhook):
    handler, url = webhook
    handler.delay = 30.0
    started = time.monotonic()
    said = nights.deliver(url, {"outcome": "failed"}, budget=1.0)
    assert time.monotonic() - started < 1.5
    assert said.startswith("not delivered to http://127.0.0.1:") and "within 1 s" in said


def test_a_webhook_that_is_down_is_said_not_delivered():
    said = nights.deliver("http://127.0.0.1:9/x", {"outcome": "pushed"}, budget=2.0)
    assert said.startswith("not delivered to http://127.0.0.1:9/...")


@pytest.mark.parametrize("url", ["ftp://host/x", "hooks.example.com/x", "http:///x"])
def test_a_malformed_url_is_refused(url):
    with pytest.raises(nights.NotifyUrlError, match="must be http:// or https:// with a host"):
        nights.check_url(url)


def test_the_stop_lines_come_from_the_gates_failure():
    failed = "DataValidationError: data validation failed:\n  - labels: a\n  - duplicates: b\n(x)"
    assert nights.stop_lines(failed) == ["labels: a", "duplicates: b"]


def test_a_malformed_notify_url_refuses_the_run_before_it_starts(tmp_path):
    done = cli("run", "--output-dir", tmp_path / "out", "--notify", "ftp://hooks/token-9")
    assert done.returncode == 2 and "token-9" not in done.stderr
    assert "--notify: the notification URL must be http:// or https://" in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.integration
def test_a_pushed_a_no_op_and_a_failing_night_each_deliver_one_message(
    tiny_archive, tmp_path, webhook
):
    handler, url = webhook
    out = tmp_path / "out"
    first = cli("run", "--data", tiny_archive, "--output-dir", out, "--accuracy-gate", "0",
                "--notify", url, *FAST_TRAINING)  # fmt: skip
    assert first.returncode == 0, first.stderr[-2000:]
    second = cli("run", "--data", tiny_archive, "--output-dir", out, "--notify", url)
    assert second.returncode == 0, second.stderr[-2000:]
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(b"not an archive")
    third = cli("run", "--data", broken, "--output-dir", out, "--notify", url)
    assert third.returncode == 2
    pushed, nothing_new, failed = handler.received
    assert pushed["outcome"] == "pushed" and pushed["served_before"] is None
    assert pushed["served_after"] and pushed["eval_accuracy"] > 0 and pushed["spans"] == [0]
    assert pushed["report"].endswith("report.html") and pushed["log"].endswith(".log")
    assert nothing_new["outcome"] == "no_new_span"
    assert nothing_new["served_before"] == nothing_new["served_after"] == pushed["served_after"]
    assert failed["outcome"] == "failed" and "broken.tar.gz" in failed["error"]
    assert failed["exit_status"] == 2 and failed["failed_step"] == "before the first step"
    summary = (out / "run_summary.json").read_text()
    assert "secret-token" not in summary + first.stdout + first.stderr
    assert "notification   delivered to http://127.0.0.1:" in first.stdout
    kept = json.loads((out / "serving" / "cifar10" / ".nights" / "latest.json").read_text())
    assert kept == failed
    assert len(list((out / "serving" / "cifar10" / ".nights").glob("2*.json"))) == 3
