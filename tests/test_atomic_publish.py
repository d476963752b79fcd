"""AtomicPusher on an object-store-like filesystem: a folder rename copies object by object
(as on GCS), and the push is killed after every possible object. TF Serving loads a version
once its saved_model.pb exists, so saved_model.pb must never be there before the rest."""

import os
import shutil

import pytest

from components.atomic_pusher import executor as pusher
from components.atomic_pusher.lock import LOCK_NAME

import cifar_fixtures as fx


class Killed(Exception):
    """The push process died here."""


class ObjectStoreRename:
    """`fileio.rename` as on GCS: copy every object, then delete the source; the process is
    killed after `kill_after` object writes (None: never)."""

    def __init__(self, kill_after: int | None):
        self.kill_after = kill_after
        self.writes = 0

    def _write(self, src: str, dst: str) -> None:
        if self.kill_after is not None and self.writes >= self.kill_after:
            raise Killed(f"killed after {self.writes} objects")
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(src, dst)
        self.writes += 1

    def __call__(self, src, dst, overwrite=False):
        src, dst = str(src), str(dst)
        if os.path.isdir(src):
            for root, _, names in sorted(os.walk(src)):
                for name in sorted(names):
                    path = os.path.join(root, name)
                    self._write(path, os.path.join(dst, os.path.relpath(path, src)))
            shutil.rmtree(src)
        else:
            self._write(src, dst)
            os.remove(src)


def _model(tmp_path, name):
    return fx.fake_saved_model(tmp_path, name)


def _files(directory):
    return fx.files_under(directory)


def _loadable_versions(base):
    """What TF Serving would load: numeric folders that have a saved_model.pb."""
    return {
        name: _files(os.path.join(base, name))
        for name in os.listdir(base)
        if name.isdigit() and os.path.exists(os.path.join(base, name, "saved_model.pb"))
    }


def _expected(model_path):
    return {**_files(model_path), pusher.SOURCE_FILE: model_path.encode()}


def test_a_push_killed_after_any_object_never_exposes_a_loadable_partial_version(
    tmp_path, monkeypatch
):
    first, second = _model(tmp_path, "first"), _model(tmp_path, "second")
    objects = len(fx.MODEL_FILES) + 1  # the model's files and PUSHED_FROM
    for kill_after in range(objects):
        base = str(tmp_path / f"serving-{kill_after}")
        pusher.publish_version(first, base)
        served = _loadable_versions(base)
        monkeypatch.setattr(pusher.fileio, "rename", ObjectStoreRename(kill_after))
        with pytest.raises(Killed):
            pusher.publish_version(second, base)
        # Whatever is loadable is complete: still just the first version, byte for byte.
        assert _loadable_versions(base) == served
        assert list(served.values()) == [_expected(first)]

        monkeypatch.setattr(pusher.fileio, "rename", ObjectStoreRename(None))
        path, version, is_new = pusher.publish_version(second, base)  # the next push
        assert is_new and _files(path) == _expected(second)
        # No leftovers; the push lock's file stays (on local disks, a lock file is never removed).
        left = sorted(set(os.listdir(base)) - {LOCK_NAME})
        assert sorted(_loadable_versions(base)) == left and len(left) == 2


def test_the_object_store_rename_would_expose_a_partial_folder_rename(tmp_path):
    """The fake is strict enough to catch the old scheme (rename the staged folder)."""
    staged = _model(tmp_path, "staged")
    final = str(tmp_path / "serving" / "1")
    rename = ObjectStoreRename(kill_after=2)
    with pytest.raises(Killed):
        rename(staged, final)
    assert os.path.exists(os.path.join(final, "saved_model.pb"))
    assert _files(final) != _files(staged)
