"""`s3://` (Kubeflow Pipelines' artifact store: SeaweedFS since KFP 2.15, MinIO before) through
components/object_store.py. Unit tests on the environment mapping and the current stack's
refusal; the rest against a real SeaweedFS server on 127.0.0.1 (tests/seaweed.py, marker
s3_store, `make test-s3`). A process that imported tensorflow-io aborts at interpreter exit
(tensorflow/io#2039), so whatever opens s3:// runs in a subprocess, never in pytest's own."""

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from components import object_store
from components.cifar10_example_gen.sources import count_records
from pipeline import cli

import seaweed
from conftest import FAST_TRAINING, versions

REPO_ROOT = Path(__file__).resolve().parents[1]
KFP_ENDPOINT = "http://minio-service.kubeflow:9000"
S3_ROOT = ["--pipeline-root", "s3://mlpipeline/root", "--data", "s3://mlpipeline/c.tar.gz"]
KUBEFLOW = ["compile", "--target", "kubeflow", "--image", "registry.example.com/x:v1", *S3_ROOT]


def test_the_cluster_endpoint_maps_to_what_tensorflow_io_reads():
    # A KFP step's environment: the artifact secret's keys and AWS_ENDPOINT_URL only.
    env = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_ENDPOINT_URL": KFP_ENDPOINT}
    assert object_store.tensorflow_io_settings(env) == {
        "S3_ENDPOINT": KFP_ENDPOINT,
        "S3_VERIFY_SSL": "0",
        "AWS_REGION": "us-east-1",
        "S3_DISABLE_MULTI_PART_DOWNLOAD": "1",
    }


def test_an_endpoint_without_scheme_gets_one_and_the_users_settings_stay():
    env = {"S3_ENDPOINT": "minio-service.kubeflow:9000", "AWS_REGION": "eu-west-1"}
    env["S3_DISABLE_MULTI_PART_DOWNLOAD"] = "0"
    settings = object_store.tensorflow_io_settings(env)
    assert settings == {"S3_ENDPOINT": KFP_ENDPOINT, "S3_VERIFY_SSL": "0"}
    env["S3_USE_HTTPS"] = "1"
    assert object_store.endpoint(env) == "https://minio-service.kubeflow:9000"
    assert object_store.tensorflow_io_settings({})["AWS_REGION"] == "us-east-1"


def test_importing_it_and_local_paths_import_no_tensorflow():
    code = (
        "import sys; from components import object_store as o\n"
        "o.enable('/data/c.tar.gz'); o.enable('gs://b/c.tar.gz'); o.check_bucket('/x')\n"
        "assert not {'tensorflow', 'tensorflow_io', 'botocore'} & set(sys.modules)\n"
        "assert not o.active()"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-2000:]


@pytest.fixture
def on_the_current_stack(monkeypatch):
    monkeypatch.setattr(object_store, "_running_stack_name", lambda: "current")


def test_the_current_stack_refuses_s3_with_one_line(on_the_current_stack):
    for call in (object_store.enable, object_store.gfile, object_store.check_bucket):
        with pytest.raises(object_store.ObjectStoreError, match="use the legacy stack"):
            call("s3://mlpipeline/data/c.tar.gz")
    assert not object_store.active()
    object_store.enable("gs://bucket/c.tar.gz")  # other schemes are TensorFlow's own


def test_run_on_the_current_stack_refuses_s3_data(on_the_current_stack, tmp_path, capsys):
    args = ["run", "--data", "s3://mlpipeline/c.tar.gz", "--output-dir", str(tmp_path / "o")]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert "needs tensorflow-io" in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("flag", ["--pipeline-root", "--data"])
def test_compile_on_the_current_stack_refuses_an_s3_store(
    on_the_current_stack, tmp_path, capsys, flag
):
    args = [*KUBEFLOW, "--output", str(tmp_path / "p.yaml")]
    if flag == "--pipeline-root":
        args[args.index("--data") + 1] = "gs://bucket/c.tar.gz"
    else:
        args[args.index("--pipeline-root") + 1] = "gs://bucket/root"
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert f"{flag} s3://mlpipeline/" in err and "legacy stack" in err, err
    assert len(err.splitlines()) == 1, err
    assert not (tmp_path / "p.yaml").exists()


def test_a_gzipped_archive_reads_through_tf_io_gfile(tiny_archive):
    # GFile has no readinto(), which gzip's reader calls: every gzipped archive on gs:// or
    # s3:// failed with AttributeError. file:// goes through tf.io.gfile without a server.
    local = count_records(str(tiny_archive))
    assert count_records(f"file://{tiny_archive}") == local


# ---- against a real SeaweedFS server ----------------------------------------------------


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory):
    with seaweed.running(tmp_path_factory.mktemp("seaweedfs")) as server:
        yield server


@pytest.fixture(scope="session")
def s3_data(seaweedfs, tiny_archive):
    """The tiny archive as a plain source and as span 1 of a span root."""
    return {
        "plain": seaweedfs.upload(tiny_archive, "data/cifar.tar.gz"),
        "spans": seaweedfs.upload(tiny_archive, "nightly/span-1/cifar.tar.gz").rsplit("/", 2)[0],
    }


def _cli(server: seaweed.Server, *args, timeout=900, **env):
    environ = {**os.environ, "CUDA_VISIBLE_DEVICES": "", **server.env(**env)}
    environ.pop("CIFAR10_DATA", None)
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", *map(str, args)],
        capture_output=True,
        text=True,
        env=environ,
        timeout=timeout,
    )


@pytest.mark.s3_store
def test_tf_io_gfile_reads_back_what_was_stored(seaweedfs):
    # tensorflow-io's multi-part download returns other bytes from SeaweedFS: object_store
    # switches it off (S3_DISABLE_MULTI_PART_DOWNLOAD) unless the user set it.
    payload = os.urandom(3_000_000)
    seaweedfs.client().put_object(Bucket=seaweedfs.bucket, Key="probe/blob", Body=payload)
    code = textwrap.dedent(
        """
        import os, sys
        from components import object_store
        path = "s3://mlpipeline/probe/blob"
        data = object_store.gfile(path).GFile(path, "rb").read()
        sys.stdout.buffer.write(data); sys.stdout.flush()
        os._exit(0)
        """
    )
    env = {**os.environ, **seaweedfs.env()}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, env=env)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert done.stdout == payload


@pytest.mark.s3_store
@pytest.mark.integration
def test_run_trains_on_an_archive_in_the_bucket(seaweedfs, s3_data, tiny_archive, tmp_path):
    out = tmp_path / "out"
    done = _cli(seaweedfs, "run", "--data", s3_data["plain"], "--output-dir", out, "--epochs", "1",
                *FAST_TRAINING[2:], "--accuracy-gate", "0")  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    assert len(versions(out)) == 1
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["outcome"] == "pushed"
    total = sum(count_records(str(tiny_archive)).values())
    assert sum(summary["record_counts"].values()) == total


@pytest.mark.s3_store
@pytest.mark.integration
def test_run_resolves_a_span_folder_in_the_bucket(seaweedfs, s3_data, tmp_path):
    out = tmp_path / "out"
    done = _cli(seaweedfs, "run", "--data", s3_data["spans"], "--output-dir", out, "--epochs", "1",
                *FAST_TRAINING[2:], "--accuracy-gate", "0")  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    assert f"Data: {s3_data['spans']}, spans [1]" in done.stderr
    assert len(versions(out)) == 1


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.s3_store
@pytest.mark.parametrize(
    "change, message",
    [
        ("endpoint", "cannot reach the server"),
        ("bucket", "no bucket named 'no-such-bucket'"),
        ("secret", "the server refused the credentials"),
        ("object", "no such file or folder"),
    ],
)
def test_a_wrong_store_is_one_line_and_exit_2(seaweedfs, s3_data, tmp_path, change, message):
    data, env = s3_data["plain"], {}
    if change == "endpoint":
        env["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{_closed_port()}"
    elif change == "bucket":
        data = data.replace(f"s3://{seaweedfs.bucket}/", "s3://no-such-bucket/")
    elif change == "secret":
        env["AWS_SECRET_ACCESS_KEY"] = "not-the-secret"
    else:
        data = data.replace("cifar.tar.gz", "missing.tar.gz")
    out = tmp_path / "o"
    done = _cli(seaweedfs, "run", "--data", data, "--output-dir", out, timeout=120, **env)
    assert done.returncode == 2, done.stderr[-3000:]
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {data}: "), done.stderr[-3000:]
    assert message in lines[0]
