"""Bad --data is refused by `cifar10-pipeline run` before TFX, Beam or TensorFlow is
imported (they take about a minute here), with one line naming the file, and nothing
written."""

import json
import os
import pickle
import subprocess
import sys
import textwrap

import pytest

import cifar_fixtures as fx

RUN_THEN_LIST_HEAVY_MODULES = textwrap.dedent("""
    import json, sys
    from pipeline.cli import main
    status = main(sys.argv[1:])
    heavy = sorted({m.split(".")[0] for m in sys.modules}
                   & {"tensorflow", "tfx", "apache_beam", "tf_keras", "ml_metadata"})
    print(json.dumps({"status": status, "heavy": heavy}))
""")


def _run(*args):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    env.pop("CIFAR10_DATA", None)
    done = subprocess.run(
        [sys.executable, "-c", RUN_THEN_LIST_HEAVY_MODULES, "run", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def _corrupt_gzip(tmp_path):
    path = tmp_path / "c.tar.gz"
    path.write_bytes(b"\x1f\x8b\x08\x00" + b"garbage" * 100)
    return path, "corrupt or truncated archive"


def _not_an_archive(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    return path, "not a CIFAR-10 source"


def _no_batch_file(tmp_path):
    return (
        fx.write_tar(tmp_path / "c.tar.gz", {"cifar-10-batches-bin/readme.txt": b"hi"}),
        "no CIFAR-10 training data found",
    )


def _label_out_of_range(tmp_path):
    payload = bytearray(fx.binary_batch(fx.balanced_labels(1)))
    payload[0] = 10
    return (
        fx.write_tar(tmp_path / "c.tar.gz", {"b/data_batch_1.bin": bytes(payload)}),
        "data_batch_1.bin: record 0 has label 10",
    )


def _truncated_record(tmp_path):
    payload = fx.binary_batch(fx.balanced_labels(1))[:-5]
    return (
        fx.write_tar(tmp_path / "c.tar.gz", {"b/data_batch_1.bin": payload}),
        "is not a positive multiple of the 3073-byte record size",
    )


def _hostile_pickle(tmp_path):
    payload = pickle.dumps({b"data": print, b"labels": []}, protocol=2)
    return (
        fx.write_tar(tmp_path / "c.tar.gz", {"cifar-10-batches-py/data_batch_1": payload}),
        "refused to load global '__builtin__.print'",
    )


def _batch_without_images(tmp_path):
    import numpy as np

    payload = pickle.dumps({b"data": np.zeros((0, 3072), np.uint8), b"labels": []}, protocol=4)
    return (
        fx.write_tar(tmp_path / "c.tar.gz", {"cifar-10-batches-py/data_batch_1": payload}),
        "data_batch_1: the batch file holds no images",
    )


def _unsafe_member(tmp_path):
    members = {
        "cifar-10-batches-bin/data_batch_1.bin": fx.binary_batch(fx.balanced_labels(1)),
        "../../../../tmp/escaped": b"x",
    }
    return fx.write_tar(
        tmp_path / "c.tar.gz", members
    ), "unsafe archive member '../../../../tmp/escaped'"


@pytest.mark.parametrize(
    "make_bad_source",
    [
        _corrupt_gzip,
        _not_an_archive,
        _no_batch_file,
        _label_out_of_range,
        _truncated_record,
        _hostile_pickle,
        _batch_without_images,
        _unsafe_member,
    ],
)
def test_bad_data_is_refused_before_heavy_imports(tmp_path, make_bad_source):
    source, problem = make_bad_source(tmp_path)
    facts, stderr = _run("--data", source, "--output-dir", tmp_path / "out")
    assert facts == {"status": 2, "heavy": []}, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {source}") and problem in errors[0]
    assert not (tmp_path / "out").exists()


def test_missing_path_is_refused_before_heavy_imports(tmp_path):
    facts, stderr = _run("--data", tmp_path / "nope.tar.gz", "--output-dir", tmp_path / "out")
    assert facts == {"status": 2, "heavy": []}
    assert f"error: {tmp_path / 'nope.tar.gz'}: no such file or folder" in stderr
