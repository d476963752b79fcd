"""Bounded storage for a run folder: the pipeline root's artifacts of old runs that no kept
version needs are removed and marked DELETED in ML Metadata (so TFX's cache never hands a
removed artifact to a later run; it recomputes instead). Open-source TFX has no garbage
collection of its own (tfx-addons#179).

Kept, whatever their age: every artifact in the lineage of a version in the serving folder
(served or kept aside by a rollback): the PushedModel that pushed it and every artifact the
executions before it read, back to the data. Everything else older than the cut-off is
removed, folder and all, under the run folder's lock."""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from pathlib import Path

from pipeline.local.runner import exclusive_output_dir

PUSHED_DESTINATION = "pushed_destination"


@dataclasses.dataclass(frozen=True)
class Removal:
    artifact_id: int
    uri: str
    bytes: int
    age_days: float


@dataclasses.dataclass(frozen=True)
class Plan:
    remove: list[Removal]
    kept_for_versions: int  # artifacts in the lineage of a kept version
    kept_recent: int  # newer than the cut-off


def _size(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(path) for n in names)


def _version_dirs(serving_model_dir: str) -> list[str]:
    from components.storage import served_versions

    aside = os.path.join(serving_model_dir, served_versions.ROLLED_BACK_DIR)
    return [os.path.join(serving_model_dir, v) for v in served_versions.complete_versions(
        serving_model_dir)] + [os.path.join(aside, v) for v in served_versions.rolled_back(
        serving_model_dir)]  # fmt: skip


def _roots(store, version_dirs: list[str]) -> tuple[set[int], set[int]]:
    """(the PushedModel artifacts that pushed the kept versions, the models that PUSHED_FROM
    names in a kept version no PushedModel names: one this store did not push itself)."""
    artifacts, names = store.get_artifacts(), {os.path.basename(d) for d in version_dirs}
    pushed, named = set(), set()
    for artifact in artifacts:
        destination = artifact.custom_properties.get(PUSHED_DESTINATION)
        version = destination and os.path.basename(destination.string_value.rstrip("/"))
        if version in names:
            pushed.add(artifact.id)
            named.add(version)
    pushed_from = set()
    for folder in version_dirs:
        source = os.path.join(folder, "PUSHED_FROM")
        if os.path.basename(folder) not in named and os.path.exists(source):
            pushed_from.add(Path(source).read_text().strip())
    models = {a.id for a in artifacts if a.uri and any(
        p == a.uri or p.startswith(a.uri.rstrip("/") + "/") for p in pushed_from)}  # fmt: skip
    return pushed, models


def _producers(store, artifact_ids: list[int]) -> set[int]:
    from ml_metadata.proto import metadata_store_pb2 as mlmd

    outputs = (mlmd.Event.OUTPUT, mlmd.Event.DECLARED_OUTPUT)
    events = store.get_events_by_artifact_ids(artifact_ids) if artifact_ids else []
    return {e.execution_id for e in events if e.type in outputs}


def _runs_of(store, executions: set[int]) -> set[int]:
    """Every execution of the pipeline runs these executions belong to."""
    run_type = store.get_context_type("pipeline_run").id
    runs = {c.id for e in executions for c in store.get_contexts_by_execution(e)
            if c.type_id == run_type}  # fmt: skip
    return {e.id for run in runs for e in store.get_executions_by_context(run)}


def _lineage(store, pushed: set[int], models: set[int]) -> set[int]:
    """What the kept versions need: the runs that pushed them, whole (every step's inputs
    and outputs: the evaluation, the validation verdict, the logs), and, recursively, every
    execution that produced what those read or a model in `models` (cached artifacts of
    earlier runs, back to the data), with its inputs and outputs; not the rest of the runs
    those executions ran in (a run whose model was not blessed until a later run reused it)."""
    from ml_metadata.proto import metadata_store_pb2 as mlmd

    inputs = (mlmd.Event.INPUT, mlmd.Event.DECLARED_INPUT)
    pending = _runs_of(store, _producers(store, list(pushed))) | _producers(store, list(models))
    kept, seen = pushed | models, set()
    while pending:
        seen |= pending
        read = []
        for event in store.get_events_by_execution_ids(list(pending)):
            kept.add(event.artifact_id)
            if event.type in inputs:
                read.append(event.artifact_id)
        pending = _producers(store, read) - seen
    return kept


def _store(output_dir: Path) -> Path:
    store_path = output_dir / "metadata.sqlite"
    if not store_path.exists():
        raise FileNotFoundError(
            f"{store_path}: no ML Metadata store; is {output_dir} a run folder?"
        )
    return store_path


def plan(output_dir: Path, older_than_days: float, now: float | None = None) -> Plan:
    """What `gc` would remove from `output_dir` (a `run --output-dir`)."""
    from ml_metadata.proto import metadata_store_pb2 as mlmd
    from tfx.orchestration import metadata

    store_path = _store(output_dir)
    cutoff = (time.time() if now is None else now) - older_than_days * 86400
    root = str(output_dir / "artifacts") + os.sep
    config = metadata.sqlite_metadata_connection_config(str(store_path))
    with metadata.Metadata(config) as handle:
        store = handle.store
        kept = _lineage(
            store, *_roots(store, _version_dirs(str(output_dir / "serving" / "cifar10")))
        )
        live = [a for a in store.get_artifacts()
                if a.state == mlmd.Artifact.LIVE and a.uri.startswith(root)]  # fmt: skip
    old = [a for a in live if a.id not in kept and a.create_time_since_epoch / 1000 < cutoff]
    now_ms = (time.time() if now is None else now) * 1000
    return Plan(
        remove=[Removal(a.id, a.uri, _size(a.uri) if os.path.exists(a.uri) else 0,
                        round((now_ms - a.create_time_since_epoch) / 86400000, 2)) for a in old],
        kept_for_versions=sum(1 for a in live if a.id in kept),
        kept_recent=len(live) - len(old) - sum(1 for a in live if a.id in kept),
    )  # fmt: skip


def collect(output_dir: Path, older_than_days: float, dry_run: bool) -> Plan:
    """Plans and (unless `dry_run`) applies, both under the run lock, so no run adds or
    reuses artifacts between the plan and the removal (RunLockedError while one holds it)."""
    _store(output_dir)  # a folder without a store is refused before a lock file is made there
    with exclusive_output_dir(output_dir):
        found = plan(output_dir, older_than_days)
        if not dry_run:
            _apply(output_dir, found)
    return found


def _apply(output_dir: Path, found: Plan) -> None:
    """Removes the planned artifacts' folders and marks them DELETED (the caller holds the
    run lock): each marked first, so a removal that dies midway leaves nothing TFX would
    reuse."""
    from ml_metadata.proto import metadata_store_pb2 as mlmd
    from tfx.orchestration import metadata

    config = metadata.sqlite_metadata_connection_config(str(output_dir / "metadata.sqlite"))
    with metadata.Metadata(config) as handle:
        for removal in found.remove:
            [artifact] = handle.store.get_artifacts_by_id([removal.artifact_id])
            artifact.state = mlmd.Artifact.DELETED
            handle.store.put_artifacts([artifact])
            if os.path.isdir(removal.uri):
                shutil.rmtree(removal.uri)
            elif os.path.exists(removal.uri):
                os.remove(removal.uri)
