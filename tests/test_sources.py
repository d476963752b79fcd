"""Readers of the three CIFAR-10 layouts, the eval carve, and every kind of bad input."""

import gzip
import io
import os
import pickle
import re
import tarfile

import numpy as np
import pytest

from components.cifar10_example_gen import sources

import cifar_fixtures as fx


def _expected_images(per_class, seed):
    labels = fx.balanced_labels(per_class, seed)
    return labels, fx.make_images(labels, seed)


@pytest.mark.parametrize("maker", [fx.binary_archive, fx.python_archive])
def test_archive_readers_decode_labels_and_hwc_pixels(tmp_path, maker):
    archive = maker(tmp_path / "cifar.tar.gz", batches=1, per_class=4)
    shards = sources.list_shards(str(archive))
    assert [s.split for s in shards] == ["train"]
    records = list(sources.read_shard(shards[0]))
    labels, images = _expected_images(4, seed=1)
    assert [r.label for r in records] == labels.tolist()
    assert records[5].image == images[5].tobytes()
    assert records[5].record_id.endswith(":5")


def test_extracted_folder_reads_like_the_archive(tmp_path):
    archive = fx.binary_archive(tmp_path / "cifar.tar.gz", batches=2, per_class=3, with_test=True)
    import tarfile

    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / "x")
    from_dir = sources.load_arrays(str(tmp_path / "x" / "cifar-10-batches-bin"))
    from_tar = sources.load_arrays(str(archive))
    for split in ("train", "eval"):
        np.testing.assert_array_equal(from_dir[split][0], from_tar[split][0])  # images
        np.testing.assert_array_equal(from_dir[split][1], from_tar[split][1])  # labels


def test_test_batch_becomes_eval_split(tmp_path):
    archive = fx.binary_archive(tmp_path / "c.tar.gz", batches=2, per_class=5, with_test=True)
    arrays = sources.load_arrays(str(archive))
    assert len(arrays["train"][1]) == 100 and len(arrays["eval"][1]) == 50


def test_eval_carve_is_class_balanced_and_deterministic(tmp_path):
    archive = fx.binary_archive(tmp_path / "c.tar.gz", batches=2, per_class=20)
    first = sources.load_arrays(str(archive), eval_fraction=0.1)
    second = sources.load_arrays(str(archive), eval_fraction=0.1)
    np.testing.assert_array_equal(first["eval"][0], second["eval"][0])
    assert np.bincount(first["eval"][1], minlength=10).tolist() == [4] * 10
    assert len(first["train"][1]) == 360


def test_image_folder_layout(tmp_path):
    root = fx.image_folder(tmp_path / "imgs", per_class=2)
    arrays = sources.load_arrays(str(root))
    assert len(arrays["train"][1]) == 20 and len(arrays["eval"][1]) == 20
    labels, images = _expected_images(2, seed=0)
    first = [s for s in sources.list_shards(str(root)) if s.split == "train"][0]
    record = next(sources.read_shard(first))
    index = int(os.path.basename(record.record_id).split(".")[0])
    assert record.label == labels[index] == 0
    assert record.image == images[index].tobytes()


# ---- bad input: one clear error that names the file and the problem ----


def test_batch_length_not_a_multiple_of_the_record_size(tmp_path):
    payload = fx.binary_batch(fx.balanced_labels(1)) + b"\x00" * 7
    archive = fx.write_tar(tmp_path / "c.tar.gz", {"b/data_batch_1.bin": payload})
    with pytest.raises(sources.SourceError, match=r"data_batch_1\.bin: 30737 bytes is not a"):
        list(sources.read_shard(sources.list_shards(str(archive))[0]))


def test_label_above_nine(tmp_path):
    payload = bytearray(fx.binary_batch(fx.balanced_labels(1)))
    payload[3073 * 4] = 12
    archive = fx.write_tar(tmp_path / "c.tar.gz", {"b/data_batch_1.bin": bytes(payload)})
    with pytest.raises(sources.SourceError, match=r"data_batch_1\.bin: record 4 has label 12"):
        list(sources.read_shard(sources.list_shards(str(archive))[0]))


def _python_batch_without_images():
    empty = np.zeros((0, 3072), np.uint8)
    return pickle.dumps({b"data": empty, b"labels": np.zeros(0, np.int64)}, protocol=4)


@pytest.mark.parametrize(
    "name, payload",
    [
        ("cifar-10-batches-bin/data_batch_1.bin", b""),
        ("cifar-10-batches-py/data_batch_1", _python_batch_without_images()),
    ],
    ids=["binary", "python"],
)
@pytest.mark.parametrize("archived", [False, True], ids=["folder", "archive"])
def test_a_batch_file_without_images_is_refused_naming_it(tmp_path, name, payload, archived):
    good = name.replace("_1", "_2")
    make = fx.binary_batch if name.endswith(".bin") else fx.python_batch
    members = {name: payload, good: make(fx.balanced_labels(1))}
    if archived:
        source = fx.write_tar(tmp_path / "c.tar.gz", members)
        where = re.escape(f"{source}:{name}")
    else:
        for member, data in members.items():
            (tmp_path / "x" / member).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / "x" / member).write_bytes(data)
        source, where = tmp_path / "x", re.escape(str(tmp_path / "x" / name))
    with pytest.raises(sources.SourceError, match=rf"^{where}: .*no images"):
        sources.count_records(str(source))


def test_truncated_gzip(tmp_path):
    archive = fx.binary_archive(tmp_path / "c.tar.gz", batches=1, per_class=5)
    data = archive.read_bytes()
    archive.write_bytes(data[: len(data) // 2])
    with pytest.raises(sources.SourceError, match=r"c\.tar\.gz: corrupt or truncated archive"):
        sources.list_shards(str(archive))


@pytest.mark.parametrize("where", [0.3, 0.6, 0.9, "deflate"])
def test_corrupt_gzip_bytes_are_refused_by_the_check_naming_the_file(tmp_path, where):
    """The check reads through ISA-L's inflater: bytes overwritten inside the stream (the
    checksum at its end fails), or a deflate block of the reserved type right after the
    gzip header (the inflater's own error), must come out as a SourceError that names the
    archive, not as the inflater's exception."""
    archive = fx.binary_archive(tmp_path / "c.tar.gz", batches=2, per_class=5)
    if where == "deflate":
        header = b"\x1f\x8b\x08\x00" + bytes(4) + b"\x00\xff"  # no name, no extra fields
        archive.write_bytes(header + b"\xff" * 100)  # BFINAL 1, BTYPE 11: invalid
    else:
        data = bytearray(archive.read_bytes())
        start = int(len(data) * where)
        data[start : start + 64] = bytes(range(64))
        archive.write_bytes(bytes(data))
    with pytest.raises(sources.SourceError, match=r"c\.tar\.gz: corrupt or truncated archive"):
        sources.inspect_source(str(archive))


def test_reading_a_batch_streams_the_archive_only_up_to_it(tmp_path):
    """A gzipped tar has no index: looking a member up by name would decompress the whole
    archive for every batch file the ExampleGen reads (twice per batch, once per split)."""
    archive = fx.binary_archive(tmp_path / "c.tar.gz", batches=3, per_class=20)
    first, *later = [s for s in sources.list_shards(str(archive)) if s.split == sources.TRAIN]
    data = archive.read_bytes()
    archive.write_bytes(data[: len(data) * 2 // 3])  # the last batch is cut off
    assert len(list(sources.read_shard(first))) == 200
    with pytest.raises(sources.SourceError, match="corrupt or truncated archive"):
        list(sources.read_shard(later[-1]))


def test_corrupt_gzip(tmp_path):
    archive = tmp_path / "c.tar.gz"
    archive.write_bytes(gzip.compress(b"x" * 1000)[:20] + b"garbage" * 100)
    with pytest.raises(sources.SourceError, match="corrupt or truncated archive"):
        sources.list_shards(str(archive))


def test_archive_without_data_batch(tmp_path):
    archive = fx.write_tar(tmp_path / "c.tar.gz", {"cifar-10-batches-bin/readme.txt": b"hi"})
    with pytest.raises(sources.SourceError, match=r"c\.tar\.gz: no CIFAR-10 training data"):
        sources.list_shards(str(archive))


class _Exploit:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_pickle_with_disallowed_global_is_refused_without_running(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    payload = pickle.dumps({b"data": _Exploit(), b"labels": []}, protocol=2)
    archive = fx.write_tar(tmp_path / "c.tar.gz", {"cifar-10-batches-py/data_batch_1": payload})
    with pytest.raises(
        sources.SourceError, match=r"data_batch_1: .*refused to load global '(posix|os)\.system'"
    ):
        list(sources.read_shard(sources.list_shards(str(archive))[0]))
    assert not (tmp_path / "pwned").exists()


def test_image_of_the_wrong_size(tmp_path):
    root = fx.image_folder(tmp_path / "imgs", per_class=1, splits=("train",), size=40)
    shard = sources.list_shards(str(root))[0]
    with pytest.raises(sources.SourceError, match=r"train/airplane/\d+\.png: image is 40x40"):
        list(sources.read_shard(shard))


def test_file_that_is_not_an_image(tmp_path):
    root = fx.image_folder(tmp_path / "imgs", per_class=1, splits=("train",))
    (root / "train" / "cat" / "broken.png").write_bytes(b"not a png")
    shard = [s for s in sources.list_shards(str(root)) if s.member.endswith("cat")][0]
    with pytest.raises(sources.SourceError, match=r"cat/broken\.png: not a readable"):
        list(sources.read_shard(shard))


def test_unknown_class_folder(tmp_path):
    root = fx.image_folder(tmp_path / "imgs", per_class=1, splits=("train",))
    (root / "train" / "unicorn").mkdir()
    (root / "train" / "unicorn" / "a.png").write_bytes(b"")
    with pytest.raises(sources.SourceError, match="unknown class folder 'unicorn'"):
        sources.list_shards(str(root))


def test_missing_path(tmp_path):
    with pytest.raises(sources.SourceError, match="nope.tar.gz: no such file"):
        sources.list_shards(str(tmp_path / "nope.tar.gz"))


# ---- unsafe archive members: refused by name, whatever the release format ----


def _archive_with(path, batch_name, batch, extra: tarfile.TarInfo):
    mode = "w:gz" if path.name.endswith(".gz") else "w"
    with tarfile.open(path, mode) as tar:
        info = tarfile.TarInfo(batch_name)
        info.size = len(batch)
        tar.addfile(info, io.BytesIO(batch))
        tar.addfile(extra, io.BytesIO(b"x" * extra.size) if extra.isfile() else None)
    return path


def _member(name, kind=tarfile.REGTYPE, link=""):
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    info.size = 1 if kind == tarfile.REGTYPE else 0
    return info


RELEASES = {
    "binary": ("cifar-10-batches-bin/data_batch_1.bin", fx.binary_batch),
    "python": ("cifar-10-batches-py/data_batch_1", fx.python_batch),
}
UNSAFE = [
    (_member("../../../../tmp/evil"), "'..' in its path"),
    (_member("cifar-10-batches-bin/../../evil"), "'..' in its path"),
    (_member("/etc/evil"), "absolute path"),
    (
        _member("cifar-10-batches-bin/link", tarfile.SYMTYPE, "/etc/passwd"),
        "link to the absolute path '/etc/passwd'",
    ),
    (
        _member("cifar-10-batches-bin/link", tarfile.SYMTYPE, "../../outside"),
        "link to '../../outside', outside the archive",
    ),
    (
        _member("cifar-10-batches-bin/hard", tarfile.LNKTYPE, "../outside"),
        "link to '../outside', outside the archive",
    ),
]


@pytest.mark.parametrize("suffix", [".tar.gz", ".tar"])
@pytest.mark.parametrize("release", sorted(RELEASES))
@pytest.mark.parametrize("member,reason", UNSAFE, ids=[r for _, r in UNSAFE])
def test_unsafe_member_is_refused_naming_it(tmp_path, suffix, release, member, reason):
    name, make = RELEASES[release]
    archive = _archive_with(tmp_path / f"c{suffix}", name, make(fx.balanced_labels(1)), member)
    with pytest.raises(sources.SourceError) as refused:
        sources.list_shards(str(archive))
    assert str(refused.value) == (
        f"{archive}: unsafe archive member '{member.name}' ({reason}); refusing the whole archive"
    )


def test_link_that_stays_inside_the_archive_is_accepted(tmp_path):
    name, make = RELEASES["binary"]
    inside = _member("cifar-10-batches-bin/alias", tarfile.SYMTYPE, "data_batch_1.bin")
    archive = _archive_with(tmp_path / "c.tar.gz", name, make(fx.balanced_labels(1)), inside)
    assert [s.member for s in sources.list_shards(str(archive))] == [name]


def test_count_records_reads_every_record(tmp_path):
    archive = fx.binary_archive(tmp_path / "c.tar.gz", batches=2, per_class=3, with_test=True)
    assert sources.count_records(str(archive)) == {"train": 60, "test": 30}


def _with_bad_label(layout: str, index: int, label: int) -> dict[str, bytes]:
    """Two batch files of one layout; the second has `label` at record `index`."""
    labels = fx.balanced_labels(1)
    if layout == "binary":
        payload = bytearray(fx.binary_batch(labels))
        payload[3073 * index] = label
        return {"b/data_batch_1.bin": fx.binary_batch(labels), "b/data_batch_2.bin": bytes(payload)}
    batch = pickle.loads(fx.python_batch(labels))
    batch[b"labels"][index] = label
    return {"b/data_batch_1": fx.python_batch(labels), "b/data_batch_2": pickle.dumps(batch)}


@pytest.mark.parametrize(
    "maker, layout, member",
    [
        (fx.binary_archive, "binary", "data_batch_2.bin"),
        (fx.python_archive, "python", "data_batch_2"),
    ],
)
def test_count_records_of_an_archive_checks_every_batch(tmp_path, maker, layout, member):
    """Every batch of the layout is read: a bad record in the last one is found, in either
    layout's reader."""
    archive = maker(tmp_path / "c.tar.gz", batches=2, per_class=2, with_test=True)
    assert sources.count_records(str(archive)) == {"train": 40, "test": 20}
    bad = fx.write_tar(tmp_path / "bad.tar.gz", _with_bad_label(layout, 9, 200))
    assert [s.layout for s in sources.list_shards(str(bad))] == [layout, layout]
    with pytest.raises(
        sources.SourceError, match=rf"bad\.tar\.gz:b/{member}: record 9 has label 200"
    ):
        sources.count_records(str(bad))


def test_a_second_check_of_unchanged_local_files_reuses_the_first(tmp_path, monkeypatch):
    """A local run checks its source in the CLI and again in the ExampleGen's executor: the
    second check of an archive or folder nobody touched is not another read, while a
    replaced archive, a rewritten file or a new file in a folder is read and checked again."""
    archive = fx.binary_archive(tmp_path / "c.tar.gz", batches=2, per_class=3, with_test=True)
    folder = tmp_path / "x"
    with tarfile.open(archive) as tar:
        tar.extractall(folder)
    folder = folder / "cifar-10-batches-bin"
    first = {str(p): sources.inspect_source(str(p)) for p in (archive, folder)}
    reads = []
    inspect = sources._inspect
    monkeypatch.setattr(sources, "_inspect", lambda source: reads.append(source) or inspect(source))
    for path, result in first.items():
        assert sources.inspect_source(path) == result
    assert reads == []

    fx.write_tar(tmp_path / "bad.tar.gz", _with_bad_label("binary", 4, 11))
    os.replace(tmp_path / "bad.tar.gz", archive)  # another file at the same path
    with pytest.raises(sources.SourceError, match=r"c\.tar\.gz:b/data_batch_2\.bin: record 4"):
        sources.inspect_source(str(archive))
    batch = folder / "data_batch_1.bin"
    payload = bytearray(batch.read_bytes())
    payload[0] = 10  # label 10, rewritten in place with the same size
    batch.write_bytes(bytes(payload))
    # The file system's clock may be coarser than the two writes (extraction, then this) are
    # apart; a modification time one nanosecond later stands for a later write.
    stat = batch.stat()
    os.utime(batch, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    with pytest.raises(sources.SourceError, match=r"data_batch_1\.bin: record 0 has label 10"):
        sources.inspect_source(str(folder))
    payload[0] = 0
    batch.write_bytes(bytes(payload))
    (folder / "data_batch_9.bin").write_bytes(fx.binary_batch(fx.balanced_labels(1)))
    reads.clear()
    assert sources.inspect_source(str(folder))[1]["train"] == first[str(folder)][1]["train"] + 10
    assert reads == [str(folder)]
