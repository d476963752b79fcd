"""Bounded serving folders (`--keep-versions N`, default 10): after each push the oldest
complete versions beyond N go, never the served one, the one before it, or one a rollback
went back to; below 2 is refused."""

import pytest

from components.atomic_pusher import executor as pusher
from components.atomic_pusher import retention
from components.storage import served_versions
from pipeline import cli

import cifar_fixtures as fx


def test_eight_nights_with_keep_versions_3_leave_3_complete_versions(tmp_path):
    base = str(tmp_path / "serving" / "cifar10")
    pushed = []
    for night in range(8):
        model = fx.fake_saved_model(tmp_path, f"night-{night}")
        _, version, is_new = pusher.publish_version(model, base, keep_versions=3)
        assert is_new
        pushed.append(version)
    assert served_versions.complete_versions(base) == pushed[-3:]
    assert sorted(p.name for p in (tmp_path / "serving" / "cifar10").iterdir()
                  if p.name.isdigit()) == pushed[-3:]  # fmt: skip
    # what is left is whole: every file of the newest version, as pushed
    newest = tmp_path / "serving" / "cifar10" / pushed[-1]
    assert fx.files_under(newest)["saved_model.pb"].endswith(b"night-7")


def test_the_version_a_rollback_went_back_to_is_kept(tmp_path):
    base = tmp_path / "serving"
    for version in ("100", "200", "300", "400"):
        fx.served_version(base, version)
    assert cli.main(["rollback", "--model-dir", str(base), "--to", "100", "--reason", "x"]) == 0
    for version in ("500", "600", "700"):
        fx.served_version(base, version)
    assert retention.prune(str(base), 2) == ["500"]  # 100 (rolled back to), 600, 700 stay
    assert served_versions.complete_versions(str(base)) == ["100", "600", "700"]
    assert retention.prune(str(base), 0) == []  # 0: keep every version


@pytest.mark.parametrize("keep, left", [(3, ["300", "400", "500"]), (5, None), (6, None)])
def test_just_inside_and_outside_the_bound(tmp_path, keep, left):
    base = tmp_path / "serving"
    versions = ["100", "200", "300", "400", "500"]
    for version in versions:
        fx.served_version(base, version)
    retention.prune(str(base), keep)
    assert served_versions.complete_versions(str(base)) == (left or versions)


def test_a_removal_that_died_midway_leaves_no_complete_folder(tmp_path, monkeypatch):
    base = tmp_path / "serving"
    for version in ("100", "200", "300"):
        fx.served_version(base, version)

    def dies(path):
        raise OSError("killed")

    monkeypatch.setattr(retention, "remove_tree", dies)
    with pytest.raises(OSError):
        retention.prune(str(base), 2)
    assert served_versions.complete_versions(str(base)) == ["200", "300"]


@pytest.mark.parametrize("command", ["run", "compile"])
def test_keep_versions_below_2_is_refused_in_one_line(tmp_path, capsys, command):
    args = {
        "run": ["run", "--output-dir", str(tmp_path / "out")],
        "compile": ["compile", "--target", "kubeflow", "--pipeline-root", "gs://b/r", "--data",
                    "gs://b/d.tar.gz", "--image", "i", "--output", str(tmp_path / "k.yaml")],
    }[command]  # fmt: skip
    assert cli.main([*args, "--keep-versions", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --keep-versions: must be at least 2 (the served version and the one "
                   "before it), got 1"]  # fmt: skip
    assert not (tmp_path / "out").exists() and not (tmp_path / "k.yaml").exists()
