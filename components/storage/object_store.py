"""`s3://` paths (Kubeflow Pipelines' artifact store: SeaweedFS since KFP 2.15, MinIO before)
for `tf.io.gfile`, switched on only when a path asks for it.

TensorFlow itself has no `s3://`: tensorflow-io registers it when imported, and it is built
per TensorFlow release (0.37.x for TF 2.16, the legacy stack; none for TF 2.21, so the
current stack refuses `s3://` with one line, `refusal()`). `gfile(path)` is what every module
that opens a remote path calls: for an `s3://` path it maps the environment a KFP cluster
gives a step onto the variables tensorflow-io reads, then imports tensorflow-io, once.

What a cluster provides, and what tensorflow-io reads:
- credentials: the `mlpipeline-minio-artifact` secret's accesskey/secretkey mounted as
  AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY; both read them as they are. Nothing here
  stores or prints a credential.
- endpoint: S3_ENDPOINT (tensorflow-io's name, e.g. http://minio-service.kubeflow:9000) or
  AWS_ENDPOINT_URL (the AWS SDKs' and boto3's name, which Beam's S3 filesystem reads too);
  each is set from the other when only one is given. An endpoint without a scheme gets
  http:// unless S3_USE_HTTPS=1 (TensorFlow's old S3 variable; tensorflow-io reads none).
- region: AWS_REGION, else AWS_DEFAULT_REGION, else us-east-1 (what MinIO and SeaweedFS
  answer to by default).
- S3_DISABLE_MULTI_PART_DOWNLOAD=1 unless set: tensorflow-io 0.37.1's multi-part download
  returned other bytes from SeaweedFS 4.48 (3 MB and 20 MB files differed from their first
  MiB on); single ranged GETs read them back exactly (tests/test_object_store.py).

`check_bucket(uri)` asks the server through botocore (short timeouts, no retries): a wrong
endpoint, refused credentials, a missing bucket or nothing at the URI become one line
(ObjectStoreError, a ValueError), where tensorflow-io answers "does not exist" (after a
minute of retries for an endpoint that does not answer). The rest: writing a folder
locally and copying it up, moving one object, removing a folder with its entry, and empty
files, for what tensorflow-io's s3:// gets wrong (docs/kubeflow.md has the list).
Importing this module imports nothing but the standard library.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator, Mapping
from types import ModuleType

S3 = "s3://"
DEFAULT_REGION = "us-east-1"
_enabled = threading.Lock()
_imported: list[ModuleType] = []


class ObjectStoreError(ValueError):
    """An `s3://` path cannot be used here (this stack, the endpoint, the credentials or the
    bucket); the message is one line that says what to do."""


def active() -> bool:
    """Whether this process imported tensorflow-io: such a process aborts at interpreter
    exit (exit status 134, tensorflow/io#2039), so its entry points end with os._exit."""
    return bool(_imported)


def is_s3(path: object) -> bool:
    return isinstance(path, str) and path.startswith(S3)


def refusal(stack_name: str, what: str = "an s3:// path") -> str:
    """Why `stack_name` cannot use `s3://` ('' when it can)."""
    if stack_name != "current":
        return ""
    return (
        f"{what} needs tensorflow-io, which has no build for TensorFlow 2.21 (the current "
        "stack): use the legacy stack (requirements.lock, Dockerfile) or a gs:// store (a "
        "bucket mounted as a folder cannot hold the serving folder: pushes there are refused)"
    )


def _running_stack_name() -> str:
    from components.runtime import stack

    return stack.running_stack().name


def refuse_on_this_stack(*paths: object, what: str = "") -> None:
    """ObjectStoreError when any of `paths` is `s3://` and this stack cannot open it."""
    for path in paths:
        if is_s3(path):
            problem = refusal(_running_stack_name(), what or str(path))
            if problem:
                raise ObjectStoreError(problem)


def endpoint(environ: Mapping[str, str] | None = None) -> str:
    """The S3 endpoint URL with its scheme ('' when none is set: AWS itself)."""
    env = os.environ if environ is None else environ
    value = env.get("S3_ENDPOINT") or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if not value or "://" in value:
        return value or ""
    secure = env.get("S3_USE_HTTPS", "1" if value.endswith(":443") else "0") not in ("0", "")
    return f"{'https' if secure else 'http'}://{value}"


def tensorflow_io_settings(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables tensorflow-io (and botocore) read that `environ` lacks, derived from
    what it has."""
    env = os.environ if environ is None else environ
    wanted = {"S3_DISABLE_MULTI_PART_DOWNLOAD": "1"}
    url = endpoint(env)
    if url:
        wanted["S3_ENDPOINT"] = url
        # botocore's name: Beam's S3 filesystem (boto3) in the same step then finds the
        # server without --s3_endpoint_url in the compiled file.
        wanted["AWS_ENDPOINT_URL"] = env.get("AWS_ENDPOINT_URL") or url
        if url.startswith("http://"):
            wanted["S3_VERIFY_SSL"] = "0"
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION
    wanted["AWS_REGION"] = region
    keep = ("S3_DISABLE_MULTI_PART_DOWNLOAD", "S3_VERIFY_SSL", "AWS_REGION")
    return {
        name: value
        for name, value in wanted.items()
        if not (name in keep and env.get(name)) and env.get(name) != value
    }


def enable(path: object) -> None:
    """Make `path` openable by tf.io.gfile: nothing unless it is `s3://`; then the
    environment mapped and tensorflow-io imported, once per process."""
    if not is_s3(path) or _imported:
        return
    refuse_on_this_stack(path)
    with _enabled:
        if _imported:
            return
        os.environ.update(tensorflow_io_settings())
        try:
            import tensorflow_io
        except ImportError as err:
            raise ObjectStoreError(
                f"{path}: s3:// needs tensorflow-io (requirements.lock pins 0.37.1), "
                f"which this environment lacks ({err}); run `make setup`"
            ) from None
        _imported.append(tensorflow_io)


def gfile(path: object = "") -> ModuleType:
    """tf.io.gfile, with `s3://` registered first when `path` is one."""
    enable(path)
    import tensorflow as tf

    return tf.io.gfile


def split(uri: str) -> tuple[str, str]:
    """(bucket, key) of an `s3://bucket/key` URI."""
    bucket, _, key = uri[len(S3) :].partition("/")
    return bucket, key


def _anything_at(client, bucket: str, key: str) -> bool:
    """An object named `key`, or any under the folder `key/` (S3 has no folders)."""
    import botocore.exceptions

    folder = key.rstrip("/") + "/"
    if client.list_objects_v2(Bucket=bucket, Prefix=folder, MaxKeys=1).get("KeyCount"):
        return True
    try:
        client.head_object(Bucket=bucket, Key=key)
    except botocore.exceptions.ClientError as err:
        if str(err.response.get("Error", {}).get("Code", "")) in ("404", "NoSuchKey", "NotFound"):
            return False
        raise
    return True


def check_bucket(uri: str, timeout_s: float = 10.0) -> None:
    """Two requests to the server (botocore, short timeouts, no retries): ObjectStoreError
    naming the endpoint and bucket when it cannot be reached, refuses the credentials, has no
    such bucket, or nothing at or under `uri`. Nothing for other paths."""
    if not is_s3(uri):
        return
    refuse_on_this_stack(uri)
    bucket, key = split(uri)
    where = f"{uri}: endpoint {endpoint() or 'AWS S3'}"
    if not bucket:
        raise ObjectStoreError(f"{uri}: no bucket named (s3://BUCKET/PATH)")
    try:
        import botocore.config
        import botocore.exceptions
        import botocore.session
    except ImportError:  # tensorflow-io will answer, less clearly
        return
    config = botocore.config.Config(
        connect_timeout=timeout_s, read_timeout=timeout_s, retries={"total_max_attempts": 1}
    )
    session = botocore.session.get_session()
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    client = session.create_client(
        "s3", endpoint_url=endpoint() or None, region_name=region or DEFAULT_REGION, config=config
    )
    try:
        client.head_bucket(Bucket=bucket)
        if key and not _anything_at(client, bucket, key):
            raise ObjectStoreError(f"{uri}: no such file or folder")
    except botocore.exceptions.NoCredentialsError:
        raise ObjectStoreError(
            f"{where}: no credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
        ) from None
    except botocore.exceptions.ClientError as err:
        code = str(err.response.get("Error", {}).get("Code", ""))
        if code in ("404", "NoSuchBucket", "NotFound"):
            raise ObjectStoreError(f"{where}: no bucket named {bucket!r}") from None
        if code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
            raise ObjectStoreError(
                f"{where}: the server refused the credentials for bucket {bucket!r} ({code}; "
                "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
            ) from None
        raise ObjectStoreError(f"{where}: {code or err}") from None
    except botocore.exceptions.BotoCoreError as err:
        raise ObjectStoreError(
            f"{where}: cannot reach the server ({err}); check S3_ENDPOINT or AWS_ENDPOINT_URL"
        ) from None


def upload_tree(
    local_dir: str, remote_dir: str, last: str = "", leave_out: tuple[str, ...] = ()
) -> list[str]:
    """Copies the files under `local_dir` to `remote_dir` one by one (an object store has no
    folders to make and no rename), the file named `last` after all others, none named in
    `leave_out`; the remote paths written. An empty file is written too (write_bytes)."""
    files = sorted(
        os.path.relpath(os.path.join(folder, name), local_dir)
        for folder, _, names in os.walk(local_dir)
        for name in names
        if name not in leave_out
    )
    files.sort(key=lambda rel: os.path.basename(rel) == last)
    written = []
    for rel in files:
        target = remote_dir.rstrip("/") + "/" + rel.replace(os.sep, "/")
        write_bytes(target, open(os.path.join(local_dir, rel), "rb").read())
        written.append(target)
    return written


def write_bytes(path: str, data: bytes) -> None:
    """`data` to an s3:// object (gs:// and local paths through tf.io.gfile too). tensorflow-io
    writes no object for an empty file (a marker would be missing), so that one goes through
    botocore, whose empty object SeaweedFS keeps and tf.io.gfile then lists."""
    if not data and is_s3(path):
        _client().put_object(Bucket=split(path)[0], Key=split(path)[1], Body=b"")
        return
    with gfile(path).GFile(path, "wb") as handle:
        handle.write(data)


@contextlib.contextmanager
def written_locally(
    destination: str, last: str = "", leave_out: tuple[str, ...] = ()
) -> Iterator[str]:
    """Where to write a folder bound for `destination`: for s3:// a local temporary folder
    copied up file by file on a clean exit (`upload_tree`), since writers that read back what
    they wrote (tf.saved_model.save's fingerprint) crash on tensorflow-io's s3:// (a
    segmentation fault against SeaweedFS); any other destination as it is."""
    if not is_s3(destination):
        yield destination
        return
    local = tempfile.mkdtemp(prefix="s3-upload-")
    try:
        yield local
        upload_tree(local, destination, last=last, leave_out=leave_out)
    finally:
        shutil.rmtree(local, ignore_errors=True)


def move_file(source: str, target: str) -> None:
    """One s3:// object moved: copied on the server, then the source deleted. tf.io.gfile's
    rename on s3:// copies and deletes every object whose key starts with the source's
    (renaming `f` also takes `f.bak`, a folder `a` also `ab/`)."""
    source_bucket, source_key = split(source)
    target_bucket, target_key = split(target)
    client = _client()
    copied = {"Bucket": source_bucket, "Key": source_key}
    client.copy_object(Bucket=target_bucket, Key=target_key, CopySource=copied)
    client.delete_object(Bucket=source_bucket, Key=source_key)


def remove_tree(path: str) -> None:
    """An s3:// folder and everything under it, and the folder's own entry: SeaweedFS keeps a
    folder whose objects were deleted as an empty directory that listings still name (a
    `.staging-*` or version folder left behind by every push)."""
    g = gfile(path)
    try:
        g.rmtree(path)
    except Exception as err:  # tf.errors.NotFoundError: no object under it (only the entry)
        if type(err).__name__ != "NotFoundError":
            raise
    bucket, key = split(path)
    if key.strip("/"):
        _client().delete_object(Bucket=bucket, Key=key.rstrip("/") + "/")


def _client():
    import botocore.session

    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    return botocore.session.get_session().create_client(
        "s3", endpoint_url=endpoint() or None, region_name=region or DEFAULT_REGION
    )
