"""Bounded serving folders: after each push, under the push lock, the oldest complete versions
beyond `keep` are removed. Never removed: the served version (the newest), the one before it
(what a rollback serves), and the version the latest rollback went back to. Versions kept
aside by a rollback are not counted; of those, only the newest ROLLED_BACK_WHOLE keep their
files (`prune_rolled_back`), every one its record. A version is removed `saved_model.pb` first, so
a removal that dies midway leaves a folder that is not complete, which the next push clears."""

from __future__ import annotations

from absl import logging

from components.contract import MIN_KEEP_VERSIONS as MIN_KEEP
from components.contract import ROLLED_BACK_WHOLE, SAVED_MODEL_FILE
from components.storage import paths, served_versions
from components.storage.paths import remove_tree


def protected(base_directory: str, versions: list[str]) -> set[str]:
    """The served version, the one before it, and the one the latest rollback went back to
    (the version an operator last chose; earlier rollbacks' choices age out like any other)."""
    records = served_versions.rolled_back(base_directory)
    # the latest: by its time, then (two in one second) by the version it set aside
    latest = max(records.items(), key=lambda kv: (kv[1].get("when", ""), int(kv[0])), default=None)
    return set(versions[-MIN_KEEP:]) | ({latest[1]["rolled_back_to"]} if latest else set())


def prune(base_directory: str, keep: int) -> list[str]:
    """Under the push lock only: removes the oldest complete versions beyond `keep` (0: keep
    every version); returns the versions removed, oldest first."""
    if keep <= 0:
        return []
    if keep < MIN_KEEP:
        raise ValueError(f"keep_versions must be at least {MIN_KEEP} (or 0: keep all), got {keep}")
    versions = served_versions.complete_versions(base_directory)
    spared = protected(base_directory, versions)
    removed = []
    for version in versions:
        if len(versions) - len(removed) <= keep:
            break
        if version in spared:
            continue
        folder = paths.join(base_directory, version)
        paths.remove(paths.join(folder, SAVED_MODEL_FILE))
        remove_tree(folder)
        removed.append(version)
    return removed


def prune_rolled_back(base_directory: str, whole: int = ROLLED_BACK_WHOLE) -> list[str]:
    """Under the push lock only: removes the files of the rolled-back versions but the newest
    `whole`; each keeps its record (ROLLED_BACK_DIR/<version>.json: who, when, why and the
    spans it was trained on), which every later night and the version numbering read.
    Returns the versions whose files went, oldest first."""
    aside = paths.join(base_directory, served_versions.ROLLED_BACK_DIR)
    recorded = served_versions.rolled_back(base_directory)
    folders = sorted((n for n in paths.listdir(aside) if n.isdigit()), key=int)
    removed = []
    for version in folders[: max(len(folders) - whole, 0)]:
        if version in recorded:  # a folder without its record is no rollback's: left alone
            remove_tree(paths.join(aside, version))
            removed.append(version)
    return removed


def bound(base_directory: str, keep: int) -> None:
    """Under the push lock only, after a push: `prune`, then `prune_rolled_back`."""
    if removed := prune(base_directory, keep):
        logging.info("Removed versions %s (--keep-versions %d)", removed, keep)
    if aside := prune_rolled_back(base_directory):
        logging.info("Removed the files of rolled-back versions %s", aside)
