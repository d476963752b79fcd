"""gs:// end to end against fake-gcs-server, as the s3_store tests do for s3:// (marker
gcs_store, `make test-gcs`): TensorFlow's own GCS filesystem, unchanged, reaches the emulator
because tests/gcs_namespace.py puts it where www.googleapis.com and storage.googleapis.com
lead, in a mount and network namespace of its own (root only, loopback only). Beam's gcsio
and the push lease (google-cloud-storage) reach it by STORAGE_EMULATOR_HOST.

What the emulator cannot show: real OAuth (a made-up bearer token, GOOGLE_AUTH_TOKEN_FOR_TESTING,
is sent and not checked), IAM refusals, and TensorFlow's request exactly as sent: its empty
POSTs and PUTs carry `Transfer-Encoding: identity`, which fake-gcs-server (Go's HTTP server)
refuses with 501, so the proxy in between drops that header (GCS itself accepts it)."""

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from components.atomic_pusher.executor import SOURCE_FILE
from pipeline import cli

import cifar_fixtures as fx
import gcs_namespace
from conftest import FAST_TRAINING, versions

REPO_ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.gcs_store


@pytest.fixture(scope="module")
def namespace(tmp_path_factory):
    reason = gcs_namespace.unusable()
    if reason:
        pytest.skip(f"gs:// namespace: {reason}")
    with gcs_namespace.running(tmp_path_factory.mktemp("gcs-namespace")) as made:
        yield made


_UPLOAD = """
import sys
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage
bucket = storage.Client(project="p", credentials=AnonymousCredentials()).bucket(sys.argv[2])
bucket.blob(sys.argv[3]).upload_from_filename(sys.argv[1])
"""

_NAMES = """
import json, sys
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage
client = storage.Client(project="p", credentials=AnonymousCredentials())
print(json.dumps(sorted(b.name for b in client.list_blobs(sys.argv[1], prefix=sys.argv[2]))))
"""


def _upload(namespace, local: Path, key: str) -> str:
    done = namespace.python(_UPLOAD, local, namespace.bucket, key)
    assert done.returncode == 0, done.stderr[-3000:]
    return f"gs://{namespace.bucket}/{key}"


def _names(namespace, prefix: str) -> list[str]:
    done = namespace.python(_NAMES, namespace.bucket, prefix)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def _cli(namespace, *args, timeout=900):
    return namespace.run(sys.executable, "-m", "pipeline.cli", *args, timeout=timeout)


_GFILE_CALLS = """
import json, tensorflow as tf
g, base = tf.io.gfile, "gs://gcs-bucket/probe"
seen = {"before": g.exists(f"{base}/a/f")}
with g.GFile(f"{base}/a/f", "w") as handle:  # a resumable upload
    handle.write("x" * 3_000_000)
g.rename(f"{base}/a/f", f"{base}/b/f")  # a rewrite, then a delete
g.copy(f"{base}/b/f", f"{base}/c/f")
g.makedirs(f"{base}/d/e")
seen.update(
    a=g.listdir(f"{base}/a") if g.exists(f"{base}/a") else None, b=g.listdir(f"{base}/b"),
    size=len(g.GFile(f"{base}/c/f", "rb").read()), isdir=g.isdir(f"{base}/d/e"),
    stat=g.stat(f"{base}/b/f").length,
)
g.rmtree(f"{base}/d")
seen["after_rmtree"] = g.exists(f"{base}/d/e")
seen["walk"] = [[top, sorted(files)] for top, _, files in g.walk(base)]
print(json.dumps(seen))
"""


def test_tensorflows_own_gfile_calls_reach_the_emulator(namespace):
    done = namespace.python(_GFILE_CALLS)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert not seen["before"] and seen["b"] == ["f"] and seen["a"] in (None, [])
    assert seen["size"] == seen["stat"] == 3_000_000 and seen["isdir"]
    assert not seen["after_rmtree"]
    assert [f"{top.rstrip('/')}" for top, files in seen["walk"] if files] == [
        "gs://gcs-bucket/probe/b",
        "gs://gcs-bucket/probe/c",
    ]


@pytest.mark.integration
def test_run_trains_on_an_archive_in_the_bucket(namespace, tiny_archive, tmp_path):
    """`run` keeps its artifacts, metadata and serving folder under a local --output-dir
    (it has no gs:// serving folder of its own): here the data is what is on gs://."""
    data = _upload(namespace, tiny_archive, "data/cifar.tar.gz")
    out = tmp_path / "out"
    done = _cli(namespace, "run", "--data", data, "--output-dir", out, "--epochs", "1",
                *FAST_TRAINING[2:], "--accuracy-gate", "0")  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    assert len(versions(out)) == 1
    assert json.loads((out / "run_summary.json").read_text())["outcome"] == "pushed"


_LOAD = """
import sys, tensorflow as tf
model = tf.saved_model.load(sys.argv[1])
print(sorted(model.signatures))
"""


def _compile(path: Path, root: str, data: str) -> None:
    args = ["compile", "--target", "kubeflow", "--image", "img:1", "--pipeline-root", root]
    args += ["--data", data, "--output", str(path), "--epochs", "1", *FAST_TRAINING[2:]]
    assert cli.main([*args, "--accuracy-gate", "0"]) == 0


@pytest.mark.integration
def test_the_kubeflow_file_pushes_to_gs_and_then_finds_nothing_new(
    namespace, tiny_archive, tmp_path
):
    """Compiled for a gs:// pipeline root, data and serving folder; run by kfp.local with
    the URIs kept: every step reads and writes the emulator (TensorFlow's gs:// and Beam's
    gcsio), the Pusher commits the version there, and a second night finds the served
    version trained on the newest span and trains nothing."""
    bucket = namespace.bucket
    _upload(namespace, tiny_archive, "nightly/span-1/cifar.tar.gz")
    path = tmp_path / "cifar10.yaml"
    _compile(path, f"gs://{bucket}/root", f"gs://{bucket}/nightly")
    out = tmp_path / "kfp"
    night = _cli(namespace, "local-kfp", path, "--keep-uris", "--output-dir", out, timeout=1500)
    assert night.returncode == 0, night.stderr[-4000:] + night.stdout[-4000:]
    serving = "root/serving/cifar10/"
    names = _names(namespace, serving)
    # Beside the version: TensorFlow's folder markers ('name/') and the push lease's object.
    top = {name[len(serving) :].split("/")[0] for name in names} - {"", ".push.lock", ".nights"}
    assert len(top) == 1 and next(iter(top)).isdigit(), names
    [number] = top
    model = f"{serving}{number}/"
    assert f"{model}saved_model.pb" in names, names
    assert any(name.startswith(f"{model}variables/variables.data") for name in names), names
    assert f"{model}variables/variables.index" in names, names
    assert f"pushed         gs://{bucket}/{model.rstrip('/')}" in night.stdout
    assert not list(out.rglob("saved_model.pb"))  # nothing of the model went to local disk
    loaded = namespace.python(_LOAD, f"gs://{bucket}/{model}")
    assert loaded.returncode == 0 and "serving_default" in loaded.stdout, loaded.stderr[-3000:]

    second = _cli(namespace, "local-kfp", path, "--keep-uris", "--output-dir", out, timeout=1500)
    assert second.returncode == 0, second.stderr[-4000:] + second.stdout[-4000:]
    assert "outcome        no_new_span: no new span" in second.stdout, second.stdout[-3000:]

    def versions(listed):  # each night also keeps its record in .nights/, by design
        return [name for name in listed if "/.nights/" not in name]

    assert versions(_names(namespace, serving)) == versions(names)
    root = f"gs://{bucket}/root"
    status = _cli(namespace, "status", "--output-dir", root, "--json", timeout=300)
    assert status.returncode == 0, status.stderr[-3000:]
    assert json.loads(status.stdout)["served"] == number
    # the only version: refused in one line, nothing moved
    only = _cli(namespace, "rollback", "--output-dir", root, "--reason", "test", timeout=300)
    assert only.returncode == 2 and only.stderr.startswith("error: "), only.stderr[-3000:]
    assert versions(_names(namespace, serving)) == versions(names)


def test_the_pusher_itself_on_gs_after_a_holder_stopped_mid_move(namespace, tmp_path):
    """tests/test_push_lease.py's Pusher case on gs://, through TensorFlow's own filesystem:
    the first push is stopped (SIGSTOP) with all but saved_model.pb moved; the next takes the
    lease over, clears the half version and commits whole; the first, woken, commits
    nothing. Left: the next push's version and the lease object."""
    import test_push_lease as lease_tests

    base = f"gs://{namespace.bucket}/pusher-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(REPO_ROOT)}
    env.update(namespace.env(LEASE_SECONDS=str(lease_tests.LEASE_SECONDS)))

    def publish(model: str, stall: str) -> subprocess.Popen:
        command = namespace.command(sys.executable, "-c", lease_tests.PUBLISH, model, base, stall)
        pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
        return subprocess.Popen(command, **pipes, env=env, cwd=REPO_ROOT, start_new_session=True)

    first_model, next_model = (fx.fake_saved_model(tmp_path, n) for n in ("first", "next"))
    first, following = publish(first_model, "stop"), None
    try:
        lease_tests._wait_for(first, "STALLED")
        following = publish(next_model, "no")
        out, err = following.communicate(timeout=120)
        assert following.returncode == 0, err[-3000:]
        (number,) = lease_tests._numbers(out, "PUSHED")
        os.killpg(first.pid, signal.SIGCONT)
        late_out, late_err = first.communicate(timeout=120)
    finally:
        for process in (first, following):
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    assert first.returncode == 3 and "lost the push lease" in late_out, late_err[-3000:]
    prefix = base[len(f"gs://{namespace.bucket}/") :] + "/"
    left = {n[len(prefix) :] for n in _names(namespace, prefix) if not n.endswith("/")}
    model = {f"{number}/{name}" for name in fx.files_under(next_model)}
    assert left - {".push.lock"} == model | {f"{number}/{SOURCE_FILE}"}, left
