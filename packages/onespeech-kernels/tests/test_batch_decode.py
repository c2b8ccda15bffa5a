"""Batched decode kernels: every row bit-identical to the one-row decode kernels.

`linear_rows` against `linear` on each row alone, and `DecoderLayer.step_batch`
against `DecoderLayer.step` on each sequence alone, on every built variant, float32,
bf16 and int8 weights, float32 and bf16 caches, with and without bfloat16 rounding,
1-3 threads, at sizes that exercise every tail (K off the vector and pair steps, N
off the groups of four, odd batch sizes).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onespeech.kernels import cpu, int8matrix, ops
from onespeech.kernels import threads as thread_counts
from onespeech.kernels.threads import thread_limit

VARIANTS = [v for v in cpu.supported_variants() if cpu.load_variant(v) is not None] or [
    pytest.param(None, marks=pytest.mark.skip(reason="no compiled kernel variant is built here"))
]
D, H, HKV, HD, FF, EPS = 72, 4, 2, 18, 100, 1e-6
RNG = np.random.default_rng(0)


@pytest.fixture(params=VARIANTS)
def variant(request, monkeypatch) -> str:
    monkeypatch.setattr(ops, "_kernels", cpu.load_variant(request.param))
    return request.param


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint32)


@pytest.mark.parametrize("bf16", [False, True])
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize(("b", "n", "k"), [(1, 37, 70), (2, 64, 64), (3, 101, 133), (4, 40, 216), (5, 7, 1030),
                                         (6, 52, 47), (7, 33, 1031), (8, 300, 96), (13, 21, 35)])
def test_linear_rows_equals_linear_per_row(variant, bf16, threads, b, n, k, monkeypatch) -> None:
    monkeypatch.setattr(thread_counts, "available_cpus", lambda: 3)
    w = RNG.standard_normal((n, k)).astype(np.float32)
    w = ops.f32_to_bf16(w) if bf16 else w
    x = RNG.standard_normal((b, k)).astype(np.float32)
    bias = RNG.standard_normal(n).astype(np.float32)
    with thread_limit(threads):
        for rounding in (False, True):
            for bi in (None, bias):
                got = ops.linear_rows(x, w, bi, round_to_bf16=rounding)
                want = np.stack([ops.linear(x[i], w, bi, round_to_bf16=rounding) for i in range(b)])
                assert np.array_equal(_bits(got), _bits(want)), (rounding, bi is None)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(b=st.integers(1, 13), n=st.integers(1, 70), k=st.integers(1, 300), bf16=st.booleans(),
       threads=st.integers(1, 3), seed=st.integers(0, 2**32 - 1))
def test_linear_rows_equals_linear_per_row_at_any_shape(variant, b, n, k, bf16, threads, seed, monkeypatch) -> None:
    # every K past the last full vector (the tails, 8 or more left included) and every batch size
    monkeypatch.setattr(thread_counts, "available_cpus", lambda: 3)
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((n, k)).astype(np.float32)
    w = ops.f32_to_bf16(w) if bf16 else w
    x = rng.standard_normal((b, k)).astype(np.float32)
    with thread_limit(threads):
        got = ops.linear_rows(x, w)
        want = np.stack([ops.linear(x[i], w) for i in range(b)])
    assert np.array_equal(_bits(got), _bits(want))


def test_linear_rows_keeps_the_sign_of_zero_sums(variant) -> None:
    # -0.0 + 0.0f is +0.0: the one-row kernels add 0.0f where there is no bias
    x = np.full((3, 16), -0.0, np.float32)
    w = np.ones((5, 16), np.float32)
    got = ops.linear_rows(x, w)
    want = np.stack([ops.linear(r, w) for r in x])
    assert np.array_equal(_bits(got), _bits(want))


def test_linear_rows_refuses_what_linear_refuses(variant) -> None:
    with pytest.raises(ValueError, match="needs K=4"):
        ops.linear_rows(np.ones((2, 3), np.float32), np.ones((5, 4), np.float32))
    with pytest.raises(ValueError, match=r"expected 2 dims \(B, K\)"):
        ops.linear_rows(np.ones(4, np.float32), np.ones((5, 4), np.float32))
    assert ops.linear_rows(np.ones((0, 4), np.float32), np.ones((5, 4), np.float32)).shape == (0, 5)


def _weights(bf16: bool) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
    shapes = [(H * HD, D), (HKV * HD, D), (HKV * HD, D), (D, H * HD), (FF, D), (FF, D), (D, FF)]
    mats = tuple((RNG.standard_normal(s) / np.sqrt(s[1])).astype(np.float32) for s in shapes)
    norms = tuple((1 + 0.1 * RNG.standard_normal(n)).astype(np.float32) for n in (D, D, HD, HD))
    if bf16:
        mats, norms = tuple(ops.f32_to_bf16(m) for m in mats), tuple(ops.f32_to_bf16(v) for v in norms)
    return mats, norms


def _layer(kind: str) -> ops.DecoderLayer:
    """A fused layer of random float32, bf16 or int8 (quantized per row) weights."""
    mats, norms = _weights(kind == "bf16")
    scales = None
    if kind == "int8":
        codes = [int8matrix.quantize(m) for m in mats]
        mats, scales = tuple(m.codes for m in codes), tuple(m.scale for m in codes)
    layer = ops.decoder_layer(mats, norms, n_heads=H, n_kv_heads=HKV, head_dim=HD, eps=EPS, scales=scales)
    assert layer is not None
    return layer


@pytest.mark.parametrize("kind", ["float32", "bf16", "int8"])
@pytest.mark.parametrize("cache_dtype", [np.float32, np.uint16])
@pytest.mark.parametrize("round_to_bf16", [False, True])
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("n_seq", [1, 2, 5])
def test_step_batch_equals_step_per_sequence(variant, kind, cache_dtype, round_to_bf16, threads, n_seq,
                                              monkeypatch) -> None:
    # one row (the one-row kernels), two (paired rows on AVX2 int8) and five (a pair and a lone row)
    monkeypatch.setattr(thread_counts, "available_cpus", lambda: 3)
    n_layers, layer_index = 3, 1
    layer = _layer(kind)
    caps, positions = [40, 9, 25, 64, 12][:n_seq], np.array([37, 0, 24, 5, 11][:n_seq])
    caches = []
    for cap in caps:  # filled pasts of different lengths
        past = RNG.standard_normal((n_layers, cap, HKV, HD)).astype(np.float32)
        k = ops.f32_to_bf16(past) if cache_dtype == np.uint16 else past
        caches.append((k, k[:, ::-1].copy()))
    hidden = RNG.standard_normal((len(caps), D)).astype(np.float32)
    if round_to_bf16:
        hidden = ops.round_bf16(hidden)
    cos = RNG.standard_normal((len(caps), HD)).astype(np.float32)
    sin = RNG.standard_normal((len(caps), HD)).astype(np.float32)
    scale = HD**-0.5
    with thread_limit(threads):
        alone = [(k.copy(), v.copy()) for k, v in caches]
        want = hidden.copy()
        for b, (k, v) in enumerate(alone):
            layer.step(want[b], k[layer_index], v[layer_index], int(positions[b]), cos[b], sin[b], scale,
                       round_to_bf16=round_to_bf16)
        got = hidden.copy()
        layer.step_batch(got, [k for k, _ in caches], [v for _, v in caches], layer_index, positions, cos, sin,
                         scale, round_to_bf16=round_to_bf16)
    assert np.array_equal(_bits(got), _bits(want))
    for (k, v), (ka, va) in zip(caches, alone, strict=True):
        assert np.array_equal(k, ka) and np.array_equal(v, va)


def test_step_batch_refuses_bad_caches_and_positions(variant) -> None:
    mats, norms = _weights(False)
    layer = ops.decoder_layer(mats, norms, n_heads=H, n_kv_heads=HKV, head_dim=HD, eps=EPS)
    k = np.zeros((2, 8, HKV, HD), np.float32)
    h, cs = np.ones((2, D), np.float32), np.ones((2, HD), np.float32)
    with pytest.raises(ValueError, match="outside its cache"):
        layer.step_batch(h, [k, k.copy()], [k.copy(), k.copy()], 0, np.array([0, 8]), cs, cs, 0.1)
    with pytest.raises(ValueError, match="n_layers > 2"):
        layer.step_batch(h, [k, k.copy()], [k.copy(), k.copy()], 2, np.array([0, 1]), cs, cs, 0.1)
    with pytest.raises(ValueError, match="mix float32 and bf16"):
        layer.step_batch(h, [k, k.astype(np.uint16)], [k.copy(), k.astype(np.uint16)], 0, np.array([0, 1]),
                         cs, cs, 0.1)
    with pytest.raises(ValueError, match="2 key and 1 value caches"):
        layer.step_batch(h, [k, k.copy()], [k.copy()], 0, np.array([0, 1]), cs, cs, 0.1)
