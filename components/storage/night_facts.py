"""What a compiled run's steps know about the night, kept for its exit handler: each step that
knows a fact writes `<serving_model_dir>/.nights/running/<night key>/<step>.json` (the night
key is the run's UUID, `{{$.pipeline_job_uuid}}`, substituted by the KFP backend, Vertex and
kfp.local alike; KFP's `{{$.pipeline_job_name}}` is the display name, which may repeat).
ServedState opens the folder and names it on its output artifact (FACTS_PROPERTY), which every
later step that writes a fact reads; a local run sets no key and nothing is written.
The exit handler composes the night's message from these files and the run's final status,
then removes the folder."""

from __future__ import annotations

import json
import time
from typing import Any

from components.contract import STALE_NIGHT_SECONDS
from components.storage import paths

# The serving folder's record of nights (`status` reads it), and the running nights' facts.
NIGHTS_DIR = ".nights"
RUNNING_DIR = "running"
# The compiled constant of ServedState's night key: the run's UUID, substituted at run time.
NIGHT_KEY_PLACEHOLDER = "{{$.pipeline_job_uuid}}"
# On ServedState's output: the folder later steps write their facts to ('' or absent: none).
FACTS_PROPERTY = "night_facts"
SERVED, EXAMPLES, GATE, EVALUATION, PUSHER = (
    "ServedState",
    "Cifar10ExampleGen",
    "DataValidationGate",
    "Evaluator",
    "AtomicPusher",
)


def folder(serving_model_dir: str, night_key: str) -> str:
    """The running night's facts folder ('' without a key: nothing is kept)."""
    if not night_key or not serving_model_dir:
        return ""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in night_key)
    return paths.join(serving_model_dir, NIGHTS_DIR, RUNNING_DIR, safe)


def write(facts_dir: str, step: str, facts: dict[str, Any]) -> None:
    """Keeps one step's facts; a step never fails for its report's sake."""
    if not facts_dir:
        return
    try:
        paths.write_bytes(paths.join(facts_dir, f"{step}.json"), json.dumps(facts).encode())
    except Exception as err:
        print(f"warning: the night's facts were not kept: {err}")


def facts_dir_of(artifacts: list) -> str:
    """The facts folder ServedState named on its output artifact ('' for none)."""
    if not artifacts:
        return ""
    artifact = artifacts[0]
    if not artifact.has_custom_property(FACTS_PROPERTY):
        return ""
    return artifact.get_string_custom_property(FACTS_PROPERTY)


def read_all(facts_dir: str) -> dict[str, dict[str, Any]]:
    """{step: its facts} of a night ({} if none were kept)."""
    found: dict[str, dict[str, Any]] = {}
    if not facts_dir or not paths.exists(facts_dir):
        return found
    for step in (SERVED, EXAMPLES, GATE, EVALUATION, PUSHER):
        path = paths.join(facts_dir, f"{step}.json")
        if paths.exists(path):
            try:
                found[step] = json.loads(paths.read_text(path))
            except ValueError:
                continue
    return found


def remove_stale(serving_model_dir: str, now: float | None = None) -> list[str]:
    """Removes the facts folders of nights whose run died before its exit handler: those in
    which nothing changed for STALE_NIGHT_SECONDS (a night still running writes its facts as
    it goes, and a run lasts hours, not days). Returns the night keys removed."""
    base = paths.join(serving_model_dir, NIGHTS_DIR, RUNNING_DIR)
    now = time.time() if now is None else now
    removed = []
    for key in paths.listdir(base):
        folder = paths.join(base, key)
        try:
            changed = max((paths.modified(f) for f in paths.walk(folder)), default=0.0)
        except Exception as err:  # an unreadable folder is not known to be stale: kept
            print(f"warning: {folder}: not checked for staleness: {err}")
            continue
        if now - changed > STALE_NIGHT_SECONDS:
            paths.remove_tree(folder)
            removed.append(key)
    return removed
