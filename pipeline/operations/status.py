"""Is the served model fresh and fine? One answer for a person, a cron check or a monitoring
probe: the served version, its age (versions are named by their push's Unix time), the spans
it was trained on, its eval accuracy (from the night that pushed it), and the last night's
outcome and time (the serving folder's `.nights/`)."""

from __future__ import annotations

import dataclasses
import re
import time
from typing import Any

from components.night_report import message as nights

DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """Seconds from '26h', '90m', '2d' or '600s'; ValueError otherwise."""
    found = DURATION.match(text.strip())
    if not found:
        raise ValueError(f"not a duration such as 26h, 90m, 2d or 600s: {text!r}")
    return float(found[1]) * UNIT_SECONDS[found[2]]


@dataclasses.dataclass(frozen=True)
class Status:
    serving_model_dir: str
    served: str | None
    age_seconds: float | None
    spans: list[int]
    eval_accuracy: float | None
    rolled_back: list[str]
    last_night: dict[str, Any] | None
    # Versions still in the serving folder that have a rollback record: a rollback was
    # stopped between writing its record and moving them out (the same `rollback` again
    # finishes it).
    unfinished_rollback: list[str] = dataclasses.field(default_factory=list)

    @property
    def last_night_red(self) -> bool:
        return bool(self.last_night) and self.last_night.get("outcome") in nights.RED_OUTCOMES

    @property
    def dated_ahead(self) -> bool:
        """The served version is dated ahead of this host's clock (beyond the skew allowed):
        a fault, and its age is unknown."""
        return self.age_seconds is not None and -self.age_seconds > nights.CLOCK_SKEW_SECONDS

    def stale(self, max_age: float | None) -> bool:
        """Nothing served, the served version is older than `max_age` seconds, or its age
        is unknown (dated ahead of this host's clock), or a rollback of it did not finish."""
        if self.age_seconds is None or self.dated_ahead or self.unfinished_rollback:
            return True
        return max_age is not None and self.age_seconds > max_age

    def to_json(self, max_age: float | None = None) -> dict[str, Any]:
        return {
            **dataclasses.asdict(self),
            "max_age_seconds": max_age,
            "stale": self.stale(max_age),
            "dated_ahead": self.dated_ahead,
            "last_night_red": self.last_night_red,
        }


def _pushed_accuracy(serving_model_dir: str, version: str) -> float | None:
    """The eval accuracy recorded by the night that pushed `version`, if one did."""

    from components.storage import paths

    folder = paths.join(serving_model_dir, nights.NIGHTS_DIR)
    for name in reversed(paths.listdir(folder)):
        if name.endswith("-pushed.json"):
            night = paths.read_json(paths.join(folder, name))
            if night.get("served_after") == version:
                return night.get("eval_accuracy")
    return None


def read(serving_model_dir: str, now: float | None = None) -> Status:
    from components.storage.served_versions import complete_versions, read_served_state

    state = read_served_state(serving_model_dir)
    now = time.time() if now is None else now
    served = state.version
    unfinished = [v for v in complete_versions(serving_model_dir) if v in state.rolled_back]
    return Status(
        serving_model_dir=serving_model_dir,
        served=served,
        age_seconds=round(now - int(served), 1) if served else None,
        spans=sorted(state.spans),
        eval_accuracy=_pushed_accuracy(serving_model_dir, served) if served else None,
        rolled_back=list(state.rolled_back),
        last_night=nights.latest(serving_model_dir),
        unfinished_rollback=unfinished,
    )


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    hours = max(seconds, 0.0) / 3600  # within the clock skew allowed, "now"
    return f"{hours:.1f} h" if hours < 48 else f"{hours / 24:.1f} days"


def render(status: Status, max_age: float | None = None) -> str:
    night = status.last_night or {}
    accuracy = status.eval_accuracy
    lines = [
        f"serving folder  {status.serving_model_dir}",
        f"served          {status.served or 'nothing'}"
        + (
            f" (pushed {_age(status.age_seconds)} ago)"
            if status.served and not status.dated_ahead
            else ""
        ),
        f"spans           {', '.join(map(str, status.spans)) or '-'}",
        f"eval accuracy   {'-' if accuracy is None else f'{accuracy:.2%}'}",
        f"rolled back     {', '.join(status.rolled_back) or 'none'}",
        f"last night      {night.get('outcome', 'none recorded')}"
        + (f" at {night['time']}" if night.get("time") else "")
        + (f" (step {night['failed_step']})" if night.get("failed_step") else ""),
    ]
    if status.unfinished_rollback:
        versions = ", ".join(status.unfinished_rollback)
        lines.append(
            f"ROLLBACK        version {versions} has a rollback record but is still in the "
            "serving folder: the rollback did not finish; run the same `rollback` again"
        )
    if status.served is None:
        lines.append("STALE           nothing is served")
    elif status.dated_ahead:
        lines.append(f"FUTURE          {nights.clock_fault(status.served, -status.age_seconds)}")
    elif status.stale(max_age) and not status.unfinished_rollback:
        lines.append(f"STALE           the served version is older than {_age(max_age)}")
    if status.last_night_red:
        lines.append(f"RED             the last night ended {night['outcome']}")
    return "\n".join(lines)
