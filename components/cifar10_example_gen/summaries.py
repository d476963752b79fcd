"""Per-image summary features, written beside the image bytes so that TFDV's statistics, the
skew and drift comparators and the report describe the images, not 3,072 opaque bytes.

Computed on a whole batch file at once (numpy): a badly exposed camera batch moves brightness
and the channel means, an over-exposed one the clipped fraction, a blurred or re-compressed one
sharpness and JPEG blockiness. The model and the serving signatures never read them.
"""

from __future__ import annotations

import numpy as np

from components.contract import IMAGE_SUMMARY_FEATURES

# ITU-R BT.601 luma in 8-bit fixed point (weights sum to 256), as PIL's "L" mode rounds it.
_LUMA = (77, 150, 29)
# 8x8 JPEG blocks: the column (and row) pairs 7|8, 15|16, 23|24 straddle a block edge.
_BLOCK_EDGES = np.array([7, 15, 23])
_INNER = np.setdiff1d(np.arange(31), _BLOCK_EDGES)


def _channel_sums_and_luma(images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(uint32 [N, 3] per-channel sums, int16 [N, 32, 32] luma in 0..255) of uint8
    [N, 32, 32, 3] images, from one strided copy of each channel (the costly part)."""
    count = len(images)
    sums = np.empty((count, 3), np.uint32)
    weighted = np.zeros(images.shape[:3], np.uint16)
    for index, weight in enumerate(_LUMA):
        channel = images[..., index].astype(np.uint16)
        sums[:, index] = channel.reshape(count, -1).sum(axis=1, dtype=np.uint32)
        channel *= np.uint16(weight)
        weighted += channel
    return sums, (weighted >> 8).astype(np.int16)


def _blockiness(gray: np.ndarray) -> np.ndarray:
    """Mean step across 8x8 block edges over the mean step inside blocks (+1 each, so a
    flat image is 1): near 1 for an unblocked image, higher after harsh JPEG compression."""
    across = np.abs(np.diff(gray, axis=2)).mean(axis=1, dtype=np.float32)  # [N, 31] per column pair
    down = np.abs(np.diff(gray, axis=1)).mean(axis=2, dtype=np.float32)  # [N, 31] per row pair
    edge = across[:, _BLOCK_EDGES].mean(axis=1) + down[:, _BLOCK_EDGES].mean(axis=1)
    inner = across[:, _INNER].mean(axis=1) + down[:, _INNER].mean(axis=1)
    return (edge + 1.0) / (inner + 1.0)


def summarize(images: np.ndarray) -> dict[str, np.ndarray]:
    """{feature name: float32 [N]} for uint8 images [N, 32, 32, 3]; every value in [0, 1]
    except blockiness, a ratio near 1."""
    count = len(images)
    pixels = images.reshape(count, -1, 3)
    sums, gray = _channel_sums_and_luma(images)
    channel_means = sums / np.float32(255 * pixels.shape[1])
    flat = gray.reshape(count, -1)
    laplacian = (  # int16: |values| <= 4 * 255
        4 * gray[:, 1:-1, 1:-1]
        - gray[:, :-2, 1:-1]
        - gray[:, 2:, 1:-1]
        - gray[:, 1:-1, :-2]
        - gray[:, 1:-1, 2:]
    )
    # 0, 1, 254 and 255 are the values that wrap to 0..3 when 2 is added in uint8.
    clipped = np.count_nonzero((pixels.reshape(count, -1) + np.uint8(2)) <= 3, axis=1)
    values = {
        "image_brightness": flat.mean(axis=1, dtype=np.float32) / 255.0,
        "image_contrast": flat.std(axis=1, dtype=np.float32) / 255.0,
        "image_red_mean": channel_means[:, 0],
        "image_green_mean": channel_means[:, 1],
        "image_blue_mean": channel_means[:, 2],
        "image_clipped_fraction": clipped / np.float32(pixels[0].size),
        "image_sharpness": np.abs(laplacian).mean(axis=(1, 2), dtype=np.float32) / 255.0,
        "image_blockiness": _blockiness(gray),
    }
    assert tuple(values) == IMAGE_SUMMARY_FEATURES
    return {name: np.asarray(value, np.float32) for name, value in values.items()}
