"""A compiled pipeline file read and planned for kfp.local: the image's WORKDIR and ENV from the
Dockerfile, cloud URIs mapped to local folders, and the steps that need Google APIs set aside."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.common import compiled_target, kfp_platform
from pipeline.common.submission import has_dag

# A cloud URI inside any string of the spec, also inside JSON-encoded constants.
CLOUD_URI = re.compile(r"\b(?:gs|s3)://[^\s\"'\\,;]+")
# Cifar10ExampleGen's input naming the data (components/cifar10_example_gen/spec.py).
DATA_PARAMETER = "source_uri"
# The stores whose URIs --keep-uris leaves in place: the steps read and write them.
STORES = ("s3://", "gs://")
# The exit handler's webhook URL (components.night_report.message.NOTIFY_VARIABLE, named here:
# this environment has no TFX).
NOTIFY_VARIABLE = "CIFAR10_NOTIFY_URL"


class LocalRunError(ValueError):
    """The file cannot run here; the message is one line that says why."""


@dataclass(frozen=True)
class Image:
    """What the pipeline image gives every step: its working directory and ENV."""

    workdir: str
    env: dict[str, str]


def _instructions(text: str) -> Iterator[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined."""
    logical = ""
    for line in text.splitlines():
        if line.lstrip().startswith("#") or not (line.strip() or logical):
            continue
        if line.rstrip().endswith("\\"):
            logical += line.rstrip()[:-1] + " "
            continue
        keyword, _, rest = (logical + line).strip().partition(" ")
        logical = ""
        yield keyword.upper(), rest.strip()


def read_dockerfile(path: Path) -> Image:
    """WORKDIR and ENV of the default (last) stage, through the stages it is built FROM,
    so the steps get what the image sets, not a copy of it kept here."""
    stages: dict[str, dict] = {}
    current: dict = {"workdir": "/", "env": {}}
    for keyword, rest in _instructions(Path(path).read_text()):
        if keyword == "FROM":
            words = rest.split()
            base = stages.get(words[0], {"workdir": "/", "env": {}})
            current = {"workdir": base["workdir"], "env": dict(base["env"])}
            if len(words) == 3 and words[1].upper() == "AS":
                stages[words[2]] = current
        elif keyword == "WORKDIR":
            current["workdir"] = str(Path(current["workdir"], rest))
        elif keyword == "ENV":
            words = shlex.split(rest)
            if words and "=" not in words[0]:  # the old form: ENV KEY VALUE...
                current["env"][words[0]] = " ".join(words[1:])
            else:
                current["env"].update(word.partition("=")[::2] for word in words)
    return Image(current["workdir"], dict(current["env"]))


def _map_strings(value: Any, replace: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return replace(value)
    if isinstance(value, dict):
        return {key: _map_strings(item, replace) for key, item in value.items()}
    if isinstance(value, list):
        return [_map_strings(item, replace) for item in value]
    return value


def _prefix_pattern(prefix: str) -> re.Pattern:
    """`prefix` as a whole path: gs://b/root matches gs://b/root/x, not gs://b/root2."""
    return re.compile(r"(?<![\w./-])" + re.escape(prefix.rstrip("/")) + r"(?=/|$|[^\w.-])")


def _downstream(spec: dict, roots: set[str]) -> set[str]:
    """`roots` and every task that depends on one of them."""
    tasks = compiled_target.pipeline_tasks(spec)
    found = set(roots)
    while True:
        more = {
            name
            for name, task in tasks.items()
            if name not in found and found & set(task.get("dependentTasks", []))
        }
        if not more:
            return found
        found |= more


@dataclass
class Plan:
    """The spec as it will run here, and the steps left out, each with the reason."""

    spec: dict[str, Any]
    steps: list[str]
    not_run: dict[str, str] = field(default_factory=dict)
    # With --keep-uris: the s3:// or gs:// pipeline root the steps' artifacts go to ('' otherwise).
    remote_root: str = ""
    # With --keep-uris: what the cluster would set in a step's environment from secrets
    # ({env var: (secret, key)}, from the file's platform spec), and the store endpoint the
    # file names ('' none), which this machine's own endpoint stands in for.
    secret_variables: dict[str, tuple[str, str]] = field(default_factory=dict)
    endpoint: str = ""


# What stands in, on this machine, for the endpoint the file gives its steps.
LOCAL_ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL", "S3_ENDPOINT")
# For a gs:// root, what stands in for a pod's Google identity (Workload Identity or Vertex's
# service account, given by the metadata server, no variable): this machine's credentials
# file and project, the CA bundle its HTTPS clients trust (TensorFlow's gs:// reads
# CURL_CA_BUNDLE) and the endpoint google-cloud-storage (Beam, the push lease) reads;
# GOOGLE_AUTH_TOKEN_FOR_TESTING is TensorFlow's fixed bearer token (the emulator tests).
GOOGLE_VARIABLES = (
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_CLOUD_PROJECT",
    "GOOGLE_AUTH_TOKEN_FOR_TESTING",
    "STORAGE_EMULATOR_HOST",
    "CURL_CA_BUNDLE",
    "REQUESTS_CA_BUNDLE",
    "SSL_CERT_FILE",
)


def store_environment(plan: Plan, environ: dict[str, str]) -> dict[str, str]:
    """The variables the cluster would set from secrets (a --keep-uris step's store keys, the exit
    handler's webhook URL): each variable the
    file takes from a secret, from this machine's variable of that name, and this machine's
    endpoint for the file's; for a gs:// root, this machine's GOOGLE_VARIABLES. Raises
    LocalRunError naming the first one missing."""
    found = {}
    if plan.remote_root.startswith("gs://"):
        found.update((name, environ[name]) for name in GOOGLE_VARIABLES if name in environ)
    for variable, (secret, key) in sorted(plan.secret_variables.items()):
        if variable not in environ:
            raise LocalRunError(
                f"the file gives its steps {variable} from key '{key}' of secret '{secret}'; "
                f"set {variable} here to the value that secret holds for this store"
            )
        found[variable] = environ[variable]
    if plan.endpoint:
        local = [name for name in LOCAL_ENDPOINT_VARIABLES if name in environ]
        if not local:
            raise LocalRunError(
                f"the file's steps reach the store at {plan.endpoint}; set AWS_ENDPOINT_URL "
                "to the endpoint of that store as this machine reaches it"
            )
        found.update((name, environ[name]) for name in local)
        for name in ("S3_USE_HTTPS", "S3_VERIFY_SSL", "AWS_REGION", "AWS_DEFAULT_REGION"):
            if name in environ:
                found[name] = environ[name]
    return found


def _without_endpoint(spec: dict) -> str:
    """Takes the store endpoint out of every container's env; returns it ('' if none)."""
    endpoint = ""
    for executor in spec.get("deploymentSpec", {}).get("executors", {}).values():
        env = executor.get("container", {}).get("env", [])
        for entry in [e for e in env if e.get("name") == kfp_platform.ENDPOINT_VARIABLE]:
            endpoint = entry.get("value", "")
            env.remove(entry)
    return endpoint


def _secret_variables(
    spec: dict, platform: dict, tasks: list[str] | None = None
) -> dict[str, tuple[str, str]]:
    """Every variable the platform spec sets from a secret in any executor (of `tasks`'
    executors only, when given: the exit handler's webhook URL without --keep-uris)."""
    found = {}
    labels = spec.get("deploymentSpec", {}).get("executors", {})
    if tasks is not None:
        components = spec.get("components", {})
        chosen = [
            compiled_target.pipeline_tasks(spec)[name]["componentRef"]["name"] for name in tasks
        ]
        labels = [components[name]["executorLabel"] for name in chosen]
    for label in labels:
        found.update(kfp_platform.secret_variables(platform, label))
    return found


def _leave_out(spec: dict, names: set[str]) -> None:
    """Removes the named steps from whichever DAG holds them."""
    dags = [spec["root"]["dag"]]
    if compiled_target.TFX_DAG in spec.get("components", {}):
        dags.append(spec["components"][compiled_target.TFX_DAG]["dag"])
    for dag in dags:
        for name in names & set(dag["tasks"]):
            del dag["tasks"][name]


def _check_form(path: Path, spec: Any) -> None:
    if not has_dag(spec):
        raise LocalRunError(
            f"{path}: not a compiled pipeline (no root DAG); write one with "
            "`cifar10-pipeline compile --output FILE.yaml`"
        )
    for name, task in compiled_target.pipeline_tasks(spec).items():
        for parameter in task.get("inputs", {}).get("parameters", {}).values():
            if "constantValue" in parameter.get("runtimeValue", {}):
                raise LocalRunError(
                    f"{path}: pipeline spec 2.0 ({name} has runtimeValue.constantValue), which "
                    "KFP's driver and kfp.local refuse; compile it again with this version"
                )


def _check_target(path: Path, target: str, spec: dict) -> None:
    mismatch = compiled_target.mismatch(path, target, spec)
    if mismatch and target == compiled_target.KUBEFLOW:  # a Vertex file runs in part
        raise LocalRunError(f"{mismatch} to run the steps that need no Google API")
    if mismatch:
        raise LocalRunError(mismatch)


def make_plan(
    path: Path,
    target: str,
    output_dir: Path,
    data: Path | None,
    project_dir: Path,
    image: Image,
    keep_uris: bool = False,
) -> Plan:
    """Checks the file, leaves out the steps that need Google APIs (and those after them),
    and maps the cloud URIs and the image's paths to local ones; with `keep_uris` the
    file's s3:// and gs:// URIs stay (the steps use that store: `remote_root`). Raises
    LocalRunError."""
    try:
        spec, platform = kfp_platform.read_pipeline_file(Path(path))
    except kfp_platform.PipelineFileError as err:
        raise LocalRunError(str(err)) from err
    _check_form(path, spec)
    endpoint = _without_endpoint(spec)  # a cluster's address: this machine's stands in
    _check_target(path, target, spec)
    google = compiled_target.google_steps(spec)
    tasks = compiled_target.pipeline_tasks(spec)
    left_out = _downstream(spec, set(google))
    not_run = {name: google[name] for name in sorted(google)}
    not_run.update(
        (name, "needs a step that cannot run here") for name in sorted(left_out - set(google))
    )
    _leave_out(spec, left_out)
    tasks = compiled_target.pipeline_tasks(spec)

    root = spec.get("defaultPipelineRoot", "")
    if keep_uris and not root.startswith(STORES):
        raise LocalRunError(
            f"{path}: --keep-uris needs an s3:// or gs:// pipeline root, not '{root}'"
        )
    mapping = {} if keep_uris else {root: str(output_dir)}
    for task in [] if keep_uris else tasks.values():
        parameter = task.get("inputs", {}).get("parameters", {}).get(DATA_PARAMETER, {})
        uri = parameter.get("runtimeValue", {}).get("constant")
        if uri and data is not None:
            mapping[uri] = str(data)
    patterns = [(_prefix_pattern(old), new) for old, new in mapping.items() if old]
    patterns.append((_prefix_pattern(image.workdir), str(project_dir)))

    def replace(text: str) -> str:
        for pattern, new in patterns:
            text = pattern.sub(lambda _, new=new: new, text)
        return text

    spec = _map_strings(spec, replace)
    for name, task in compiled_target.pipeline_tasks(spec).items():
        text = json.dumps([task, compiled_target.executor(spec, name)])
        unmapped = next(
            (m for m in CLOUD_URI.finditer(text) if not (keep_uris and m[0].startswith(STORES))),
            None,
        )
        if unmapped:
            raise LocalRunError(
                f"{path}: {name} reads {unmapped.group(0)}, which this run cannot map"
                f"{' (no --data given)' if data is None else ''}: it maps the pipeline root "
                "to --output-dir and the data to --data"
            )
    steps = sorted(compiled_target.pipeline_tasks(spec))
    handler = compiled_target.exit_task(spec)
    # Without --keep-uris the store is this machine's folder: of the handler's secrets only
    # the webhook URL is needed (the store's keys every container gets are not).
    notify = _secret_variables(spec, platform, [handler]) if handler else {}
    notify = {name: secret for name, secret in notify.items() if name == NOTIFY_VARIABLE}
    if not keep_uris:
        return Plan(spec=spec, steps=steps, not_run=not_run, secret_variables=notify)
    return Plan(
        spec=spec,
        steps=steps,
        not_run=not_run,
        remote_root=root,
        secret_variables=_secret_variables(spec, platform),
        endpoint=endpoint,
    )
