"""Tiny CIFAR-10 sources in every supported layout, generated per test.

Images of class c are noisy versions of a class-specific colour pattern, so a
small network learns them in a few steps and end-to-end runs can be gated.
"""

from __future__ import annotations

import io
import json
import pickle
import tarfile
from pathlib import Path

import numpy as np

from components.contract import LABEL_NAMES


def make_images(labels: np.ndarray, seed: int = 0) -> np.ndarray:
    """uint8 [N,32,32,3] images whose colours and stripes depend on the label."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 60, size=(len(labels), 32, 32, 3)).astype(np.int32)
    for i, label in enumerate(labels):
        images[i, :, :, label % 3] += 120 + 10 * label
        if label >= 5:
            images[i, ::4, :, :] += 80  # horizontal stripes tell classes 5..9 apart
    return np.clip(images, 0, 255).astype(np.uint8)


def balanced_labels(per_class: int, seed: int = 0) -> np.ndarray:
    labels = np.repeat(np.arange(10), per_class)
    np.random.default_rng(seed).shuffle(labels)
    return labels


def binary_records(images: np.ndarray, labels: np.ndarray) -> bytes:
    """Official binary layout: label byte, then red, green, blue planes."""
    planar = images.transpose(0, 3, 1, 2).reshape(len(labels), -1)
    return np.concatenate([labels.astype(np.uint8)[:, None], planar], axis=1).tobytes()


def binary_batch(labels: np.ndarray, seed: int = 0) -> bytes:
    return binary_records(make_images(labels, seed), labels)


def python_batch(labels: np.ndarray, seed: int = 0) -> bytes:
    images = make_images(labels, seed)
    planar = images.transpose(0, 3, 1, 2).reshape(len(labels), -1)
    return pickle.dumps({b"data": planar, b"labels": [int(x) for x in labels]}, protocol=2)


def write_tar(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, payload in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return path


def binary_archive(
    path: Path, batches: int = 2, per_class: int = 10, with_test: bool = False, seed: int = 0
) -> Path:
    """A binary release; another `seed` draws other images (new data, same distribution)."""
    members = {"cifar-10-batches-bin/batches.meta.txt": "\n".join(LABEL_NAMES).encode()}
    for b in range(1, batches + 1):
        members[f"cifar-10-batches-bin/data_batch_{b}.bin"] = binary_batch(
            balanced_labels(per_class, seed=b + seed), seed=b + 1000 * seed
        )
    if with_test:
        members["cifar-10-batches-bin/test_batch.bin"] = binary_batch(
            balanced_labels(per_class, seed=99), seed=99
        )
    return write_tar(path, members)


def extracted_release(folder: Path, batches: int = 2, per_class: int = 10) -> Path:
    """`binary_archive`'s batch files written out as an extracted `cifar-10-batches-bin/`
    folder under `folder` (no test batch); returns that folder."""
    release = folder / "cifar-10-batches-bin"
    release.mkdir(parents=True, exist_ok=True)
    for b in range(1, batches + 1):
        labels = balanced_labels(per_class, seed=b)
        (release / f"data_batch_{b}.bin").write_bytes(binary_batch(labels, seed=b))
    return release


def complete_span(
    root: Path, number: int, batches: int = 1, per_class: int = 2, counts: bool = False
) -> Path:
    """`root/span-N/` holding an extracted binary release, then its `_SUCCESS` marker,
    written last as a finished copy does (empty, or with the record counts per split when
    `counts`); returns the span folder."""
    folder = root / f"span-{number}"
    extracted_release(folder, batches, per_class)
    marker = {"train": batches * per_class * 10, "test": 0} if counts else None
    (folder / "_SUCCESS").write_text(json.dumps(marker) if marker else "")
    return folder


def scaled_archive(path: Path, factor: float, batches: int = 2, per_class: int = 10) -> Path:
    """`binary_archive`'s records with every pixel multiplied by `factor` (a badly exposed
    camera batch, for the drift check)."""
    members = {}
    for b in range(1, batches + 1):
        labels = balanced_labels(per_class, seed=b)
        scaled = np.clip(make_images(labels, seed=b) * float(factor), 0, 255).astype(np.uint8)
        members[f"cifar-10-batches-bin/data_batch_{b}.bin"] = binary_records(scaled, labels)
    return write_tar(path, members)


def python_archive(
    path: Path, batches: int = 2, per_class: int = 10, with_test: bool = False
) -> Path:
    members = {}
    for b in range(1, batches + 1):
        members[f"cifar-10-batches-py/data_batch_{b}"] = python_batch(
            balanced_labels(per_class, seed=b), seed=b
        )
    if with_test:
        members["cifar-10-batches-py/test_batch"] = python_batch(
            balanced_labels(per_class, seed=99), seed=99
        )
    return write_tar(path, members)


def image_folder(root: Path, per_class: int = 3, splits=("train", "test"), size: int = 32) -> Path:
    from PIL import Image

    for split_index, split in enumerate(splits):
        labels = balanced_labels(per_class, seed=split_index)
        for i, (label, image) in enumerate(zip(labels, make_images(labels, split_index))):
            folder = root / split / LABEL_NAMES[label]
            folder.mkdir(parents=True, exist_ok=True)
            picture = Image.fromarray(image)
            if size != 32:
                picture = picture.resize((size, size))
            picture.save(folder / f"{i:05d}.png")
    return root


def serialized_examples(images: np.ndarray, labels: np.ndarray | None = None) -> list[bytes]:
    """tf.Examples exactly as Cifar10ExampleGen writes them (its own `to_example`)."""
    from components.cifar10_example_gen.executor import serialize
    from components.cifar10_example_gen.sources import Record
    from components.cifar10_example_gen.summaries import summarize

    labels = np.zeros(len(images), np.int64) if labels is None else labels
    summaries = np.stack(list(summarize(images).values()), axis=1).tolist()
    return [
        serialize(Record(f"fixture:{i}", int(label), image.tobytes(), tuple(summary)))
        for i, (image, label, summary) in enumerate(zip(images, labels, summaries))
    ]


def write_split(path: Path, labels: np.ndarray, seed: int) -> np.ndarray:
    """A gzipped TFRecord file of generated examples, as an ExampleGen split holds them;
    returns the images written."""
    import tensorflow as tf

    images = make_images(labels, seed)
    with tf.io.TFRecordWriter(str(path), options="GZIP") as writer:
        for example in serialized_examples(images, labels):
            writer.write(example)
    return images


# A SavedModel's files, small and named, for the push tests (not loadable: the tests that
# load one save a real tf.Module).
MODEL_FILES = {
    "saved_model.pb": b"graph",
    "fingerprint.pb": b"fingerprint",
    "variables/variables.index": b"index",
    "variables/variables.data-00000-of-00001": b"weights" * 100,
    "assets/labels.txt": b"airplane\n",
}


def fake_saved_model(tmp_path: Path, name: str) -> str:
    """`<tmp_path>/<name>/Format-Serving` holding MODEL_FILES, each ending in `name`."""
    serving = tmp_path / name / "Format-Serving"
    for relative, content in MODEL_FILES.items():
        (serving / relative).parent.mkdir(parents=True, exist_ok=True)
        (serving / relative).write_bytes(content + name.encode())
    return str(serving)


def files_under(directory) -> dict[str, bytes]:
    """Every file under `directory`: relative path -> bytes."""
    import os

    return {
        os.path.relpath(path, directory): Path(path).read_bytes()
        for path in (os.path.join(root, n) for root, _, names in os.walk(directory) for n in names)
    }


def served_version(base, version: str, spans_record: dict[int, str] | None = None):
    """A complete version folder (saved_model.pb written last, as every push does) with the
    spans record a push keeps; by default span version // 100 with print-VERSION."""
    from components.cifar10_example_gen.spans import record_json

    folder = base / version
    (folder / "variables").mkdir(parents=True)
    (folder / "variables" / "variables.index").write_bytes(b"index")
    (folder / "variables" / "variables.data-00000-of-00001").write_bytes(b"weights")
    record = spans_record or {int(version) // 100: f"print-{version}"}
    (folder / "training_spans.json").write_text(record_json(record))
    (folder / "saved_model.pb").write_bytes(b"graph")
    return folder


def ingest(out_dir: Path, root: Path, served, **component_args):
    """The ExampleGen's executor run on the spans under `root` with `served` (a ServedModel
    artifact) as its input, as the pipeline runs it: its Examples artifact, at
    `out_dir/examples`."""
    from tfx.types import standard_artifacts
    from tfx.utils import proto_utils

    from components.cifar10_example_gen import executor as example_gen
    from components.cifar10_example_gen.component import Cifar10ExampleGen

    component = Cifar10ExampleGen(source_uri=str(root), source_fingerprint="x", **component_args)
    properties = {
        k: v if isinstance(v, (str, int, float)) else proto_utils.proto_to_json(v)
        for k, v in component.exec_properties.items()
    }
    examples = standard_artifacts.Examples()
    examples.uri = str(out_dir / "examples")
    example_gen.Executor().Do({"served_model": [served]}, {"examples": [examples]}, properties)
    return examples


def tiny_served_model(run_dir: Path, version: str = "1") -> Path:
    """`<run_dir>/serving/cifar10/<version>`, laid out as `run --output-dir` leaves it:
    an untrained network shaped like the real one (uint8 [N,32,32,3] -> 10 logits),
    exported as the Trainer exports, in seconds instead of a training run."""
    from components.trainer import export
    from components.trainer.keras import keras

    network = keras.Sequential(
        [
            keras.layers.Input((32, 32, 3), dtype="uint8"),
            keras.layers.Rescaling(1 / 255),
            keras.layers.Flatten(),
            keras.layers.Dense(10),
        ]
    )
    version_dir = run_dir / "serving" / "cifar10" / version
    export.export_serving_model(network, str(version_dir))
    return version_dir


def write_png(path: Path, seed: int = 0) -> Path:
    """A 32x32 PNG of generated pixels."""
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 255, (32, 32, 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path)
    return path
