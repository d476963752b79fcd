"""Pusher executor: a blessed model becomes `<base>/<version>/` (TF Serving layout), never
loadable half-written, numbered in the order pushes finish, pushed only against the served
version its run judged against.

The protocol (components/atomic_pusher/staging.py, lock.py; what a complete version is and
which is the newest: components/storage/served_versions.py):

1. Stage: copy the model, PUSHED_FROM (the model's path) and the kept files (statistics,
   spans record, training-image index) into `<base>/.staging-<uuid4 hex>/`, whose LEASE is
   written first. Then the load test (components/serving/load_test.py): the staged copy
   loaded in a fresh process, its warmup records replayed and their answers compared with the
   Trainer's; a version that fails is LoadTestFailed, its staging removed, nothing committed.
2. Commit, under the serving folder's push lock (`<base>/.push.lock`): remove the staging
   folders of earlier commits (marked COMMIT: ended, died or lost the lock), then numbered
   folders without saved_model.pb (commits that died or lost the lock midway);
   if the newest complete version's PUSHED_FROM names this model, it is already served
   (a retry adds no version); else if that version is not the one the run read at its start
   (`expected_served`: the ServedState step's output), raise ServedVersionChanged; else
   number the version max(unix seconds, highest numbered folder + 1, on object stores also
   every number reserved under the lock before + 1), chosen now, so a later commit is
   always higher, mark the staging COMMIT, and move the staged files in one by one,
   saved_model.pb last, after checking the lock is still held (PushLeaseLost, a
   ServedVersionChanged, when it is not: nothing committed): each file move is
   atomic on a local disk and on object stores (one object), a folder move is not on GCS,
   and TF Serving loads a version only once its saved_model.pb exists.
3. The staging folder is removed, whether the push committed or failed. Staging folders of
   dead pushes (staging.is_dead) are removed by the next push; a live push's never are.
"""

from __future__ import annotations

import json
import os

from absl import logging
from tfx.components.pusher import executor as pusher_executor
from tfx.dsl.io import fileio
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import io_utils

from components.atomic_pusher import retention
from components.atomic_pusher.lock import push_lock
from components.atomic_pusher.staging import (  # noqa: F401 - STAGING_PREFIX, DEAD_AFTER_SECONDS: named here too
    COMMIT_FILE,
    DEAD_AFTER_SECONDS,
    LEASE_FILE,
    STAGING_PREFIX,
    clear_committing,
    clear_dead_staging,
    mark_committing,
    staging_folder,
)
from components.contract import (
    NO_NEW_SPAN_PROPERTY,
    SAVED_MODEL_FILE,
    SERVED_IMAGES_FILE,
    SERVED_SPANS_FILE,
    SERVED_STATISTICS_FILE,
    TRAIN_SPLIT,
    WARM_START_FILE,
    pack_digests,
    unpack_digests,
)
from components.serving.load_test import LoadTestFailed, load_test
from components.storage import night_facts, object_store, served_versions
from components.storage.paths import remove_tree
from components.storage.served_versions import PushLeaseLost, ServedVersionChanged
from components.storage.tfx_files import statistics_file

BASE_DIRECTORY_KEY = "base_directory"
KEEP_VERSIONS_KEY = "keep_versions"
# Beside saved_model.pb (TF Serving ignores other files): which model a version holds,
# so pushing the same model again (a rerun with a new blessing) adds no new version.
SOURCE_FILE = "PUSHED_FROM"
NEW_VERSION_KEY = "new_version"
# On the PushedModel: how the staged version's load test went ("passed: ...";
# absent when no copy was staged: the model was served already).
LOAD_TEST_KEY = "load_test"


class IncompleteVersion(RuntimeError):
    """A staged copy or a committed version is not a whole SavedModel; nothing is served
    from it."""


def _missing(names: list[str]) -> list[str]:
    """What a SavedModel needs that `names` (paths relative to its folder) lack: the graph,
    the variables' index and at least one data shard."""
    needs = {
        SAVED_MODEL_FILE: SAVED_MODEL_FILE in names,
        "variables/variables.index": "variables/variables.index" in names,
        "variables/variables.data-*": any(n.startswith("variables/variables.data-") for n in names),
    }
    return [name for name, present in needs.items() if not present]


def check_complete(folder: str, what: str) -> None:
    """IncompleteVersion naming `folder` and what it is missing, if anything."""
    missing = _missing(_files_under(folder)) if fileio.exists(folder) else ["everything"]
    if missing:
        raise IncompleteVersion(
            f"{what} {folder} is missing {', '.join(missing)}; nothing is served from it"
        )


class _Any:
    def __repr__(self) -> str:
        return "ANY"


ANY = _Any()  # expected_served for callers that do not know what was served: no check


def _highest_version(base_directory: str) -> int:
    """The highest numbered folder, rolled-back ones included (0 when none): the push lock's
    holder numbers past it, so no number is ever used twice."""
    aside = served_versions.join(base_directory, served_versions.ROLLED_BACK_DIR)
    names = served_versions.listdir(base_directory) + [
        n.removesuffix(".json") for n in served_versions.listdir(aside)
    ]  # a rolled-back version's record outlives its files (retention.prune_rolled_back)
    return max((int(n) for n in names if n.isdigit()), default=0)


def _remove_dead_commits(base_directory: str) -> None:
    """Under the push lock only: a numbered folder without saved_model.pb is a commit that
    died or lost the lock midway (nothing in it can be served); its staging goes first, so
    its writer, if merely stalled, has nothing left to move in."""
    clear_committing(base_directory)
    for name in served_versions.listdir(base_directory):
        if name.isdigit() and not served_versions.is_complete(base_directory, name):
            remove_tree(served_versions.join(base_directory, name))


def _pushed_from(base_directory: str, version: str) -> str | None:
    source = served_versions.join(base_directory, version, SOURCE_FILE)
    return served_versions.read_text(source) if served_versions.exists(source) else None


def _served_already(base_directory: str, model_path: str, expected_served):
    """(path, version, False) when the newest complete version holds `model_path`; raises
    ServedVersionChanged when the newest is not `expected_served`; else None."""
    newest = served_versions.newest_complete_version(base_directory)
    if newest is not None and _pushed_from(base_directory, newest) == model_path:
        return served_versions.join(base_directory, newest), newest, False
    if expected_served is not ANY and newest != expected_served:
        raise ServedVersionChanged(expected_served, newest)
    return None


def copy_to_staging(model_path: str, staging: str, *kept: tuple[str, str]) -> None:
    """The model, the file naming it, and `kept` (source path, name in the version): the
    training data's statistics, spans and image index, moved into place with the model, so
    a version never lacks them."""
    for name in fileio.listdir(model_path):
        source = served_versions.join(model_path, name.rstrip("/"))
        target = served_versions.join(staging, name.rstrip("/"))
        if fileio.isdir(source):
            io_utils.copy_dir(source, target)
        else:
            fileio.copy(source, target)
    io_utils.write_string_file(served_versions.join(staging, SOURCE_FILE), model_path)
    for path, name in kept:
        fileio.copy(path, served_versions.join(staging, name))


def _files_under(directory: str) -> list[str]:
    """Paths of all files under `directory`, relative to it (its LEASE left out)."""
    names = (
        os.path.relpath(os.path.join(root, name), directory)
        for root, _, names in fileio.walk(directory)
        for name in names
    )
    return sorted(name for name in names if name not in (LEASE_FILE, COMMIT_FILE))


def move_into_place(staging: str, final: str, before_last=None) -> None:
    """Moves every staged file into `final`, saved_model.pb last, `before_last()` called
    just before it; each file move is atomic on local disks and object stores alike (one
    object), a folder move is not."""
    files = sorted(_files_under(staging), key=lambda name: name == SAVED_MODEL_FILE)
    for name in files:
        target = os.path.join(final, name)
        if name == SAVED_MODEL_FILE and before_last is not None:
            before_last()
        if object_store.is_s3(target):  # no folders to make; one object, not a key prefix
            object_store.move_file(os.path.join(staging, name), target)
            continue
        fileio.makedirs(os.path.dirname(target))
        fileio.rename(os.path.join(staging, name), target)


def publish_version(
    model_path: str,
    base_directory: str,
    *kept: tuple[str, str],
    expected_served=ANY,
    keep_versions: int = 0,
    check=None,
    before_commit=None,
    after_commit=None,
) -> tuple[str, str, bool]:
    """Copies a SavedModel to `<base>/<version>/`, loadable only once complete (the module's
    docstring has the protocol). `expected_served`: the newest complete version the run read
    at its start (None: nothing was served), or ANY to skip that check. `check(staging)`,
    when given, judges the staged copy before the lock is taken (the load test); what it
    raises stops the push with nothing committed. Under the push lock: `before_commit(staging,
    version)` once the number is chosen (what it writes into `staging` is committed with the
    model; what it raises commits nothing), `after_commit(version)` once the version is
    complete and the oldest are pruned.

    Returns (path, version, is_new); is_new is False when that model is already served.
    After a new version, the oldest beyond `keep_versions` go (retention.bound; 0: none).
    """
    fileio.makedirs(base_directory)
    clear_dead_staging(base_directory)
    # Checked before copying too, so a retry copies nothing and a stale run fails at once.
    served = _served_already(base_directory, model_path, expected_served)
    if served is not None:
        return served
    with staging_folder(base_directory) as staging:
        copy_to_staging(model_path, staging, *kept)
        if check is not None:
            check(staging)
        with push_lock(base_directory) as held:
            _remove_dead_commits(base_directory)
            served = _served_already(base_directory, model_path, expected_served)
            if served is not None:
                return served
            version = str(held.reserve(_highest_version(base_directory)))
            final = served_versions.join(base_directory, version)
            if before_commit is not None:
                before_commit(staging, version)
            _commit(held, staging, final, version)
            retention.bound(base_directory, keep_versions)
            if after_commit is not None:
                after_commit(version)
            return final, version, True


def _commit(held, staging: str, final: str, version: str) -> None:
    """The staged files moved into `final` while `held` (the push lock) lasts; a move that
    fails because the lock was lost (another push removed this staging) is PushLeaseLost."""
    check_complete(staging, "the staged copy")
    mark_committing(staging, version)
    try:
        move_into_place(staging, final, before_last=held.check)
    except PushLeaseLost:
        raise
    except Exception:
        held.check()  # PushLeaseLost when the lock is gone, else the move's own error
        raise
    check_complete(final, "the committed version")


def _spans_record(input_dict, folder: str) -> str | None:
    """The spans the pushed model was trained on, written to `folder`: this run's (the
    ExampleGen's record) and, for a warm-started model, those of the version it started
    from (the Trainer's note beside the model), so a version's record covers its ancestors'
    data. None when the run recorded no spans."""
    examples = input_dict.get("examples")
    record = os.path.join(examples[0].uri, SERVED_SPANS_FILE) if examples else ""
    if not record or not fileio.exists(record):
        return None
    fingerprints = json.loads(io_utils.read_string_file(record))["fingerprints"]
    started_from = os.path.join(input_dict["model"][0].uri, WARM_START_FILE)
    if fileio.exists(started_from):
        ancestors = json.loads(io_utils.read_string_file(started_from))["spans"]
        fingerprints = {**ancestors, **fingerprints}
    merged = {"spans": sorted(int(n) for n in fingerprints), "fingerprints": fingerprints}
    path = os.path.join(folder, SERVED_SPANS_FILE)
    io_utils.write_string_file(path, json.dumps(merged, sort_keys=True))
    return path


def _ancestors_index(input_dict, version_dir: str) -> str | None:
    """The training-image index of the version a model was warm-started from: the ServedState
    step's copy when that is the version (it is, in a pipeline), else the version's own."""
    served = input_dict.get("served_model")
    if served and served_versions.load_served_state(served[0].uri).version_dir == version_dir:
        return served_versions.served_images_file(served[0].uri)
    path = served_versions.join(version_dir, SERVED_IMAGES_FILE)
    return path if version_dir and served_versions.exists(path) else None


def _images_index(input_dict, folder: str) -> str | None:
    """The images the pushed model was trained on (the next run drops eval images among
    them): this run's train split (the ExampleGen's index) and, for a warm-started model,
    those of the version it started from, the union written to `folder`. None when the run
    has no index, or the starting version has none (what the model saw is then not known)."""
    examples = input_dict.get("examples")
    own = os.path.join(examples[0].uri, SERVED_IMAGES_FILE) if examples else ""
    if not own or not fileio.exists(own):
        return None
    started_from = os.path.join(input_dict["model"][0].uri, WARM_START_FILE)
    if not fileio.exists(started_from):
        return own
    version_dir = json.loads(io_utils.read_string_file(started_from))["version_dir"]
    ancestors = _ancestors_index(input_dict, version_dir)
    if ancestors is None:
        logging.warning(
            "no training-image index kept: the model started from %s, which has none", version_dir
        )
        return None
    union = unpack_digests(io_utils.read_bytes_file(own))
    union |= unpack_digests(io_utils.read_bytes_file(ancestors))
    path = os.path.join(folder, SERVED_IMAGES_FILE)
    io_utils.write_bytes_file(path, pack_digests(union))
    return path


def _kept(input_dict, folder: str) -> list[tuple[str, str]]:
    """What a version keeps beside the model, from the optional inputs that are there."""
    kept = []
    statistics = input_dict.get("statistics")
    if statistics:
        kept.append((statistics_file(statistics[0], TRAIN_SPLIT), SERVED_STATISTICS_FILE))
    record = _spans_record(input_dict, folder)
    if record:
        kept.append((record, SERVED_SPANS_FILE))
    index = _images_index(input_dict, folder)
    if index:
        kept.append((index, SERVED_IMAGES_FILE))
    return kept


def expected_served(input_dict):
    """The version the run read at its start, from the ServedState step's output (None:
    nothing was served); ANY when that input is not wired (no check)."""
    served = input_dict.get("served_model")
    return served_versions.load_served_state(served[0].uri).version if served else ANY


# On the PushedModel of a night whose served version changed under it (or whose push lost its
# lease): the one-line reason. The run's outcome is then `served_changed` (exit status 6 for
# `run` and `local-kfp`; a compiled night reports it), and the step itself succeeds.
SERVED_CHANGED_KEY = "served_changed"


def _served_changed(input_dict, model_push, changed: ServedVersionChanged) -> None:
    logging.warning("Nothing pushed: %s", changed)
    model_push.set_string_custom_property(SERVED_CHANGED_KEY, str(changed))
    facts = night_facts.facts_dir_of(input_dict.get("served_model") or [])
    night_facts.write(facts, night_facts.PUSHER, {"served_changed": str(changed)})


class Executor(pusher_executor.Executor):
    def before_commit(self, input_dict, exec_properties, staging: str, version: str) -> None:
        """Under the push lock, the staged copy load-tested and `version` chosen: where else
        the model goes before the version is visible (nothing here; vertex_endpoint.py
        deploys), recorded in `staging`. What it raises commits nothing."""

    def after_commit(self, exec_properties, version: str) -> None:
        """Under the push lock, once `version` is complete (nothing here)."""

    def Do(self, input_dict, output_dict, exec_properties) -> None:
        self._log_startup(input_dict, output_dict, exec_properties)
        model_push = artifact_utils.get_single_instance(
            output_dict[standard_component_specs.PUSHED_MODEL_KEY]
        )
        examples = input_dict.get("examples") or []
        if examples and examples[0].get_int_custom_property(NO_NEW_SPAN_PROPERTY):
            model_push.set_int_custom_property(NO_NEW_SPAN_PROPERTY, 1)
        if not self.CheckBlessing(input_dict):
            self._MarkNotPushed(model_push)
            return
        expected = expected_served(input_dict)
        kept = _kept(input_dict, model_push.uri)
        tested = []
        try:
            serving_path, version, is_new = publish_version(
                self.GetModelPath(input_dict),
                exec_properties[BASE_DIRECTORY_KEY],
                *kept,
                expected_served=expected,
                keep_versions=int(exec_properties.get(KEEP_VERSIONS_KEY) or 0),
                check=lambda staging: tested.append(load_test(staging)),
                before_commit=lambda staging, version: self.before_commit(
                    input_dict, exec_properties, staging, version
                ),
                after_commit=lambda version: self.after_commit(exec_properties, version),
            )  # LoadTestFailed propagates: the run fails with its one line (exit status 9)
        except ServedVersionChanged as changed:  # PushLeaseLost too: an outcome, not a failure
            _served_changed(input_dict, model_push, changed)
            self._MarkNotPushed(model_push)
            return
        except LoadTestFailed as failed:  # kept for a compiled run's report, then raised
            facts = night_facts.facts_dir_of(input_dict.get("served_model") or [])
            night_facts.write(facts, night_facts.PUSHER, {"load_test_failed": str(failed)})
            raise
        if tested:
            logging.info("Load test of the staged version %s", tested[0])
            model_push.set_string_custom_property(LOAD_TEST_KEY, tested[0])
        logging.info(
            "Model version %s %s at %s",
            version,
            "published" if is_new else "was already served",
            serving_path,
        )
        self._MarkPushed(model_push, pushed_destination=serving_path, pushed_version=version)
        model_push.set_int_custom_property(NEW_VERSION_KEY, int(is_new))
