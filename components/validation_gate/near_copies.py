"""Near copies: images that are the same picture after a re-encode (JPEG, a PNG round trip, a
small change of brightness), found by a difference hash (dHash): each image in grey, shrunk
to 8 x 9 by area averaging, one bit per pair of horizontal neighbours (is the right one
brighter?). Equal hashes mean a near copy. On CIFAR-10's 50,000 training images one pair
shares a hash; a JPEG (quality 75) re-encode keeps it for about 93% of images
(benchmarks/duplicate_thresholds.py). A one-pixel shift changes it: shifted or cropped
copies are not found."""

from __future__ import annotations

import numpy as np

_ROWS, _COLUMNS = 8, 9
_GREY = np.array([0.299, 0.587, 0.114], np.float32)


def _area_weights(size: int, out: int) -> np.ndarray:
    """[size, out]: the share of each input pixel in each output pixel, as area resizing
    averages (each column sums to one)."""
    edges = np.linspace(0.0, size, out + 1)
    low, high = np.arange(size)[:, None], np.arange(1, size + 1)[:, None]
    overlap = np.clip(np.minimum(high, edges[1:]) - np.maximum(low, edges[:-1]), 0.0, None)
    return (overlap / overlap.sum(axis=0, keepdims=True)).astype(np.float32)


def hashes(images: np.ndarray, batch: int = 4096) -> list[bytes]:
    """One 8-byte dHash per uint8 [N, H, W, 3] image."""
    found: list[bytes] = []
    if not len(images):
        return found
    rows = _area_weights(images.shape[1], _ROWS)
    columns = _area_weights(images.shape[2], _COLUMNS)
    for start in range(0, len(images), batch):
        grey = images[start : start + batch].astype(np.float32) @ _GREY  # [n, H, W]
        small = np.swapaxes(np.swapaxes(grey, 1, 2) @ rows, 1, 2) @ columns  # [n, 8, 9]
        bits = small[:, :, 1:] > small[:, :, :-1]
        found += [bytes(row) for row in np.packbits(bits.reshape(len(bits), -1), axis=1)]
    return found
