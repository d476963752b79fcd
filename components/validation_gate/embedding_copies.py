"""Copies by the served model's embeddings: images whose penultimate-layer embeddings point the
same way (cosine similarity at least THRESHOLD) are counted as copies of one picture. This
finds what the difference hash (near_copies.py) misses, such as a copy shifted by one pixel;
it runs on the gate's scored sample (components/validation_gate/scoring.py). Pairs are
grouped (a copy of a copy is in the same group), and a group counts the copies beyond the
first of its distinct difference hashes, so exact and near copies, counted already, are not
counted twice. benchmarks/embedding_copies.py measures the threshold on CIFAR-10."""

from __future__ import annotations

import numpy as np

# Chosen from benchmarks/embedding_copies.py (airbench trained on CIFAR-10, 84%): in slices
# of 5,000 of CIFAR-10's 50,000 images (the most the gate scores) 0.08% of the images are
# counted as copies (at most 0.16%), and a third of copies shifted by one pixel are found;
# at 0.995 almost none are counted, but only a twelfth of shifted copies are found, and at
# 0.985 0.45% (at most 0.62%).
THRESHOLD = 0.99
_CHUNK = 1024


def similar_pairs(embeddings: np.ndarray, threshold: float = THRESHOLD) -> np.ndarray:
    """[m, 2] index pairs i < j whose embeddings' cosine similarity is at least
    `threshold`, from an [n, d] array (compared in chunks: n x _CHUNK similarities at a
    time). A zero embedding is like no other."""
    vectors = np.asarray(embeddings, np.float32)
    if len(vectors) < 2:
        return np.zeros((0, 2), np.int64)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    unit = np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
    found = []
    for start in range(0, len(unit), _CHUNK):
        similar = unit[start : start + _CHUNK] @ unit.T >= threshold
        rows, columns = np.nonzero(similar)
        rows += start
        later = columns > rows
        found.append(np.stack([rows[later], columns[later]], axis=1))
    return np.concatenate(found).astype(np.int64)


def _groups(count: int, pairs: np.ndarray) -> list[list[int]]:
    """The connected groups (more than one member) of `count` items joined by `pairs`."""
    parent = list(range(count))

    def root(item: int) -> int:
        while parent[item] != item:
            parent[item] = parent[parent[item]]
            item = parent[item]
        return item

    for a, b in pairs:
        parent[root(int(a))] = root(int(b))
    members: dict[int, list[int]] = {}
    for item in {int(i) for i in pairs.ravel()}:
        members.setdefault(root(item), []).append(item)
    return [sorted(group) for group in members.values()]


def grouped_copies(pairs: np.ndarray, keys: list[bytes]) -> int:
    """Images beyond the first of each group that `pairs` join, counting only distinct
    `keys` (their difference hashes: images equal by it are near or exact copies, counted
    elsewhere)."""
    return sum(len({keys[i] for i in group}) - 1 for group in _groups(len(keys), pairs))


def copies(embeddings: np.ndarray, keys: list[bytes], threshold: float = THRESHOLD) -> int:
    """`grouped_copies` of the pairs of similar embeddings."""
    return grouped_copies(similar_pairs(embeddings, threshold), keys)
