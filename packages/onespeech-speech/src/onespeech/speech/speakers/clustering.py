"""Average-linkage clustering of speaker embeddings and the automatic speaker count, in numpy.

Distances are cosine distances (1 - cosine similarity). Average linkage (UPGMA)
repeatedly merges the two clusters with the smallest mean pairwise distance, updating
the distance matrix with the Lance-Williams rule
``d(k, i+j) = (n_i d(k, i) + n_j d(k, j)) / (n_i + n_j)``; the merge history is kept,
so the partition into any number of clusters is a replay of its first ``n - K``
merges. Each merge costs one O(n^2) scan, so n pieces cost O(n^3): about a second for
the ~1000 pieces of an hour of conversation. scipy's ``linkage`` would do the same
work in C, but a dependency for a loop of this size does not pay.

Automatic count (:func:`estimate_count`), tuned on the tuning clips (conversations and monologues) of
``tools/eval_diarization.py`` (docs/speakers.md):

1. one speaker (:func:`one_speaker`) when every piece is close to the pieces'
   duration-weighted centroid: cosine similarity at least ``single_similarity``,
   0.81. Calibrated on the tuning clips of ``tools/eval_diarization.py``: the lowest
   piece-to-centroid similarity of single-speaker monologues (60-120 s) was 0.85 or
   more, that of conversations of 2-4 speakers 0.77 or less; 0.81 is the middle. A
   silhouette cannot choose one cluster, so this test comes first;
2. also one speaker when the last merge (the distance between the two clusters that
   remain) is below ``single_distance``, 0.21;
3. otherwise, for K = 2 up to the number of clusters still apart at ``single_distance``
   (a finer cut would split a speaker) and at most ``max_speakers``: cut the tree into
   K clusters, dissolve clusters holding
   less than ``min_fraction`` of the speech (a mixed or odd piece is not a speaker) into
   their nearest remaining centroid, and score the partition with the duration-weighted
   silhouette (how much closer each piece is to its own cluster than to the next one);
   the best-scoring partition wins, and its count is the number of clusters that stayed.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "average_linkage",
    "centroids",
    "cosine_distances",
    "cut_tree",
    "estimate_count",
    "given_count",
    "linkage",
    "nearest_centroid",
    "one_speaker",
    "relabel_by_first_appearance",
    "silhouette",
]


def cosine_distances(embeddings: np.ndarray) -> np.ndarray:
    """``1 - cos(e_i, e_j)`` as a float64 (n, n) matrix with a zero diagonal."""
    e = np.asarray(embeddings, dtype=np.float64)
    norms = np.linalg.norm(e, axis=1, keepdims=True)
    if np.any(norms == 0):
        raise ValueError("an embedding is all zeros; cosine distance is undefined")
    e = e / norms
    d = 1.0 - e @ e.T
    np.fill_diagonal(d, 0.0)
    return np.clip(d, 0.0, 2.0)


def linkage(embeddings: np.ndarray) -> list[tuple[int, int, float]]:
    """The average-linkage merge history: ``(kept, absorbed, distance)`` per merge, n - 1 of them."""
    d = cosine_distances(embeddings)
    n = d.shape[0]
    np.fill_diagonal(d, np.inf)
    sizes = np.ones(n, dtype=np.float64)
    merges = []
    for _ in range(n - 1):
        i, j = divmod(int(np.argmin(d)), n)
        if i > j:
            i, j = j, i
        merges.append((i, j, float(d[i, j])))
        merged = (sizes[i] * d[i] + sizes[j] * d[j]) / (sizes[i] + sizes[j])
        d[i, :] = merged
        d[:, i] = merged
        d[i, i] = np.inf
        d[j, :] = np.inf
        d[:, j] = np.inf
        sizes[i] += sizes[j]
    return merges


def cut_tree(merges: list[tuple[int, int, float]], n: int, n_clusters: int) -> np.ndarray:
    """Labels (by first appearance) of the partition into ``n_clusters`` clusters."""
    owner = np.arange(n)
    for i, j, _ in merges[: max(0, n - n_clusters)]:
        owner[owner == j] = i
    return relabel_by_first_appearance(owner)


def average_linkage(
    embeddings: np.ndarray, *, n_clusters: int | None = None, threshold: float | None = None
) -> np.ndarray:
    """Cluster labels (0..k-1 by first appearance) of ``embeddings`` (n, dim).

    Exactly one of ``n_clusters`` (merge down to that many, at most n) and
    ``threshold`` (stop before the first merge farther than this cosine distance).
    """
    if (n_clusters is None) == (threshold is None):
        raise ValueError("give exactly one of n_clusters and threshold")
    if n_clusters is not None and (
        isinstance(n_clusters, bool) or not isinstance(n_clusters, int) or n_clusters < 1
    ):
        raise ValueError(f"n_clusters must be an integer >= 1, got {n_clusters!r}")
    n = int(np.asarray(embeddings).shape[0])
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    merges = linkage(embeddings)
    if n_clusters is None:
        assert threshold is not None
        n_clusters = n - sum(dist <= threshold for _, _, dist in merges)
    return cut_tree(merges, n, min(n_clusters, n))


def silhouette(distances: np.ndarray, labels: np.ndarray, weights: np.ndarray) -> float:
    """Weighted mean silhouette ``(b - a) / max(a, b)``; a singleton scores 0. Needs >= 2 clusters."""
    k = int(labels.max()) + 1
    if k < 2:
        raise ValueError("the silhouette needs at least two clusters")
    onehot = np.zeros((labels.size, k))
    onehot[np.arange(labels.size), labels] = weights
    totals = onehot.sum(axis=0)
    sums = distances @ onehot  # weighted distance of each point to each cluster
    own = labels
    own_total = totals[own] - weights  # the point itself is excluded (its distance is 0)
    a = np.where(own_total > 0, sums[np.arange(labels.size), own] / np.maximum(own_total, 1e-12), 0.0)
    mean_to = sums / totals
    mean_to[np.arange(labels.size), own] = np.inf
    b = mean_to.min(axis=1)
    s = np.where(own_total > 0, (b - a) / np.maximum(np.maximum(a, b), 1e-12), 0.0)
    return float(np.average(s, weights=weights))


def centroids(
    embeddings: np.ndarray, weights: np.ndarray, labels: np.ndarray, which: np.ndarray
) -> np.ndarray:
    """Unit-length weighted mean embedding of each cluster in ``which``, one row each."""
    c = np.stack([(embeddings[labels == k] * weights[labels == k, None]).sum(axis=0) for k in which])
    return c / np.linalg.norm(c, axis=1, keepdims=True)


def nearest_centroid(embeddings: np.ndarray, unit_centroids: np.ndarray) -> np.ndarray:
    """Index of the most cosine-similar centroid for each embedding."""
    return np.argmax(np.asarray(embeddings) @ unit_centroids.T, axis=1)


def _dissolve(
    embeddings: np.ndarray, weights: np.ndarray, labels: np.ndarray, min_fraction: float
) -> np.ndarray:
    totals = np.bincount(labels, weights=weights)
    keep = np.nonzero(totals >= min_fraction * weights.sum())[0]
    if keep.size == totals.size or keep.size == 0:
        return labels
    return relabel_by_first_appearance(
        nearest_centroid(embeddings, centroids(embeddings, weights, labels, keep))
    )


def one_speaker(embeddings: np.ndarray, weights: np.ndarray, single_similarity: float) -> bool:
    """Whether every embedding's cosine similarity to the weighted centroid is at least ``single_similarity``.

    A second voice, however little it speaks, leaves its pieces far from a centroid
    that the others make; pieces of one voice stay near theirs (see the module docstring).
    """
    e = np.asarray(embeddings, dtype=np.float64)
    if e.shape[0] == 0:
        return True
    e = e / np.linalg.norm(e, axis=1, keepdims=True)
    centre = (e * np.asarray(weights, dtype=np.float64)[:, None]).sum(axis=0)
    norm = np.linalg.norm(centre)
    if norm == 0:
        return False
    return bool(np.min(e @ (centre / norm)) >= single_similarity)


def estimate_count(
    embeddings: np.ndarray,
    weights: np.ndarray,
    *,
    max_speakers: int = 10,
    single_distance: float = 0.21,
    single_similarity: float = 0.81,
    min_fraction: float = 0.1,
) -> np.ndarray:
    """Labels of the automatically counted speakers (see the module docstring)."""
    e = np.asarray(embeddings, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    n = e.shape[0]
    if one_speaker(e, w, single_similarity):
        return np.zeros(n, dtype=np.int64)
    if n < 3:
        return np.zeros(n, dtype=np.int64) if n < 2 or e[0] @ e[1] > 1 - single_distance else np.arange(n)
    merges = linkage(e)
    if merges[-1][2] < single_distance:
        return np.zeros(n, dtype=np.int64)
    distances = cosine_distances(e)
    # a partition that splits clusters closer than single_distance splits a speaker
    most = n - sum(1 for _, _, dist in merges if dist < single_distance)
    best, best_score = None, -np.inf
    for k in range(2, min(max_speakers, most) + 1):
        labels = _dissolve(e, w, cut_tree(merges, n, k), min_fraction)
        if labels.max() < 1:
            continue
        score = silhouette(distances, labels, w)
        if score > best_score + 1e-12:
            best, best_score = labels, score
    return best if best is not None else cut_tree(merges, n, 2)


def given_count(embeddings: np.ndarray, weights: np.ndarray, count: int, *, spare: int = 4) -> np.ndarray:
    """Labels of exactly ``min(count, n)`` speakers, robust to stray pieces.

    Average linkage cut at ``count`` clusters lets a single odd piece (two voices at
    once, a cough) take a cluster of its own and merge two real speakers instead. So
    the tree is also cut at ``count + 1 .. count + spare`` clusters; each cut keeps its
    ``count`` heaviest clusters (by speech time) and gives the other pieces to the
    nearest kept centroid; the cut with the best weighted silhouette wins.
    """
    e = np.asarray(embeddings, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    n = e.shape[0]
    count = min(count, n)
    merges = linkage(e)
    if count < 2:
        return cut_tree(merges, n, count)
    distances = cosine_distances(e)
    best, best_score = None, -np.inf
    for k in range(count, min(n, count + spare) + 1):
        labels = cut_tree(merges, n, k)
        if k > count:
            heaviest = np.argsort(-np.bincount(labels, weights=w), kind="stable")[:count]
            labels = relabel_by_first_appearance(
                nearest_centroid(e, centroids(e, w, labels, np.sort(heaviest)))
            )
            if labels.max() + 1 < count:
                continue
        score = silhouette(distances, labels, w)
        if score > best_score + 1e-12:
            best, best_score = labels, score
    return best if best is not None else cut_tree(merges, n, count)


def relabel_by_first_appearance(labels: np.ndarray) -> np.ndarray:
    """Map arbitrary labels to 0, 1, ... in order of first appearance."""
    order: dict[int, int] = {}
    out = np.empty(len(labels), dtype=np.int64)
    for k, label in enumerate(np.asarray(labels).tolist()):
        out[k] = order.setdefault(label, len(order))
    return out
