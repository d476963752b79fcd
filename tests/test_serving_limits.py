"""Hostile serving input: images whose headers claim more pixels than the serving limit
are refused before decoding, in every format `decode_image` reads, and by `predict`."""

import argparse
import io
import json
import struct
import subprocess
import sys
import textwrap
import zlib

import numpy as np
import pytest
from PIL import Image

from components.trainer import export, image_header
from components.trainer.keras import keras, tf

SMALL_LIMIT = 64 * 64  # format tests use small images against a small limit


def _tiny_network() -> keras.Model:
    """Untrained, but shaped like the real thing: uint8 [N,32,32,3] -> 10 logits."""
    return keras.Sequential(
        [
            keras.layers.Input((32, 32, 3), dtype="uint8"),
            keras.layers.Rescaling(1 / 255),
            keras.layers.Flatten(),
            keras.layers.Dense(10),
        ]
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """{"default": model with the real limit, "small": model refusing above 64x64}."""
    root = tmp_path_factory.mktemp("served")
    network = _tiny_network()
    export.export_serving_model(network, str(root / "default" / "1"))
    export.export_serving_model(network, str(root / "small" / "1"), max_image_pixels=SMALL_LIMIT)
    return root


def _serve(model_dir, payloads):
    signature = tf.saved_model.load(str(model_dir)).signatures["serving_default"]
    return signature(images=tf.constant(payloads))["probabilities"].numpy()


def zero_png(width: int, height: int) -> bytes:
    """A valid grayscale PNG of zeros, built row by row: a few hundred KB on the wire
    even at 20,000 x 20,000, never the full image in memory here."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body))
            + kind
            + body
            + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
        )

    compressor, row, parts = zlib.compressobj(9), b"\0" * (width + 1), []
    for _ in range(height):
        parts.append(compressor.compress(row))
    parts.append(compressor.flush())
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", b"".join(parts))
        + chunk(b"IEND", b"")
    )


def _encoded(size, fmt: str, **save_args) -> bytes:
    buffer = io.BytesIO()
    pixels = np.random.default_rng(0).integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
    Image.fromarray(pixels).save(buffer, format=fmt, **save_args)
    return buffer.getvalue()


def _gif_frames(size, colours) -> bytes:
    frames = [Image.new("RGB", size, colour) for colour in colours]
    buffer = io.BytesIO()
    frames[0].save(buffer, format="GIF", save_all=True, append_images=frames[1:], optimize=False)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def bomb_png(tmp_path_factory):
    path = tmp_path_factory.mktemp("bomb") / "bomb.png"
    path.write_bytes(zero_png(20_000, 20_000))
    return path


def test_a_20000_by_20000_png_is_refused_with_the_limit_in_the_message(served, bomb_png):
    assert bomb_png.stat().st_size < 1_000_000  # small on the wire
    with pytest.raises(tf.errors.InvalidArgumentError) as refused:
        _serve(served / "default" / "1", [bomb_png.read_bytes()])
    assert (
        "image refused: its header claims 20000x20000 (400000000 pixels), above the "
        "serving limit of 16777216 pixels (4096x4096)"
    ) in str(refused.value)


MEASURE_PEAK_MEMORY = textwrap.dedent("""
    import json, resource, sys
    import tensorflow as tf
    serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
    small, bomb = open(sys.argv[2], "rb").read(), open(sys.argv[3], "rb").read()
    serve(images=tf.constant([small]))
    # ru_maxrss is in kilobytes on Linux and in bytes on macOS.
    unit = 1 if sys.platform == "darwin" else 1024
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * unit
    try:
        serve(images=tf.constant([bomb]))
        refused = False
    except tf.errors.InvalidArgumentError:
        refused = True
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * unit
    print(json.dumps({"refused": refused, "peak_growth_bytes": after - before}))
""")


def test_the_refusal_allocates_no_decoded_image(served, bomb_png, tmp_path):
    """Decoding the bomb would take 1.2 GB (20,000^2 x 3 channels); the peak resident
    memory of a fresh serving process must not grow by a tenth of that."""
    small = tmp_path / "small.png"
    small.write_bytes(_encoded((32, 32), "PNG"))
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            MEASURE_PEAK_MEMORY,
            str(served / "default" / "1"),
            str(small),
            str(bomb_png),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts["refused"] is True
    assert facts["peak_growth_bytes"] < 120_000_000, facts


@pytest.mark.parametrize(
    "fmt,save_args", [("PNG", {}), ("JPEG", {"quality": 90}), ("BMP", {}), ("GIF", {})]
)
def test_every_format_is_bounded_by_its_header(served, fmt, save_args):
    small_model = served / "small" / "1"
    accepted = _serve(small_model, [_encoded((60, 60), fmt, **save_args)])
    np.testing.assert_allclose(accepted.sum(axis=1), 1.0, atol=1e-4)
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"image refused: its header claims 70x60 \(4200 pixels\)",
    ):
        _serve(small_model, [_encoded((70, 60), fmt, **save_args)])


def test_bmp_stored_top_down_counts_its_height(served):
    payload = bytearray(_encoded((70, 60), "BMP"))
    payload[22:26] = struct.pack("<i", -60)  # negative height: rows stored top-down
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"claims 70x60 \(4200 pixels\)"):
        _serve(served / "small" / "1", [bytes(payload)])


def test_gif_frames_count_against_the_limit(served):
    """Each 40x40 frame is within the limit; three of them are not, since the decoder
    holds every frame while reading the file."""
    small_model = served / "small" / "1"
    _serve(small_model, [_gif_frames((40, 40), ["red", "blue"])])  # 3,200 pixels
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"claims 40x40 \(4800 pixels\)"):
        _serve(small_model, [_gif_frames((40, 40), ["red", "blue", "green"])])


def test_gif_screen_and_frame_descriptors_are_both_checked(served):
    small_model = served / "small" / "1"
    gif = bytearray(_gif_frames((8, 8), ["red"]))
    screen = bytearray(gif)
    screen[6:10] = struct.pack("<HH", 100, 100)  # logical screen
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"claims 100x100"):
        _serve(small_model, [bytes(screen)])
    descriptor = gif.index(b"\x2c\x00\x00\x00\x00\x08\x00\x08\x00")  # frame at 0,0 of 8x8
    frame = bytearray(gif)
    frame[descriptor + 5 : descriptor + 9] = struct.pack("<HH", 90, 80)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"claims 90x80"):
        _serve(small_model, [bytes(frame)])


def test_a_gif_too_long_to_walk_is_refused(served):
    comment = b"\x21\xfe" + b"\x01x" * (image_header.MAX_GIF_BLOCKS + 1) + b"\x00"
    gif = _gif_frames((8, 8), ["red"])
    start = gif.index(b"\x2c")  # the first block after the header and colour table
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=f"GIF with more than {image_header.MAX_GIF_BLOCKS} blocks",
    ):
        _serve(served / "default" / "1", [gif[:start] + comment + gif[start:]])


def test_broken_bytes_are_still_an_error_and_small_images_still_served(served):
    model = served / "default" / "1"
    with pytest.raises(tf.errors.InvalidArgumentError):
        _serve(model, [b"\x89PNG\r\n\x1a\n"])  # a PNG signature, nothing else
    probabilities = _serve(model, [_encoded((1, 1), "PNG"), _encoded((640, 480), "JPEG")])
    assert probabilities.shape == (2, 10)


def test_predict_refuses_the_oversize_file_and_classifies_the_others(
    served, bomb_png, tmp_path, capsys
):
    from pipeline.local import predict

    good = []
    for name in ("a.png", "b.jpg"):
        good.append(tmp_path / name)
        good[-1].write_bytes(_encoded((32, 32), "JPEG" if name.endswith("jpg") else "PNG"))
    args = argparse.Namespace(
        model_dir=str(served / "default"),
        images=[str(good[0]), str(bomb_png), str(good[1])],
        top=2,
        json=False,
        samples=0,
        data=None,
    )
    assert predict.main(args) == 2
    out, err = capsys.readouterr()
    assert [line.split(":")[0] for line in out.splitlines()] == [str(good[0]), str(good[1])]
    refusals = [line for line in err.splitlines() if line.startswith("error:")]
    assert refusals == [
        f"error: {bomb_png}: image refused: its header claims 20000x20000 "
        "(400000000 pixels), above the serving limit of 16777216 pixels "
        "(4096x4096); downscale it before sending"
    ]
