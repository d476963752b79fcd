"""Bounded serving folders: after each push, under the push lock, the oldest complete versions
beyond `keep` are removed. Never removed: the served version (the newest), the one before it
(what a rollback serves), and any version a rollback went back to. Versions kept aside by a
rollback are not counted and not touched. A version is removed `saved_model.pb` first, so a
removal that dies midway leaves a folder that is not complete, which the next push clears."""

from __future__ import annotations

from components import paths, served_versions
from components.contract import MIN_KEEP_VERSIONS as MIN_KEEP
from components.contract import SAVED_MODEL_FILE
from components.paths import remove_tree


def protected(base_directory: str, versions: list[str]) -> set[str]:
    rolled_back_to = {
        record.get("rolled_back_to")
        for record in served_versions.rolled_back(base_directory).values()
    }
    return set(versions[-MIN_KEEP:]) | rolled_back_to


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
        target = paths.join(folder, SAVED_MODEL_FILE)
        if paths.is_remote(target):
            from components import object_store

            object_store.gfile(target).remove(target)
        else:
            import os

            os.remove(target)
        remove_tree(folder)
        removed.append(version)
    return removed
