"""The serving folder, `<serving_model_dir>/<version>/`, read in one place: which versions are
complete, which one TF Serving serves (the newest complete one), what each version records
(the spans it was trained on, ancestors' included), and the served state a run reads once
(`ServedState`, what the pipeline's first step hands every later step).

Plain functions over paths, local or remote (gs://, s3://, through tf.io.gfile, imported only
for remote paths): the CLI reads the served state before TFX loads, the pipeline's first step
on every runner, the Pusher when it checks that the served version is still the one the run
judged against. Nothing else lists the serving folder.
"""

from __future__ import annotations

import dataclasses
import json

from components.contract import (
    ENDPOINT_FILE,
    SAVED_MODEL_FILE,
    SERVED_IMAGES_FILE,
    SERVED_SPANS_FILE,
    SERVED_STATE_FILE,
    SERVED_STATISTICS_FILE,
)
from components.storage.paths import exists, join, listdir, read_json, read_text


def is_complete(serving_model_dir: str, version: str) -> bool:
    """A version is complete once its saved_model.pb exists: every push writes it last, and
    TF Serving loads nothing before it."""
    return version.isdigit() and exists(join(serving_model_dir, version, SAVED_MODEL_FILE))


def complete_versions(serving_model_dir: str) -> list[str]:
    """The complete versions, oldest (lowest number) first."""
    if not serving_model_dir:
        return []
    names = [n for n in listdir(serving_model_dir) if n.isdigit()]
    return sorted((n for n in names if is_complete(serving_model_dir, n)), key=int)


def newest_complete_version(serving_model_dir: str) -> str | None:
    """The version TF Serving serves: the highest-numbered complete one, or None. The one
    answer every reader uses (the served state, the Pusher, predict, status, a rollback)."""
    versions = complete_versions(serving_model_dir)
    return versions[-1] if versions else None


def version_spans(serving_model_dir: str, version: str) -> dict[int, str]:
    """{span: fingerprint} a version was trained on, its starting model's spans included
    (the Pusher records both); {} for a version that records none."""
    return read_spans_record(join(serving_model_dir, version, SERVED_SPANS_FILE))


def version_endpoint(serving_model_dir: str, version: str) -> dict | None:
    """The Vertex AI deployment a version records (ENDPOINT_FILE: endpoint, model,
    deployed_model_id), or None for a version that was not deployed to an endpoint."""
    path = join(serving_model_dir, version, ENDPOINT_FILE)
    return read_json(path) if exists(path) else None


def read_spans_record(record: str) -> dict[int, str]:
    """{span: fingerprint} of a spans record (SERVED_SPANS_FILE, beside a version or in the
    ExampleGen's output); {} where there is none."""
    if not exists(record):
        return {}
    return {int(k): v for k, v in read_json(record)["fingerprints"].items()}


# Versions taken out of service (`cifar10-pipeline rollback`) are kept aside here, each
# folder with a record beside it (`<version>.json`: who, when, why, its spans): TF Serving
# reads only numbered folders, and no later night serves, warm-starts from, compares with
# or retrains the spans of a version kept here unattended.
ROLLED_BACK_DIR = ".rolled-back"


def rolled_back(serving_model_dir: str) -> dict[str, dict]:
    """{version: its rollback record} of the versions kept aside, oldest first."""
    folder = join(serving_model_dir, ROLLED_BACK_DIR) if serving_model_dir else ""
    versions = sorted(
        (n[:-5] for n in listdir(folder) if n.endswith(".json") and n[:-5].isdigit()), key=int
    )
    return {v: read_json(join(folder, f"{v}.json")) for v in versions}


class ServedVersionChanged(RuntimeError):
    """The serving folder serves another version than the one the run judged against."""

    def __init__(self, read: str | None, now: str | None):
        self.read, self.now = read, now
        read, now = read or "nothing", now or "nothing"
        super().__init__(
            f"served version changed during this run: it read {read}, the serving folder now"
            f" serves {now}; nothing pushed (rerun to judge against {now})"
        )


class PushLeaseLost(ServedVersionChanged):
    """This push's lease on the serving folder was taken over by another push (it stalled
    past the lease's life): it commits nothing. A ServedVersionChanged, so a run ends the
    same way (`run`: exit status 6, outcome `served_changed`): rerun."""

    def __init__(self, message: str):
        self.read = self.now = None
        RuntimeError.__init__(self, message)


@dataclasses.dataclass(frozen=True)
class ServedState:
    """What is served when a run starts, read once: the newest complete version (None when
    nothing is), the spans it was trained on with fingerprints (ancestors' included), and
    every span any complete version recorded (number -> (fingerprint, version)), against
    which a changed span is refused."""

    serving_model_dir: str = ""
    version: str | None = None
    spans: dict[int, str] = dataclasses.field(default_factory=dict)
    published: dict[int, tuple[str, str]] = dataclasses.field(default_factory=dict)
    # {version: rollback record} of the versions taken out of service (ROLLED_BACK_DIR).
    rolled_back: dict[str, dict] = dataclasses.field(default_factory=dict)

    def rollback_of(self, number: int, fingerprint: str) -> tuple[str, dict] | None:
        """(version, record) of a rolled-back version trained on this span's content, the
        latest such; None when no rolled-back version was."""
        found = [
            (version, record)
            for version, record in self.rolled_back.items()
            if record.get("spans", {}).get(str(number)) == fingerprint
        ]
        return max(found, key=lambda item: int(item[0])) if found else None

    @property
    def version_dir(self) -> str:
        return join(self.serving_model_dir, self.version) if self.version else ""

    def to_json(self) -> str:
        return json.dumps(
            {
                "serving_model_dir": self.serving_model_dir,
                "version": self.version,
                "spans": {str(k): v for k, v in sorted(self.spans.items())},
                "published": {str(k): list(v) for k, v in sorted(self.published.items())},
                "rolled_back": self.rolled_back,
            },
            indent=1,
        )

    def read_key(self) -> str:
        """A short key of this state: equal states, equal keys (the local runner's cache key
        for the ServedState step)."""
        import hashlib

        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    @classmethod
    def from_json(cls, text: str) -> ServedState:
        data = json.loads(text)
        return cls(
            serving_model_dir=data["serving_model_dir"],
            version=data["version"],
            spans={int(k): v for k, v in data["spans"].items()},
            published={int(k): (v[0], v[1]) for k, v in data["published"].items()},
            rolled_back=data.get("rolled_back", {}),
        )


def read_served_state(serving_model_dir: str) -> ServedState:
    """The serving folder's state now: one listing, one record read per complete version."""
    versions = complete_versions(serving_model_dir)
    published: dict[int, tuple[str, str]] = {}
    records = {version: version_spans(serving_model_dir, version) for version in versions}
    for version in versions:  # oldest first: the first version to publish a span names it
        for number, fingerprint in records[version].items():
            published.setdefault(number, (fingerprint, version))
    newest = newest_complete_version(serving_model_dir) if versions else None
    return ServedState(
        serving_model_dir=serving_model_dir,
        version=newest,
        spans=records[newest] if newest else {},
        published=published,
        rolled_back=rolled_back(serving_model_dir),
    )


def load_served_state(artifact_uri: str) -> ServedState:
    """The served state the ServedState step wrote into its output artifact (`artifact_uri`);
    an empty state when the artifact holds none (no input wired, nothing read)."""
    path = join(artifact_uri, SERVED_STATE_FILE) if artifact_uri else ""
    return ServedState.from_json(read_text(path)) if path and exists(path) else ServedState()


def served_statistics_file(artifact_uri: str) -> str | None:
    """The served version's training statistics as the ServedState step copied them into its
    output artifact, or None when that version keeps none (or nothing is served)."""
    path = join(artifact_uri, SERVED_STATISTICS_FILE) if artifact_uri else ""
    return path if path and exists(path) else None


def served_images_file(artifact_uri: str) -> str | None:
    """The served version's training-image index (SERVED_IMAGES_FILE) as the ServedState step
    copied it into its output artifact, or None when that version has none (pushed before
    indexes existed, or warm-started from one that had none) or nothing is served."""
    path = join(artifact_uri, SERVED_IMAGES_FILE) if artifact_uri else ""
    return path if path and exists(path) else None
