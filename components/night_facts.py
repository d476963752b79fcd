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
from typing import Any

from components import paths

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
