"""`s3://` (Kubeflow Pipelines' artifact store: SeaweedFS since KFP 2.15, MinIO before) through
components/storage/object_store.py. Unit tests on the environment mapping and the current stack's
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

from components.cifar10_example_gen.sources import count_records
from components.storage import object_store
from pipeline import cli
from pipeline.common import kfp_platform

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
    assert settings == {
        "S3_ENDPOINT": KFP_ENDPOINT,
        "AWS_ENDPOINT_URL": KFP_ENDPOINT,  # for Beam's S3 filesystem (boto3)
        "S3_VERIFY_SSL": "0",
    }
    env["S3_USE_HTTPS"] = "1"
    assert object_store.endpoint(env) == "https://minio-service.kubeflow:9000"
    assert object_store.tensorflow_io_settings({})["AWS_REGION"] == "us-east-1"


def test_importing_it_and_local_paths_import_no_tensorflow():
    code = (
        "import sys; from components.storage import object_store as o\n"
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
        from components.storage import object_store
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


# ---- Kubeflow steps on the s3:// store (Phase 2) -----------------------------------------

KFP_FAST = ["--epochs", "1", "--per-replica-batch-size", "64", "--precision", "float32"]


def _compile(path: Path, root: str, data: str, *extra: str) -> dict:
    args = ["compile", "--target", "kubeflow", "--image", "img:1", "--pipeline-root", root]
    args += ["--data", data, "--output", str(path), *KFP_FAST, "--accuracy-gate", "0", *extra]
    assert cli.main(args) == 0
    return kfp_platform.read_pipeline_file(path)[0]


def _commands(spec: dict) -> list[list[str]]:
    executors = spec["deploymentSpec"]["executors"].values()
    return [e["container"]["command"] for e in executors if "container" in e]


@pytest.fixture(scope="module")
def s3_file(tmp_path_factory):
    from components.runtime import stack

    if stack.running_stack() is stack.CURRENT:
        pytest.skip("the current stack refuses s3:// (its own test: the refusal)")
    path = tmp_path_factory.mktemp("s3-file") / "cifar10.yaml"
    return path, _compile(path, "s3://mlpipeline/root", "s3://mlpipeline/nightly")


def test_an_s3_store_starts_every_step_through_the_wrapper(s3_file, tmp_path):
    from pipeline.kubeflow.compile import S3_ENTRYPOINT, TFX_ENTRYPOINT

    commands = _commands(s3_file[1])
    assert commands and all(command == S3_ENTRYPOINT for command in commands)
    gs = _compile(tmp_path / "gs.yaml", "gs://bucket/root", "gs://bucket/data")
    assert all(command == TFX_ENTRYPOINT for command in _commands(gs))


def test_keep_uris_leaves_the_s3_store_and_maps_the_rest(s3_file, tmp_path):
    from pipeline.kfp_local import plan as kfp_plan

    image = kfp_plan.read_dockerfile(REPO_ROOT / "Dockerfile")
    args = (s3_file[0], "kubeflow", tmp_path / "out", None, REPO_ROOT, image)
    kept = kfp_plan.make_plan(*args, keep_uris=True)
    assert kept.remote_root == "s3://mlpipeline/root"
    text = json.dumps(kept.spec)
    assert "s3://mlpipeline/nightly" in text and "s3://mlpipeline/root/serving" in text
    assert image.workdir + "/" not in text  # the image's paths still map to the checkout
    with pytest.raises(kfp_plan.LocalRunError, match="no --data given"):
        kfp_plan.make_plan(*args)  # without it the s3:// data has no local stand-in


def test_keep_uris_leaves_a_gs_store_and_refuses_a_local_root(tmp_path):
    from pipeline.kfp_local import plan as kfp_plan

    image = kfp_plan.read_dockerfile(REPO_ROOT / "Dockerfile")
    path = tmp_path / "gs.yaml"
    _compile(path, "gs://bucket/root", "gs://bucket/nightly")
    kept = kfp_plan.make_plan(path, "kubeflow", tmp_path / "o", None, REPO_ROOT, image, True)
    assert kept.remote_root == "gs://bucket/root" and not kept.endpoint
    text = json.dumps(kept.spec)
    assert "gs://bucket/nightly" in text and "gs://bucket/root/serving" in text
    here = {"AWS_ACCESS_KEY_ID": "k", "GOOGLE_APPLICATION_CREDENTIALS": "/k.json", "X": "y"}
    assert kfp_plan.store_environment(kept, here) == {"GOOGLE_APPLICATION_CREDENTIALS": "/k.json"}
    local = tmp_path / "local.yaml"  # compile refuses a local root; a hand-edited file
    local.write_text(path.read_text().replace("gs://bucket/root", "/srv/root"))
    with pytest.raises(kfp_plan.LocalRunError, match="needs an s3:// or gs:// pipeline root"):
        kfp_plan.make_plan(local, "kubeflow", tmp_path / "o", None, REPO_ROOT, image, True)


def test_keep_uris_gives_the_steps_what_the_clusters_secret_and_endpoint_would(s3_file, tmp_path):
    """The steps get the variables the file's platform spec takes from the secret, from this
    machine's variables of those names, and this machine's endpoint for the cluster's; no
    other store variable of this machine, and none at all without --keep-uris."""
    from pipeline.kfp_local import plan as kfp_plan

    image = kfp_plan.read_dockerfile(REPO_ROOT / "Dockerfile")
    args = (s3_file[0], "kubeflow", tmp_path / "out", None, REPO_ROOT, image)
    kept = kfp_plan.make_plan(*args, keep_uris=True)
    secret = "mlpipeline-minio-artifact"
    assert kept.secret_variables == {
        "AWS_ACCESS_KEY_ID": (secret, "accesskey"),
        "AWS_SECRET_ACCESS_KEY": (secret, "secretkey"),
    }
    assert kept.endpoint == KFP_ENDPOINT and KFP_ENDPOINT not in json.dumps(kept.spec)
    here = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_SESSION_TOKEN": "t"}
    here["AWS_ENDPOINT_URL"] = "http://127.0.0.1:8333"
    assert kfp_plan.store_environment(kept, here) == {
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "s",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:8333",
    }
    with pytest.raises(kfp_plan.LocalRunError, match="key 'secretkey' of secret 'mlpipeline-"):
        kfp_plan.store_environment(kept, {k: v for k, v in here.items() if "SECRET" not in k})
    del here["AWS_SECRET_ACCESS_KEY"]
    with pytest.raises(kfp_plan.LocalRunError, match="^the file gives its steps AWS_SECRET_"):
        kfp_plan.store_environment(kept, here)
    with pytest.raises(kfp_plan.LocalRunError, match=f"reach the store at {KFP_ENDPOINT}; set"):
        kfp_plan.store_environment(kept, {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"})

    no_secret = tmp_path / "no-secret.yaml"
    _compile(no_secret, "s3://mlpipeline/root", "s3://mlpipeline/nightly", "--s3-secret", "")
    bare = kfp_plan.make_plan(no_secret, *args[1:], keep_uris=True)
    assert kfp_plan.store_environment(bare, {**here, "AWS_SECRET_ACCESS_KEY": "s"}) == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:8333"  # the keys stay here, as on the cluster
    }
    mapped = kfp_plan.make_plan(*args[:3], tmp_path / "c.tar.gz", *args[4:])
    assert kfp_plan.store_environment(mapped, here) == {}
    assert KFP_ENDPOINT not in json.dumps(mapped.spec)


def test_a_step_on_the_store_gets_remote_artifact_uris_and_a_local_output_file(tmp_path):
    from pipeline.kfp_local.plan import Image
    from pipeline.kfp_local.steps import HostSteps

    local = str(tmp_path / "root")
    steps = HostSteps("python", Image("/", {}), tmp_path, tmp_path, {}, 1, print)
    steps.local_root, steps.remote_root = local, "s3://b/root"
    given = {
        "inputs": {"artifacts": {"x": {"artifacts": [{"uri": f"{local}/run/A/x"}]}}},
        "outputs": {
            "artifacts": {"y": {"artifacts": [{"uri": f"{local}/run/B/y"}]}},
            "outputFile": f"{local}/run/B/executor_output.json",
        },
    }
    command = ["python", "-m", "m", "--json_serialized_invocation_args", json.dumps(given), "-x"]
    moved = steps._on_store(command)
    invocation = json.loads(moved[4])
    assert invocation["inputs"]["artifacts"]["x"]["artifacts"][0]["uri"] == "s3://b/root/run/A/x"
    assert invocation["outputs"]["artifacts"]["y"]["artifacts"][0]["uri"] == "s3://b/root/run/B/y"
    assert invocation["outputs"]["outputFile"] == given["outputs"]["outputFile"]
    assert moved[:4] == command[:4] and moved[5:] == ["-x"]


_STORE_FAULTS = """
import json, os, sys
from components.storage import object_store as store
base = "s3://mlpipeline/faults"
g = store.gfile(base)
for name in ("a/f", "a/f.bak", "d/x/one", "d/xy/two"):
    with g.GFile(f"{base}/{name}", "w") as handle:
        handle.write(name)
store.move_file(f"{base}/a/f", f"{base}/b/f")
store.remove_tree(f"{base}/d/x")
store.write_bytes(f"{base}/marker/_SUCCESS", b"")
g.makedirs(f"{base}/made")
print(json.dumps({
    "a": g.listdir(f"{base}/a"), "b": g.listdir(f"{base}/b"), "d": g.listdir(f"{base}/d"),
    "marker": g.exists(f"{base}/marker/_SUCCESS"), "made": g.exists(f"{base}/made"),
}))
sys.stdout.flush()
os._exit(0)
"""


@pytest.mark.s3_store
def test_the_store_faults_are_worked_around(seaweedfs):
    env = {**os.environ, **seaweedfs.env()}
    done = subprocess.run(
        [sys.executable, "-c", _STORE_FAULTS], cwd=REPO_ROOT, capture_output=True, env=env
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    seen = json.loads(done.stdout.decode().splitlines()[-1])
    assert seen["a"] == ["f.bak"] and seen["b"] == ["f"]  # one object moved, not a prefix
    assert seen["d"] == ["xy/"] or seen["d"] == ["xy"]  # no empty `x` left behind
    assert seen["marker"]  # an empty marker file exists
    assert not seen["made"]  # makedirs leaves nothing: nothing here relies on it


@pytest.mark.s3_store
def test_a_failing_step_on_the_store_exits_1_not_134(seaweedfs, tmp_path):
    # The step touches s3:// (TFX's entrypoint reads its output file's folder) and then
    # fails: without the wrapper's os._exit, tensorflow-io aborts the teardown (134).
    given = {"outputs": {"outputFile": "s3://mlpipeline/steps/x/executor_output.json"}}
    command = [sys.executable, "-m", "components.storage.s3_entrypoint"]
    command += ["--executor_class_path", "no_such_module.Executor"]
    command += ["--json_serialized_invocation_args", json.dumps(given)]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", **seaweedfs.env()}
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, env=env)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "no_such_module" in done.stderr and "pure virtual method" not in done.stderr


_UNEXPECTED_ERROR = """
from components.storage import object_store
from pipeline import cli
from pipeline.common import kfp_platform

object_store.gfile("s3://mlpipeline/x").exists("s3://mlpipeline/x")  # s3:// touched

def broken(argv=None):
    raise RuntimeError("an unexpected error")

cli.main = broken
cli.entry()
"""


@pytest.mark.s3_store
def test_the_cli_ends_an_unexpected_error_with_1_after_touching_s3(seaweedfs):
    # Once tensorflow-io has been used, an exception left to the interpreter would end in
    # its aborted teardown (134); the CLI prints the traceback and exits 1 instead.
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", **seaweedfs.env()}
    done = subprocess.run(
        [sys.executable, "-c", _UNEXPECTED_ERROR], cwd=REPO_ROOT, capture_output=True, env=env
    )
    stderr = done.stderr.decode()
    assert done.returncode == 1, stderr[-3000:]
    assert "RuntimeError: an unexpected error" in stderr and "pure virtual" not in stderr


def _served(server: seaweed.Server) -> list[str]:
    """The names a listing of the serving folder shows: SeaweedFS lists an emptied folder
    (a removed staging folder) as a common prefix, which TF Serving would see too."""
    prefix = "root/serving/cifar10/"
    listed = server.client().list_objects_v2(Bucket=server.bucket, Prefix=prefix, Delimiter="/")
    names = [entry["Prefix"].rstrip("/") for entry in listed.get("CommonPrefixes", [])]
    names += [item["Key"] for item in listed.get("Contents", [])]
    # Beside the versions by design: the nights' records (docs/operations.md) and the push
    # lease, released but kept (components/atomic_pusher/lease.py); anything else (a staging
    # folder) is listed.
    kept = (f"{prefix}.nights", f"{prefix}.push.lock")
    return sorted(name[len(prefix) :] for name in names if name not in kept)


@pytest.mark.s3_store
@pytest.mark.integration
def test_the_kubeflow_file_runs_three_nights_on_the_store(seaweedfs, tiny_archive, tmp_path):
    """Compiled for an s3:// pipeline root, data and serving folder; run by kfp.local with
    the URIs kept: every step reads and writes SeaweedFS, the model is pushed there, served
    from there, a second night on a new span warm-starts from it and pushes a second
    version, and a third night finds nothing new."""
    import cifar_fixtures as fx

    seaweedfs.upload(tiny_archive, "nightly/span-1/cifar.tar.gz")
    # No --beam-arg: the keys reach every step (Beam's S3 filesystem too) only as the file's
    # platform spec takes them from the cluster's secret (local-kfp: from this machine's
    # variables of those names; the server refuses a request without them), the endpoint as
    # the file's in-cluster one, which this machine's stands in for. No key in the file.
    path = tmp_path / "cifar10.yaml"
    _compile(path, "s3://mlpipeline/root", "s3://mlpipeline/nightly", "--warm-start")
    text = path.read_text()
    assert "127.0.0.1" not in text and seaweed.SECRET_KEY not in text
    assert KFP_ENDPOINT in text and "mlpipeline-minio-artifact" in text
    out = tmp_path / "kfp"
    night = _cli(seaweedfs, "local-kfp", path, "--keep-uris", "--output-dir", out, timeout=1500)
    assert night.returncode == 0, night.stderr[-4000:] + night.stdout[-2000:]
    first = [name for name in _served(seaweedfs) if name.isdigit()]
    assert _served(seaweedfs) == first and len(first) == 1  # no staging folder
    assert f"pushed         s3://mlpipeline/root/serving/cifar10/{first[0]}" in night.stdout
    assert not list(out.rglob("saved_model.pb"))  # nothing of the model went to local disk

    image = tmp_path / "x.png"
    image.write_bytes(_png())
    model_dir = "s3://mlpipeline/root/serving/cifar10"
    served = _cli(seaweedfs, "predict", "--model-dir", model_dir, image, "--json", timeout=300)
    assert served.returncode == 0, served.stderr[-3000:]
    assert f"Model: {model_dir}/{first[0]}" in served.stderr

    # new images (other seeds): re-sent old ones stop the gate as old data sent as new
    span_2 = fx.binary_archive(tmp_path / "span2.tar.gz", batches=2, per_class=50, seed=5)
    seaweedfs.upload(span_2, "nightly/span-2/cifar.tar.gz")
    second = _cli(seaweedfs, "local-kfp", path, "--keep-uris", "--output-dir", out, timeout=1500)
    assert second.returncode == 0, second.stderr[-4000:] + second.stdout[-2000:]
    versions_now = _served(seaweedfs)
    assert len(versions_now) == 2 and versions_now[0] == first[0], versions_now
    spans = seaweedfs.client().get_object(
        Bucket=seaweedfs.bucket, Key=f"root/serving/cifar10/{versions_now[1]}/training_spans.json"
    )
    # Warm-started from the first version, read from the store: its spans carried over.
    assert json.loads(spans["Body"].read())["spans"] == [1, 2]
    [trainer_log] = sorted((out / "logs").glob("*/Trainer.log"))[-1:]
    assert f"Warm start from {model_dir}/{first[0]}" in trainer_log.read_text()

    third = _cli(seaweedfs, "local-kfp", path, "--keep-uris", "--output-dir", out, timeout=1500)
    assert third.returncode == 0, third.stderr[-4000:] + third.stdout[-2000:]
    served_now = f"served version {versions_now[1]} was trained on spans [1, 2]"
    assert f"outcome        no_new_span: no new span: {served_now}" in third.stdout
    assert _served(seaweedfs) == versions_now
    _operations_on_the_bucket_root(seaweedfs, "s3://mlpipeline/root", versions_now)


def _operations_on_the_bucket_root(store, root: str, versions: list[str]) -> None:
    """`status` and `rollback` take the pipeline root as --output-dir, as on a local run
    folder; `gc` refuses it in one line."""

    def status() -> dict:
        done = _cli(store, "status", "--output-dir", root, "--json", timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout)

    assert status()["served"] == versions[-1]
    back = _cli(store, "rollback", "--output-dir", root, "--reason", "test", timeout=300)
    assert back.returncode == 0, back.stderr[-3000:]
    after = status()
    assert (after["served"], after["rolled_back"]) == (versions[-2], [versions[-1]])
    gc = _cli(store, "gc", "--output-dir", root, "--older-than", "0", timeout=300)
    assert gc.returncode == 2 and gc.stderr.count("\n") == 1, gc.stderr[-3000:]


def _png() -> bytes:
    import io

    import numpy as np
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()
