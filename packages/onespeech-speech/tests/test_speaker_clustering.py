"""Clustering, automatic count, splitting and resegmentation on synthetic embeddings."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from onespeech.speech.speakers.clustering import (
    average_linkage,
    cosine_distances,
    estimate_count,
    given_count,
    linkage,
    one_speaker,
    relabel_by_first_appearance,
    silhouette,
)
from onespeech.speech.speakers.diarize import DiarizationOptions, Turn, check_speakers, turns_from_partials
from onespeech.speech.speakers.segmentation import RegionPartials, resegment_region, split_region

SR = 16000


def _speakers(k: int, dim: int = 256, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    c = rng.normal(size=(k, dim))
    return c / np.linalg.norm(c, axis=1, keepdims=True)


def _around(centre: np.ndarray, n: int, spread: float, rng: np.random.Generator) -> np.ndarray:
    e = centre + spread * rng.normal(size=(n, centre.size)) / np.sqrt(centre.size)
    return (e / np.linalg.norm(e, axis=1, keepdims=True)).astype(np.float32)


def test_linkage_distances_are_mean_pairwise_distances() -> None:
    e = _around(_speakers(1)[0], 12, 1.0, np.random.default_rng(1))
    d = cosine_distances(e)
    members = {i: [i] for i in range(len(e))}
    for i, j, dist in linkage(e):
        want = d[np.ix_(members[i], members[j])].mean()
        assert abs(dist - want) < 1e-9
        members[i] += members.pop(j)


def test_average_linkage_recovers_separated_speakers() -> None:
    rng = np.random.default_rng(2)
    centres = _speakers(3)
    truth = rng.integers(0, 3, 30)
    e = np.stack([_around(centres[t], 1, 0.3, rng)[0] for t in truth])
    labels = average_linkage(e, n_clusters=3)
    assert np.array_equal(labels, relabel_by_first_appearance(truth))
    assert np.array_equal(average_linkage(e, threshold=0.5), labels)
    with pytest.raises(ValueError, match="exactly one"):
        average_linkage(e)
    with pytest.raises(ValueError, match="integer >= 1"):
        average_linkage(e, n_clusters=0)


def test_silhouette_matches_its_definition() -> None:
    rng = np.random.default_rng(3)
    e = _around(_speakers(1)[0], 9, 2.0, rng)
    labels = np.array([0, 0, 0, 1, 1, 1, 2, 2, 0])
    w = rng.uniform(1, 3, 9)
    d = cosine_distances(e)
    s = []
    for i in range(9):
        own = (labels == labels[i]) & (np.arange(9) != i)
        a = (d[i, own] * w[own]).sum() / w[own].sum()
        b = min(
            (d[i, labels == k] * w[labels == k]).sum() / w[labels == k].sum()
            for k in set(labels) - {labels[i]}
        )
        s.append((b - a) / max(a, b))
    assert abs(silhouette(d, labels, w) - np.average(s, weights=w)) < 1e-12


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_estimate_count_finds_the_speakers(k: int) -> None:
    rng = np.random.default_rng(10 + k)
    centres = _speakers(k, seed=k)
    truth = np.concatenate([np.arange(k), rng.integers(0, k, 40)])
    e = np.stack([_around(centres[t], 1, 0.35, rng)[0] for t in truth])
    labels = estimate_count(e, np.full(len(e), 2.0))
    assert labels.max() + 1 == k
    assert np.array_equal(labels, relabel_by_first_appearance(truth))


def test_a_stray_piece_is_not_a_speaker() -> None:
    rng = np.random.default_rng(4)
    a, b, stray = _speakers(3, seed=9)
    e = np.concatenate([_around(a, 15, 0.3, rng), _around(b, 15, 0.3, rng), _around(stray, 1, 0.1, rng)])
    labels = estimate_count(e, np.full(len(e), 2.0))
    assert labels.max() + 1 == 2


def test_one_speaker_whose_pieces_vary_is_one_speaker() -> None:
    # pieces of one voice spread as short real pieces do (pairwise cosine distances ~0.2-0.3,
    # past the last-merge threshold): a silhouette can only choose among two or more clusters
    rng = np.random.default_rng(21)
    (a,) = _speakers(1, seed=21)
    e = _around(a, 12, 0.6, rng)
    assert linkage(e)[-1][2] > 0.21
    w = np.full(len(e), 2.0)
    assert one_speaker(e, w, 0.81)
    assert np.array_equal(estimate_count(e, w), np.zeros(12, dtype=np.int64))


def test_a_second_voice_that_speaks_little_is_not_one_speaker() -> None:
    rng = np.random.default_rng(22)
    a, b = _speakers(2, seed=22)
    e = np.concatenate([_around(a, 12, 0.3, rng), _around(b, 2, 0.3, rng)])
    w = np.full(len(e), 2.0)
    assert not one_speaker(e, w, 0.81)
    assert estimate_count(e, w).max() + 1 == 2


def _region(embeddings: np.ndarray, step: int = 8000, start: int = 0) -> RegionPartials:
    m = embeddings.shape[0]
    starts = start + np.arange(m, dtype=np.int64) * step
    return RegionPartials(
        start, int(starts[-1] + 25600), starts, starts + 25600, embeddings.astype(np.float32)
    )


def test_split_region_cuts_at_a_change_of_speaker() -> None:
    rng = np.random.default_rng(5)
    a, b = _speakers(2, seed=3)
    # partials every 0.5 s; speaker a until 8 s, then b: partials starting at 8 s or later are b
    e = np.concatenate([_around(a, 14, 0.2, rng), _around(b, 14, 0.2, rng)])
    e[14 - 3 : 14] = _around((a + b) / 2, 3, 0.1, rng)  # the partials that straddle the change
    pieces = split_region(_region(e), split_similarity=0.6)
    assert [p.start for p in pieces] == [0, 14 * 8000]
    one = split_region(_region(_around(a, 20, 0.2, rng)), split_similarity=0.6)
    assert len(one) == 1


def test_resegment_labels_along_time() -> None:
    rng = np.random.default_rng(6)
    a, b = _speakers(2, seed=4)
    e = np.concatenate([_around(a, 12, 0.2, rng), _around(b, 12, 0.2, rng)])
    spans = resegment_region(_region(e), np.stack([a, b]))
    assert [s[2] for s in spans] == [0, 1]
    assert spans[0][0] == 0 and spans[-1][1] == _region(e).end and spans[0][1] == spans[1][0]
    change = spans[0][1] / SR  # a's last partial ends at 5.5 + 1.6 s, b's first starts at 6 s
    assert 5.5 < change < 7.2
    single = resegment_region(_region(_around(b, 10, 0.2, rng)), np.stack([a, b]))
    assert [s[2] for s in single] == [1]


def test_turns_are_ordered_non_overlapping_and_labelled_by_first_appearance() -> None:
    rng = np.random.default_rng(7)
    a, b = _speakers(2, seed=5)
    regions = []
    for k, who in enumerate([b, a, b, a, a]):
        regions.append(_region(_around(who, 6, 0.2, rng), start=k * 80000))
    split = turns_from_partials(regions, None, DiarizationOptions(max_pause=0.0))
    assert [t.speaker for t in split] == [
        "SPEAKER_00",
        "SPEAKER_01",
        "SPEAKER_00",
        "SPEAKER_01",
        "SPEAKER_01",
    ]
    assert all(t.start < t.end for t in split)
    assert all(x.end <= y.start for x, y in pairwise(split))
    assert turns_from_partials(regions, 2, DiarizationOptions(max_pause=0.0)) == split
    # by default a speaker's turn keeps its pauses (the gaps are 0.9 s): the last two regions are one turn
    turns = turns_from_partials(regions, 2, DiarizationOptions())
    assert turns == [*split[:3], Turn(3 * 80000 / SR, regions[-1].end / SR, "SPEAKER_01")]
    assert turns_from_partials(regions, None, DiarizationOptions()) == turns
    assert turns_from_partials(regions, 2, DiarizationOptions(max_pause=0.8)) == split
    assert turns_from_partials([], None, DiarizationOptions()) == []


@pytest.mark.parametrize("bad", [0, -1, True, "two", 2.0, None])
def test_speakers_argument_is_checked(bad: object) -> None:
    with pytest.raises(ValueError, match="'auto' or a number of speakers"):
        check_speakers(bad)
    assert check_speakers("auto") is None and check_speakers(3) == 3


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="partial_rate"):
        DiarizationOptions(partial_rate=0)
    with pytest.raises(ValueError, match="min_speaker_fraction"):
        DiarizationOptions(min_speaker_fraction=1.0)


def test_a_given_count_is_not_spent_on_a_stray_piece() -> None:
    rng = np.random.default_rng(8)
    base, r1, r2, r3, stray = _speakers(5, seed=12)
    # three voices close to each other (cosine distance ~0.3) and one odd piece far from all
    a, b, c = (v / np.linalg.norm(v) for v in (base + 0.7 * r1, base + 0.7 * r2, base + 0.7 * r3))
    e = np.concatenate([_around(a, 12, 0.3, rng), _around(b, 12, 0.3, rng), _around(c, 12, 0.3, rng),
                        _around(stray, 1, 0.1, rng)])  # fmt: skip
    truth = np.repeat([0, 1, 2], 12)
    assert average_linkage(e, n_clusters=3)[-1] != average_linkage(e, n_clusters=3)[0]  # the stray takes a cluster
    labels = given_count(e, np.full(len(e), 2.0), 3)
    assert np.array_equal(labels[:36], truth)
    assert labels.max() + 1 == 3
