"""The JPEG trace behind the README's statement that the shared copy was decoded from
quality-75 JPEG files: it must find the quality and subsampling images were saved with, and
find none in images that never went through JPEG."""

import json
import sys

import numpy as np
import pytest
from PIL import Image

from benchmarks import jpeg_trace

import cifar_fixtures as fx


def smooth_images(count: int = 20, seed: int = 0) -> np.ndarray:
    """Photo-like images: a coarse random brightness field with a moderate colour cast,
    smoothly upsampled. Unlike noise or saturated random colours, which no JPEG quality
    reproduces, these re-encode almost unchanged at the settings they were saved with."""
    rng = np.random.default_rng(seed)
    brightness = rng.integers(40, 216, size=(count, 5, 5, 1))
    cast = rng.integers(-40, 41, size=(count, 1, 1, 3))
    coarse = np.clip(brightness + cast, 0, 255).astype(np.uint8)
    return np.stack(
        [np.asarray(Image.fromarray(c).resize((32, 32), Image.BICUBIC)) for c in coarse]
    )


@pytest.mark.parametrize("quality, subsampling", [(60, "4:2:0"), (75, "4:2:0"), (85, "4:4:4")])
def test_finds_the_quality_and_subsampling_images_were_saved_with(quality, subsampling):
    found = jpeg_trace.trace(jpeg_trace.jpeg_round_trip(smooth_images(), quality, subsampling))
    assert (found.jpeg, found.quality, found.subsampling) == (True, quality, subsampling)
    assert found.change_at_quality < min(found.change_at_neighbours)


def test_lossless_images_show_no_trace():
    found = jpeg_trace.trace(smooth_images())
    assert not found.jpeg
    assert found.dip_ratio >= jpeg_trace.DIP_RATIO


def test_command_reads_a_release_archive(tmp_path, monkeypatch, capsys):
    labels = fx.balanced_labels(2)
    images = jpeg_trace.jpeg_round_trip(smooth_images(len(labels)), 75, "4:2:0")
    archive = fx.write_tar(
        tmp_path / "cifar-10-binary.tar.gz",
        {"cifar-10-batches-bin/data_batch_1.bin": fx.binary_records(images, labels)},
    )
    monkeypatch.setattr(sys, "argv", ["jpeg_trace", "--data", str(archive), "--images", "16"])
    jpeg_trace.main()
    printed = json.loads(capsys.readouterr().out)
    assert printed["images"] == 16
    assert (printed["jpeg"], printed["quality"], printed["subsampling"]) == (True, 75, "4:2:0")
