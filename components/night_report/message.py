"""Each night's report: one JSON message per run, whatever its outcome, kept in the serving
folder (`.nights/`, which `status` reads) and delivered to a webhook (`run --notify URL` or
$CIFAR10_NOTIFY_URL; a compiled file's exit handler, components/night_report).

A webhook that is down or slow costs at most DELIVERY_SECONDS and never changes the night's
outcome or exit status; the run summary says whether the message was delivered. The URL is
never printed or stored in clear (it often carries a token): only its host is."""

from __future__ import annotations

import datetime
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from components.contract import NIGHTS_KEPT
from components.storage.night_facts import NIGHTS_DIR, remove_stale

NOTIFY_VARIABLE = "CIFAR10_NOTIFY_URL"
LATEST_FILE = "latest.json"
# Two tries within this many seconds in all (a webhook that is down answers at once; a slow
# one is cut off), then the night goes on without it.
DELIVERY_SECONDS = 10.0
ATTEMPTS = 2
# Outcomes that page someone: the run did not do what a night should.
RED_OUTCOMES = (
    "data_invalid", "drift", "labels", "duplicates", "not_blessed", "served_changed",
    "load_test_failed", "failed",
)  # fmt: skip
# Outcomes kept on their own, never as latest.json: a run refused because another held the
# folder did nothing, and the holder's night is the one `status` must go on reporting.
ON_THEIR_OWN = ("busy",)
# Versions are named by their push's Unix time. One dated further ahead of this host's clock
# than this was pushed by a host whose clock ran ahead: its age cannot be known.
CLOCK_SKEW_SECONDS = 300.0


class NotifyUrlError(ValueError):
    """The webhook URL cannot be used; the message says why (and shows no secret)."""


def check_url(url: str) -> str:
    """The URL, if a webhook can be called at it: http(s), with a host."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        shown = f"{parts.scheme}://{parts.hostname}" if parts.scheme else "(no scheme)"
        raise NotifyUrlError(
            f"the notification URL must be http:// or https:// with a host, got {shown}"
        )
    return url


def shown(url: str) -> str:
    """What may be shown of a webhook URL: scheme and host, never its path or query."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}/..."


def stop_lines(failed: str | None) -> list[str]:
    """The gate's stop lines from a run's failure text ("  - line" each)."""
    return [line[4:] for line in (failed or "").splitlines() if line.startswith("  - ")]


def seconds_ahead(version: str | None, now: float | None = None) -> float | None:
    """How far `version` is dated ahead of this host's clock, beyond CLOCK_SKEW_SECONDS;
    None when it is not (or is no Unix time)."""
    if not version or not str(version).isdigit():
        return None
    ahead = int(version) - (time.time() if now is None else now)
    return ahead if ahead > CLOCK_SKEW_SECONDS else None


def clock_fault(version: str, ahead: float) -> str:
    return (
        f"the served version {version} is dated {ahead / 3600:.1f} h ahead of this host's "
        "clock: a clock ran ahead when it was pushed, so its age is unknown"
    )


def message(summary: dict[str, Any], **facts: Any) -> dict[str, Any]:
    """The night's message from its run summary (run_summary.json as a dict) and `facts`
    (runner, served_before, served_after, report, and what the summary lacks); `faults`
    names what is wrong beside the outcome (a served version dated in the future)."""
    served = facts.get("served_after") or facts.get("served_before")
    ahead = seconds_ahead(served)
    return {
        "outcome": summary.get("outcome") or "failed",
        "failed_step": summary.get("failed_step"),
        "run_id": summary.get("run_id") or None,
        "spans": summary.get("spans", []),
        "eval_accuracy": summary.get("eval_accuracy"),
        "stops": stop_lines(summary.get("failed")),
        "error": summary.get("failed"),
        "log": summary.get("log_file"),
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "faults": [] if ahead is None else [clock_fault(served, ahead)],
        **facts,
    }


def deliver(url: str, night: dict[str, Any], budget: float = DELIVERY_SECONDS) -> str:
    """POSTs the message; returns what the summary says: 'delivered to HOST' or 'not
    delivered to HOST: why'. Never raises for the webhook's sake."""
    deadline = time.monotonic() + budget
    body = json.dumps(night).encode()
    why = "no time left"
    for _ in range(ATTEMPTS):
        left = deadline - time.monotonic()
        if left <= 0.05:
            break
        request = urllib.request.Request(
            url, data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=left) as answer:
                return f"delivered to {shown(url)} (HTTP {answer.status})"
        except urllib.error.HTTPError as err:
            why = f"HTTP {err.code}"
        except (urllib.error.URLError, OSError, ValueError) as err:
            why = str(getattr(err, "reason", err)) or type(err).__name__
    return f"not delivered to {shown(url)}: {why} (within {budget:.0f} s)"


def record(serving_model_dir: str, night: dict[str, Any]) -> str:
    """Keeps the message in the serving folder (`.nights/<time>.json` and `latest.json`,
    which `status` reads; an outcome in ON_THEIR_OWN only the first), then bounds the folder
    (`prune`, night_facts.remove_stale); returns the path of the record `status` would read,
    or of the night's own one."""
    from components.storage import paths

    folder = paths.join(serving_model_dir, NIGHTS_DIR)
    text = json.dumps(night, indent=1).encode()
    now = datetime.datetime.now(datetime.timezone.utc)  # two nights in one second: two files
    stamp = f"{now:%Y%m%dT%H%M%S.%fZ}-{night['outcome']}"
    names = [f"{stamp}.json"] + ([] if night["outcome"] in ON_THEIR_OWN else [LATEST_FILE])
    for name in names:
        paths.write_bytes(paths.join(folder, name), text)
    try:
        prune(serving_model_dir)
        remove_stale(serving_model_dir)
    except Exception as err:  # the night is recorded; the next night prunes again
        print(f"warning: old night records were not removed: {err}")
    return paths.join(folder, names[-1])


def prune(serving_model_dir: str, keep: int = NIGHTS_KEPT) -> list[str]:
    """Removes the night records beyond the newest `keep`, except the night that pushed a
    version still complete in the serving folder (`status` reads its accuracy); returns the
    names removed, oldest first."""
    from components.storage import paths
    from components.storage.served_versions import complete_versions

    folder = paths.join(serving_model_dir, NIGHTS_DIR)
    names = [n for n in paths.listdir(folder) if n.endswith(".json") and n != LATEST_FILE]
    old = names[: max(len(names) - keep, 0)]
    served = set(complete_versions(serving_model_dir)) if old else set()
    removed = []
    for name in old:
        path = paths.join(folder, name)
        if name.endswith("-pushed.json") and _pushed(path) in served:
            continue
        paths.remove(path)
        removed.append(name)
    return removed


def _pushed(path: str) -> str | None:
    from components.storage import paths

    try:
        return paths.read_json(path).get("served_after")
    except paths.DamagedRecord:
        return None


def latest(serving_model_dir: str) -> dict[str, Any] | None:
    """The last night's message kept in the serving folder, or None."""
    from components.storage import paths

    path = paths.join(serving_model_dir, NIGHTS_DIR, LATEST_FILE)
    return paths.read_json(path) if paths.exists(path) else None
