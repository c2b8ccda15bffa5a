import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onespeech.kernels import ops
from onespeech.kernels.int8matrix import SCALE_SUFFIX
from onespeech.qwen3.config import LM_HEAD_NAME
from onespeech.qwen3.convert import int8_quantized
from onespeech.qwen3.decoder import Qwen3Decoder, rope_tables
from onespeech.qwen3.errors import RecognitionCancelled


@pytest.fixture(scope="module")
def decoder(tiny_weights, tiny_config) -> Qwen3Decoder:
    return Qwen3Decoder(tiny_weights, tiny_config)


def embeds(decoder: Qwen3Decoder, n: int, seed: int = 0) -> np.ndarray:
    ids = np.random.default_rng(seed).integers(0, 151000, n)
    return decoder.embed(ids)


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def test_rope_tables() -> None:
    cos, sin = rope_tables(np.arange(4), 8, 10000.0)
    inv = 1.0 / 10000.0 ** (np.arange(0, 8, 2) / 8)
    np.testing.assert_allclose(cos[3], np.cos(3 * np.concatenate([inv, inv])), rtol=1e-6)
    np.testing.assert_allclose(sin[2], np.sin(2 * np.concatenate([inv, inv])), rtol=1e-6)
    assert cos.dtype == np.float32


def test_default_head_is_the_one_the_reference_uses(decoder: Qwen3Decoder, tiny_weights, tiny_config) -> None:
    assert tiny_config.output_head_name == "thinker.model.embed_tokens.weight"  # tied, as the reference loads it
    assert np.shares_memory(decoder._head, tiny_weights[tiny_config.output_head_name])


def test_incremental_decoding_equals_full_forward(decoder: Qwen3Decoder) -> None:
    x = embeds(decoder, 24)
    full = decoder.hidden_states(x)
    cache = decoder.cache_for(30)
    parts = [decoder.forward(x[:10], cache), decoder.forward(x[10:11], cache), decoder.forward(x[11:], cache)]
    assert cache.length == 24
    # batched and one-row GEMMs round differently; random weights amplify it per layer
    assert rel(np.concatenate(parts), full) < 1e-4


def test_causal(decoder: Qwen3Decoder) -> None:
    x = embeds(decoder, 12)
    y = x.copy()
    y[8:] += 0.1
    a, b = decoder.hidden_states(x), decoder.hidden_states(y)
    assert np.array_equal(a[:8], b[:8]) and not np.allclose(a[8:], b[8:])


def test_one_shape_plan_is_kept(decoder: Qwen3Decoder) -> None:
    first = decoder.cache_for(40)
    first.length = 5
    again = decoder.cache_for(40)
    assert again is first and again.length == 0  # same size: reused, fresh state
    other = decoder.cache_for(41)
    assert other is not first and other.k.shape[1] == 41  # new size: the old plan is dropped
    assert decoder._cache is other


def test_cache_overflow_is_refused(decoder: Qwen3Decoder) -> None:
    cache = decoder.cache_for(4)
    with pytest.raises(ValueError, match="exceed the cache plan of 4"):
        decoder.forward(embeds(decoder, 5), cache)


def test_greedy_generation(decoder: Qwen3Decoder) -> None:
    x = embeds(decoder, 16, seed=3)
    gen = decoder.generate(x, 6, eos_ids=(), keep_first_logits=True)
    assert len(gen.ids) == 6 and not gen.finished
    assert gen.ids[0] == int(np.argmax(gen.first_logits))
    # the same greedy path, re-derived by full forwards
    ids = list(gen.ids)
    for step in range(1, 6):
        seq = np.concatenate([x, decoder.embed(np.array(ids[:step]))])
        logits = decoder.logits(decoder.hidden_states(seq)[-1])
        assert int(np.argmax(logits)) == ids[step]
    # an end token stops generation and is not returned
    stop = decoder.generate(x, 6, eos_ids=(ids[2],))
    assert stop.finished and stop.ids == ids[:2]
    assert decoder.generate(x, 6, eos_ids=(ids[0],)).ids == []


def test_teacher_forcing(decoder: Qwen3Decoder) -> None:
    x = embeds(decoder, 16, seed=3)
    greedy = decoder.generate(x, 6, eos_ids=()).ids
    # fed its own greedy ids, each step's argmax is the next greedy id
    assert decoder.teacher_forced(x, greedy) == greedy
    # fed other ids, step t's argmax is the full forward's over prompt + forced[:t]
    forced = [(t + 7) % decoder.dims.vocab_size for t in greedy]
    choices = decoder.teacher_forced(x, forced)
    assert len(choices) == len(forced) and choices[0] == greedy[0]
    for step in range(1, len(forced)):
        seq = np.concatenate([x, decoder.embed(np.array(forced[:step]))])
        assert int(np.argmax(decoder.logits(decoder.hidden_states(seq)[-1]))) == choices[step]
    assert decoder.teacher_forced(x, []) == []
    # end ids are masked from the first min_new_tokens choices, as generate masks them
    masked = decoder.generate(x, 6, eos_ids=(greedy[1],), min_new_tokens=3).ids
    choices = decoder.teacher_forced(x, masked, eos_ids=(greedy[1],), min_new_tokens=3)
    assert choices[:3] == masked[:3] and choices[1] != greedy[1]
    assert decoder.teacher_forced(x, masked, eos_ids=(greedy[1],))[1] == greedy[1]


def test_cancellation_between_steps(decoder: Qwen3Decoder) -> None:
    calls = {"n": 0}

    def cancel() -> bool:
        calls["n"] += 1
        return calls["n"] > 2 * decoder.dims.num_layers  # after the prefill and one step

    with pytest.raises(RecognitionCancelled):
        decoder.generate(embeds(decoder, 8), 50, eos_ids=(), cancel=cancel)


def test_bf16_cache_holds_bits_and_changes_nothing(tiny_weights, tiny_config) -> None:
    bf16 = Qwen3Decoder(tiny_weights, tiny_config, bf16_activations=True)
    widened = Qwen3Decoder(tiny_weights, tiny_config, bf16_activations=True)
    widened._bf16_cache = False  # same rounding, float32 cache
    x = embeds(bf16, 12, seed=5) + np.float32(1e-3)  # not all bf16 values
    given = x.copy()
    a = bf16.generate(x, 5, eos_ids=(), keep_first_logits=True)
    assert np.array_equal(x, given), "BF16 rounds in place, but never the caller's embeddings"
    assert not np.array_equal(x, ops.round_bf16(x))
    b = widened.generate(x, 5, eos_ids=(), keep_first_logits=True)
    assert bf16._cache.k.dtype == np.uint16 and widened._cache.k.dtype == np.float32
    assert bf16._cache.k.nbytes * 2 == widened._cache.k.nbytes
    assert a.ids == b.ids and np.array_equal(a.first_logits, b.first_logits)
    assert np.array_equal(bf16.hidden_states(x), widened.hidden_states(x))


def _int8_weights(weights, config) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    """The tensors as INT8 runtime files hold them: Linear weights as codes plus scales, the head
    quantized from the tensor the reference uses as head."""
    out = dict(weights)
    for name in weights:
        if int8_quantized(name, weights[name].shape, config):
            source = config.output_head_name if name == LM_HEAD_NAME else name
            codes, scale = ops.quantize_int8(ops.bf16_to_f32(weights[source]))
            out[name], out[name + SCALE_SUFFIX] = codes, scale
    return out


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8"])
def test_fused_one_token_steps_equal_the_op_path(tiny_weights, tiny_config, precision: str) -> None:
    bf16 = precision == "bf16"
    weights = _int8_weights(tiny_weights, tiny_config) if precision == "int8" else tiny_weights
    fused = Qwen3Decoder(weights, tiny_config, bf16_activations=bf16)
    if fused._fused is None:
        pytest.skip("no compiled kernels: every step runs op by op")
    plain = Qwen3Decoder(weights, tiny_config, bf16_activations=bf16)
    plain._fused = None
    x = embeds(fused, 10, seed=3)
    outs = {}
    for name, dec in (("fused", fused), ("plain", plain)):
        cache = dec.cache_for(20)
        steps = [dec.forward(x, cache)]
        for token in (5, 900, 17, 3000, 42, 7):
            one = dec.embed(np.array([token]))
            given = one.copy()
            steps.append(dec.forward(one, cache))
            assert np.array_equal(one, given), "the step must not write into the caller's embeddings"
        outs[name] = (steps, cache.k[:, : cache.length].copy(), cache.v[:, : cache.length].copy())
    for a, b in zip(outs["fused"][0], outs["plain"][0], strict=True):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    assert np.array_equal(outs["fused"][1], outs["plain"][1]) and np.array_equal(outs["fused"][2], outs["plain"][2])


@st.composite
def _prompt_and_rows(draw: st.DrawFn) -> tuple[int, list[int]]:
    n = draw(st.integers(2, 40))
    rows = draw(st.sets(st.integers(0, n - 1), min_size=1))
    return n, sorted(rows)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=_prompt_and_rows(), seed=st.integers(0, 2**16))
def test_kept_rows_are_the_full_pass_rows(decoder: Qwen3Decoder, case: tuple[int, list[int]], seed: int) -> None:
    # any prompt length and any increasing rows: single, scattered, runs, all, first, last
    n, rows = case
    x = embeds(decoder, n, seed=seed)
    full_cache, kept_cache = decoder.new_cache(n), decoder.new_cache(n)
    full = decoder.forward(x, full_cache)
    kept = decoder.forward(x, kept_cache, rows=rows)
    assert kept.shape == (len(rows), full.shape[1])
    # the last layer's products run on fewer rows (another GEMM row tiling or the GEMV)
    assert rel(kept, full[rows]) < 1e-4
    # every row's keys and values are written as the full pass writes them
    assert kept_cache.length == n
    assert np.array_equal(kept_cache.k, full_cache.k) and np.array_equal(kept_cache.v, full_cache.v)
    assert rel(decoder.hidden_states(x, rows=rows), full[rows]) < 1e-4


@pytest.mark.parametrize("rows", [[], [24], [-1], [3, 3], [5, 2]])
def test_kept_rows_must_be_increasing_indices(decoder: Qwen3Decoder, rows: list[int]) -> None:
    with pytest.raises(ValueError, match="rows must be increasing indices in 0..23"):
        decoder.forward(embeds(decoder, 24), decoder.new_cache(24), rows=rows)


def test_a_prefill_reads_its_last_row_alone(decoder: Qwen3Decoder) -> None:
    x = embeds(decoder, 16, seed=4)
    first = decoder.generate(x, 1, eos_ids=(), keep_first_logits=True).first_logits
    assert first is not None
    assert rel(first, decoder.logits(decoder.hidden_states(x)[-1])) < 1e-4
    assert np.array_equal(first, decoder.logits(decoder.hidden_states(x, rows=[15])[0]))
