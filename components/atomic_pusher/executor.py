"""Pusher executor whose version directories are never loadable half-written.

TFX's stock Pusher copies the model straight into `<base>/<version>/`; a crash
mid-copy leaves a partial version that TF Serving may try to load. Here the copy
goes to a hidden staging folder first. Renaming that folder into place is atomic on a
local disk but not on object stores (on GCS a folder rename copies and deletes object by
object), so the staged files are moved into `<base>/<version>/` one file at a time with
`saved_model.pb` last: TF Serving loads a version only once its saved_model.pb exists,
and by then every other file is complete. A version folder without saved_model.pb (a
push killed midway) holds nothing servable and is removed by the next push.
"""

from __future__ import annotations

import os
import time

from absl import logging
from tfx.components.pusher import executor as pusher_executor
from tfx.dsl.io import fileio
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import io_utils

from components.contract import (
    SAVED_MODEL_FILE,
    SERVED_SPANS_FILE,
    SERVED_STATISTICS_FILE,
    TRAIN_SPLIT,
)
from components.tfx_files import statistics_file

BASE_DIRECTORY_KEY = "base_directory"
STAGING_PREFIX = ".staging-"
# Beside saved_model.pb (TF Serving ignores other files): which model a version holds,
# so pushing the same model again (a rerun with a new blessing) adds no new version.
SOURCE_FILE = "PUSHED_FROM"
NEW_VERSION_KEY = "new_version"


def _next_version(base_directory: str) -> str:
    """Unix seconds, bumped past any existing version so versions only increase."""
    existing = (
        [int(n.rstrip("/")) for n in fileio.listdir(base_directory) if n.rstrip("/").isdigit()]
        if fileio.exists(base_directory)
        else []
    )
    return str(max([int(time.time())] + [v + 1 for v in existing]))


def clear_stale_staging(base_directory: str) -> None:
    """Removes what a push killed midway leaves: staging folders, and version folders that
    never got their saved_model.pb (nothing in them can be served)."""
    if not fileio.exists(base_directory):
        return
    for name in fileio.listdir(base_directory):
        path = os.path.join(base_directory, name.rstrip("/"))
        if name.startswith(STAGING_PREFIX) or (
            name.rstrip("/").isdigit() and not fileio.exists(os.path.join(path, SAVED_MODEL_FILE))
        ):
            fileio.rmtree(path)


def _version_holding(base_directory: str, model_path: str) -> str | None:
    for name in fileio.listdir(base_directory):
        source = os.path.join(base_directory, name.rstrip("/"), SOURCE_FILE)
        complete = fileio.exists(os.path.join(base_directory, name.rstrip("/"), SAVED_MODEL_FILE))
        if (
            name.rstrip("/").isdigit()
            and complete
            and fileio.exists(source)
            and io_utils.read_string_file(source) == model_path
        ):
            return name.rstrip("/")
    return None


def copy_to_staging(model_path: str, staging: str, *kept: tuple[str, str]) -> None:
    """The model, the file naming it, and `kept` (source path, name in the version): the
    training data's statistics and spans, moved into place with the model, so a version
    never lacks them."""
    io_utils.copy_dir(model_path, staging)
    io_utils.write_string_file(os.path.join(staging, SOURCE_FILE), model_path)
    for path, name in kept:
        fileio.copy(path, os.path.join(staging, name))


def _files_under(directory: str) -> list[str]:
    """Paths of all files under `directory`, relative to it."""
    return sorted(
        os.path.relpath(os.path.join(root, name), directory)
        for root, _, names in fileio.walk(directory)
        for name in names
    )


def move_into_place(staging: str, final: str) -> None:
    """Moves every staged file into `final`, saved_model.pb last; each file move is atomic
    on local disks and object stores alike (one object), a folder move is not."""
    files = sorted(_files_under(staging), key=lambda name: name == SAVED_MODEL_FILE)
    for name in files:
        target = os.path.join(final, name)
        fileio.makedirs(os.path.dirname(target))
        fileio.rename(os.path.join(staging, name), target)
    fileio.rmtree(staging)


def publish_version(
    model_path: str, base_directory: str, *kept: tuple[str, str]
) -> tuple[str, str, bool]:
    """Copies a SavedModel to `<base>/<version>/`, loadable only once complete.

    Returns (path, version, is_new); is_new is False when that model is already served.
    """
    fileio.makedirs(base_directory)
    clear_stale_staging(base_directory)
    existing = _version_holding(base_directory, model_path)
    if existing is not None:
        return os.path.join(base_directory, existing), existing, False
    version = _next_version(base_directory)
    staging = os.path.join(base_directory, f"{STAGING_PREFIX}{version}")
    copy_to_staging(model_path, staging, *kept)
    final = os.path.join(base_directory, version)
    move_into_place(staging, final)
    return final, version, True


def _kept(input_dict) -> list[tuple[str, str]]:
    """What a version keeps beside the model, from the optional inputs that are there."""
    kept = []
    statistics, examples = input_dict.get("statistics"), input_dict.get("examples")
    if statistics:
        kept.append((statistics_file(statistics[0], TRAIN_SPLIT), SERVED_STATISTICS_FILE))
    if examples and fileio.exists(os.path.join(examples[0].uri, SERVED_SPANS_FILE)):
        kept.append((os.path.join(examples[0].uri, SERVED_SPANS_FILE), SERVED_SPANS_FILE))
    return kept


class Executor(pusher_executor.Executor):
    def Do(self, input_dict, output_dict, exec_properties) -> None:
        self._log_startup(input_dict, output_dict, exec_properties)
        model_push = artifact_utils.get_single_instance(
            output_dict[standard_component_specs.PUSHED_MODEL_KEY]
        )
        if not self.CheckBlessing(input_dict):
            self._MarkNotPushed(model_push)
            return
        serving_path, version, is_new = publish_version(
            self.GetModelPath(input_dict), exec_properties[BASE_DIRECTORY_KEY], *_kept(input_dict)
        )
        logging.info(
            "Model version %s %s at %s",
            version,
            "published" if is_new else "was already served",
            serving_path,
        )
        self._MarkPushed(model_push, pushed_destination=serving_path, pushed_version=version)
        model_push.set_int_custom_property(NEW_VERSION_KEY, int(is_new))
