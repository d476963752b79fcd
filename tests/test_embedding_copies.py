"""The embedding copy finder (components/validation_gate/embedding_copies.py): pairs whose
embeddings' cosine similarity reaches the threshold, grouped, counted beyond the first
distinct difference hash of each group."""

import numpy as np
import pytest

from components.validation_gate import embedding_copies as ec


def _at(similarity: float, scale: float = 3.0) -> np.ndarray:
    """Two embeddings at exactly this cosine similarity (of different lengths)."""
    angle = np.arccos(similarity)
    return np.array([[1.0, 0.0, 0.0], [scale * np.cos(angle), scale * np.sin(angle), 0.0]])


@pytest.mark.parametrize("similarity, found", [(0.9901, 1), (0.9899, 0)])
def test_a_pair_is_a_copy_from_the_threshold_up(similarity, found):
    assert ec.THRESHOLD == 0.99
    pairs = ec.similar_pairs(_at(similarity))
    assert len(pairs) == found
    assert ec.copies(_at(similarity), [b"a", b"b"]) == found


def test_groups_count_copies_beyond_the_first_distinct_hash():
    """A picture and two shifted copies are one group (two copies); a picture and its copy
    that the difference hash already groups (a near copy, counted by it) add none; an
    unrelated picture and a zero embedding are no one's copy."""
    rng = np.random.default_rng(0)
    base, other = rng.normal(size=(2, 64))
    embeddings = np.stack(
        [base, base + 0.01 * rng.normal(size=64), base + 0.01 * rng.normal(size=64),
         other, other * 1.5, -base, np.zeros(64)]
    )  # fmt: skip
    keys = [b"p", b"q", b"r", b"o", b"o", b"n", b"z"]
    pairs = ec.similar_pairs(embeddings)
    assert sorted(map(tuple, pairs.tolist())) == [(0, 1), (0, 2), (1, 2), (3, 4)]
    assert ec.copies(embeddings, keys) == 2


def test_chunks_see_pairs_across_them(monkeypatch):
    monkeypatch.setattr(ec, "_CHUNK", 2)
    embeddings = np.eye(5)
    embeddings[4] = embeddings[0]
    assert ec.similar_pairs(embeddings).tolist() == [[0, 4]]
    assert ec.similar_pairs(embeddings[:1]).shape == (0, 2)
