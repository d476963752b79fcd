"""Progress within long steps (ingest, training), for a person watching the console.

Components log it to the `cifar10.progress` logger: INFO for lasting lines (one per
epoch), which every log keeps; DEBUG for live updates (steps within an epoch, shards
read), which no log keeps and only an interactive console shows, on one line that
rewrites itself (see pipeline/local/runner.py). On Vertex the INFO lines reach the
component's log like any other.
"""

from __future__ import annotations

import logging

PROGRESS_LOGGER = "cifar10.progress"


def progress_logger() -> logging.Logger:
    return logging.getLogger(PROGRESS_LOGGER)


def duration(seconds: float) -> str:
    """42s, 3m10s, 1h02m."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
