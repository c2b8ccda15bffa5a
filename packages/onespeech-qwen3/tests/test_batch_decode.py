"""Batched decoding (`Qwen3Recognizer.recognize_batch`, `generate_batch`) equals decoding alone, bit for bit.

A tiny seeded checkpoint whose answers end (``end_scale``) decodes chunks of
different lengths that finish at different steps (end tokens early and late, the
token budget); every chunk's ids, ``finished`` and the logits of every choice
must be the bits that decoding it alone gives, in FP32, BF16 and INT8, on the
best kernel variant and on the generic one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from onespeech.features import PcmTooShortError
from onespeech.kernels import cpu, ops
from onespeech.kernels.threads import thread_limit
from onespeech.qwen3.batch_decode import BatchDecoder, BatchLimits, generate_batch
from onespeech.qwen3.decoder import Qwen3Decoder
from onespeech.qwen3.recognizer import ChunkRecognition, Qwen3Recognizer

SR = 16000
END_SCALE = 0.15  # answers of these tones end after 0 to 35 ids, some only at the budget
LIMIT = 40
# (seconds, seed): prompts of 17 to 57 positions
CHUNKS = [(2.0, 4), (2.2, 5), (2.8, 6), (0.7, 11), (1.1, 12), (3.6, 8), (2.6, 14)]
BEST = cpu.select_variant()
VARIANTS = sorted({getattr(BEST, "VARIANT", None), "generic"} - {None})


def tone(seconds: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SR)) / SR
    return (0.3 * np.sin(2 * np.pi * (180 + 40 * seed) * t) + 0.05 * rng.standard_normal(t.size)).astype(np.float32)


@pytest.fixture(scope="module")
def ending_checkpoint(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from onespeech_tools.checkpoints import make_checkpoint

    return make_checkpoint(tmp_path_factory.mktemp("ending"), "tiny", seed=0, data_dir=shared_data,
                           end_scale=END_SCALE)


@pytest.fixture(params=VARIANTS)
def variant(request, monkeypatch) -> str:
    """The kernel variant every op (and the decoder's fused layers, built at load) runs."""
    module = cpu.load_variant(request.param)
    if module is None:
        pytest.skip(f"the {request.param} kernels are not built here")
    monkeypatch.setattr(ops, "_kernels", module)
    return request.param


def _bits(a: np.ndarray | None) -> np.ndarray | None:
    return None if a is None else np.ascontiguousarray(a).view(np.uint32)


def _alone(rec: Qwen3Recognizer, pcm: np.ndarray) -> tuple[ChunkRecognition, tuple[np.ndarray, ...]]:
    """The current one-chunk path, and every choice's logits of the same greedy decoding."""
    with thread_limit(rec.options.threads):
        result = rec.recognize(pcm, None, LIMIT, keep_first_logits=True)
        embeds = rec.decoder.embed(result.prompt.ids)
        p = result.prompt
        embeds[p.audio_start : p.audio_start + p.n_audio] = result.audio_embeds
        again = rec.decoder.generate(embeds, LIMIT, rec.config.eos_token_ids, keep_logits=True)
    assert again.ids == result.generation.ids
    assert again.logits is not None
    return result, again.logits


def _assert_same(batch: ChunkRecognition, alone: ChunkRecognition, logits: tuple[np.ndarray, ...]) -> None:
    got, want = batch.generation, alone.generation
    assert got.ids == want.ids and got.finished == want.finished
    assert np.array_equal(_bits(got.first_logits), _bits(want.first_logits))
    assert got.logits is not None and len(got.logits) == len(logits) == len(want.ids) + want.finished
    for step, (a, b) in enumerate(zip(got.logits, logits, strict=True)):
        assert np.array_equal(_bits(a), _bits(b)), f"logits of choice {step}"
    assert np.array_equal(batch.audio_embeds, alone.audio_embeds)
    assert np.array_equal(batch.prompt.ids, alone.prompt.ids) and batch.prompt.audio_start == alone.prompt.audio_start


@pytest.fixture()
def step_sizes(monkeypatch) -> list[int]:
    """The number of sequences of every batched decode step."""
    sizes: list[int] = []
    original = Qwen3Decoder.step_batch

    def spy(self, tokens, caches, cancel=None):
        sizes.append(len(tokens))
        return original(self, tokens, caches, cancel)

    monkeypatch.setattr(Qwen3Decoder, "step_batch", spy)
    return sizes


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8"])
def test_batch_equals_each_chunk_alone(ending_checkpoint, variant, precision, step_sizes) -> None:
    pcms = [tone(*c) for c in CHUNKS]
    # two threads split every product on the best variant; the generic one (slow) runs on one
    threads = 1 if variant == "generic" else 2
    with Qwen3Recognizer.load(ending_checkpoint, precision=precision, threads=threads, max_new_tokens=LIMIT) as rec:
        alone = [_alone(rec, pcm) for pcm in pcms]
        step_sizes.clear()
        batch = rec.recognize_batch(pcms, keep_first_logits=True, keep_logits=True)
    for b, (a, logits) in zip(batch, alone, strict=True):
        _assert_same(b, a, logits)
    ends = {(len(a.generation.ids), a.generation.finished) for a, _ in alone}
    assert len(ends) >= 4, f"the chunks should finish at different steps, got {ends}"
    assert any(a.generation.finished for a, _ in alone)
    # really decoded together, and the batch shrank as chunks finished
    assert max(step_sizes) >= 3 and min(step_sizes) < max(step_sizes)


def test_batch_of_one_is_the_current_path(ending_checkpoint, step_sizes) -> None:
    pcm = tone(*CHUNKS[2])
    with Qwen3Recognizer.load(ending_checkpoint, precision="fp32", threads=1, max_new_tokens=LIMIT) as rec:
        alone, logits = _alone(rec, pcm)
        [batch] = rec.recognize_batch([pcm], keep_first_logits=True, keep_logits=True)
    _assert_same(batch, alone, logits)
    assert set(step_sizes) == {1}


def test_the_memory_budget_splits_the_batch(ending_checkpoint, step_sizes) -> None:
    pcms = [tone(*c) for c in CHUNKS]
    with Qwen3Recognizer.load(ending_checkpoint, precision="bf16", threads=1, max_new_tokens=LIMIT) as rec:
        together = rec.recognize_batch(pcms, keep_logits=True)
        # room for two of the longest chunks' caches: the others wait until one finishes
        longest = max(len(r.prompt.ids) for r in together) + LIMIT
        budget = 2 * rec.decoder.kv_bytes(longest)
        step_sizes.clear()
        split = rec.recognize_batch(pcms, keep_logits=True, limits=BatchLimits(kv_budget_bytes=budget))
        assert max(step_sizes) == 2
        step_sizes.clear()
        one = rec.recognize_batch(pcms, keep_logits=True, limits=BatchLimits(kv_budget_bytes=1))
        assert set(step_sizes) == {1}  # one sequence always runs, even over the budget
        step_sizes.clear()
        capped = rec.recognize_batch(pcms, keep_logits=True, limits=BatchLimits(max_batch=3))
        assert max(step_sizes) == 3
    for results in (split, one, capped):
        for a, b in zip(results, together, strict=True):
            assert a.generation.ids == b.generation.ids and a.generation.finished == b.generation.finished
            assert all(np.array_equal(_bits(x), _bits(y)) for x, y in zip(a.generation.logits, b.generation.logits,
                                                                          strict=True))


def test_the_auto_budget_is_a_quarter_of_the_weights_the_recognizer_reads(ending_checkpoint) -> None:
    from onespeech.qwen3.config import LM_HEAD_NAME

    read = {}
    for precision in ("fp32", "bf16", "int8"):
        with Qwen3Recognizer.load(ending_checkpoint, precision=precision, threads=1, max_new_tokens=LIMIT) as rec:
            model = rec._model
            assert rec.config.text.tie_word_embeddings and LM_HEAD_NAME in model
            every = sum(model[n].nbytes for n in model)
            if precision == "int8":  # the head is the head file's int8 codes, read beside the embedding's lookups
                assert rec.weight_bytes == every
            else:  # the head is the tied embedding: the head file's copy is never read
                assert rec.weight_bytes == every - model[LM_HEAD_NAME].nbytes
                untied = Qwen3Decoder(model, rec.config, head=LM_HEAD_NAME)
                assert untied.weight_bytes == rec.decoder.weight_bytes + model[LM_HEAD_NAME].nbytes
            assert rec.weight_bytes == rec.encoder.weight_bytes + rec.decoder.weight_bytes
            assert 0 < rec.encoder.weight_bytes < rec.decoder.weight_bytes
            assert rec.batch_decoder().limits == BatchLimits(kv_budget_bytes=rec.weight_bytes // 4, max_batch=8)
            assert rec.batch_decoder(BatchLimits(max_batch=3)).limits.kv_budget_bytes == rec.weight_bytes // 4
            assert rec.batch_decoder(BatchLimits(kv_budget_bytes=5)).limits.kv_budget_bytes == 5  # as given
            # a batch over the bare decoder takes a quarter of the decoder's own weights
            bare = BatchDecoder(rec.decoder, rec.config.eos_token_ids)
            assert bare.limits.kv_budget_bytes == rec.decoder.weight_bytes // 4
            read[precision] = rec.weight_bytes
    # bfloat16 halves every tensor; INT8 reads int8 codes with float32 row scales, and its head is a
    # copy of its own beside the bf16 embedding (at this tiny width the embedding is most of the bytes)
    assert read["fp32"] == 2 * read["bf16"] and read["int8"] < read["fp32"]


def test_the_auto_budget_splits_the_batch_as_an_explicit_one_does(ending_checkpoint, step_sizes,
                                                                   monkeypatch) -> None:
    pcms = [tone(*c) for c in CHUNKS]
    with Qwen3Recognizer.load(ending_checkpoint, precision="int8", threads=1, max_new_tokens=LIMIT) as rec:
        together = rec.recognize_batch(pcms, keep_logits=True, limits=BatchLimits(kv_budget_bytes=1 << 40))
        longest = max(len(r.prompt.ids) for r in together) + LIMIT
        # weights whose quarter holds the caches of two of the longest chunks, then of none
        for weights, most in ((8 * rec.decoder.kv_bytes(longest), 2), (0, 1)):
            monkeypatch.setattr(Qwen3Recognizer, "weight_bytes", property(lambda self, w=weights: w))
            step_sizes.clear()
            split = rec.recognize_batch(pcms, keep_logits=True)
            assert max(step_sizes) == most  # one chunk always decodes, whatever the budget
            for a, b in zip(split, together, strict=True):
                assert a.generation.ids == b.generation.ids and a.generation.finished == b.generation.finished
                assert all(np.array_equal(_bits(x), _bits(y))
                           for x, y in zip(a.generation.logits, b.generation.logits, strict=True))


def test_generate_batch_without_compiled_kernels_runs_each_alone(tiny_weights, tiny_config, monkeypatch) -> None:
    monkeypatch.setattr(ops, "_kernels", None)
    decoder = Qwen3Decoder(tiny_weights, tiny_config)
    rng = np.random.default_rng(0)
    prompts = [decoder.embed(rng.integers(0, 151000, n)) for n in (5, 9, 3)]
    eos = tiny_config.eos_token_ids
    want = [decoder.generate(p, 4, eos, keep_logits=True) for p in prompts]
    got = generate_batch(decoder, prompts, 4, eos, keep_logits=True)
    for a, b in zip(got, want, strict=True):
        assert a.ids == b.ids and a.finished == b.finished
        assert all(np.array_equal(_bits(x), _bits(y)) for x, y in zip(a.logits, b.logits, strict=True))


def test_bad_chunks_and_limits_are_refused(ending_checkpoint) -> None:
    for value in (0, -1, True, 2.0, "auto"):
        with pytest.raises(ValueError, match=rf"^kv_budget_bytes={value!r} is invalid; expected an int >= 1 or "
                                             r"None \(auto\)$"):
            BatchLimits(kv_budget_bytes=value)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^max_batch=True is invalid; expected an int >= 1$"):
        BatchLimits(max_batch=True)
    with pytest.raises(ValueError, match=r"^max_batch=None is invalid"):
        BatchLimits(max_batch=None)  # type: ignore[arg-type]
    assert BatchLimits().kv_budget_bytes is None and BatchLimits().kv_budget(10) == 2 == BatchLimits().kv_budget(11)
    assert BatchLimits().kv_budget(0) == 1  # never 0: the one chunk that always runs is within any budget
    with pytest.raises(ValueError, match=r"^weight_bytes=-1 is invalid"):
        BatchLimits().kv_budget(-1)
    with Qwen3Recognizer.load(ending_checkpoint, precision="fp32", threads=1, max_new_tokens=LIMIT) as rec:
        with pytest.raises(PcmTooShortError):
            rec.recognize_batch([tone(1.0, 0), np.zeros(0, np.float32)])
        with pytest.raises(ValueError, match="max_new_tokens=0"):
            rec.recognize_batch([tone(1.0, 0)], max_new_tokens=0)
        assert rec.recognize_batch([]) == []
        with pytest.raises(ValueError, match="one cache was given twice"):
            cache = rec.decoder.new_cache(4)
            rec.decoder.step_batch([1, 2], [cache, cache])


def _prompts(rec: Qwen3Recognizer) -> list[np.ndarray]:
    return [rec.chunk_prompt(tone(*c)) for c in CHUNKS]


def _generations_alone(rec: Qwen3Recognizer, prompts: list[np.ndarray]) -> list:  # type: ignore[type-arg]
    with thread_limit(rec.options.threads):
        return [rec.decoder.generate(p, LIMIT, rec.config.eos_token_ids, keep_logits=True) for p in prompts]


def _assert_generation(got, want) -> None:  # type: ignore[no-untyped-def]
    assert got.ids == want.ids and got.finished == want.finished
    assert all(np.array_equal(_bits(x), _bits(y)) for x, y in zip(got.logits, want.logits, strict=True))


def test_sequences_join_a_running_batch_and_leave_it(ending_checkpoint) -> None:
    with Qwen3Recognizer.load(ending_checkpoint, precision="fp32", threads=1, max_new_tokens=LIMIT) as rec:
        prompts = _prompts(rec)
        want = _generations_alone(rec, prompts)
        batch = rec.batch_decoder(BatchLimits(max_batch=3))
        sequences = []
        with thread_limit(1):
            for i, p in enumerate(prompts):
                while (seq := batch.join(p, LIMIT, key=i, keep_logits=True)) is None:
                    before = len(batch)
                    left = batch.step()
                    assert len(batch) == before - len(left)  # the ones that ended left at this step
                sequences.append(seq)
                batch.step()  # every new sequence joins a batch that has already run
            while len(batch):
                batch.step()
        assert batch.steps > 0 and batch.shared_steps == 0  # one owner
        for seq, w in zip(sequences, want, strict=True):
            _assert_generation(seq.result(), w)
            assert seq.cache.capacity == 0  # the cache was dropped when it left


def test_a_cancelled_sequence_leaves_and_the_others_continue(ending_checkpoint) -> None:
    import threading

    from onespeech.qwen3 import RecognitionCancelledError

    with Qwen3Recognizer.load(ending_checkpoint, precision="fp32", threads=1, max_new_tokens=LIMIT) as rec:
        prompts = _prompts(rec)[:3]
        want = _generations_alone(rec, prompts)
        batch = rec.batch_decoder()
        stop = threading.Event()
        with thread_limit(1):
            seqs = [batch.join(p, LIMIT, keep_logits=True, cancel=stop if i == 1 else None)
                    for i, p in enumerate(prompts)]
            assert all(s is not None and not s.done for s in seqs)
            batch.step()
            stop.set()
            left = batch.step()
            assert seqs[1] in left and isinstance(seqs[1].error, RecognitionCancelledError)
            with pytest.raises(RecognitionCancelledError):
                seqs[1].result()
            while len(batch):
                batch.step()
    _assert_generation(seqs[0].result(), want[0])
    _assert_generation(seqs[2].result(), want[2])


def test_threads_share_one_batch_and_each_gets_its_own_bits(ending_checkpoint) -> None:
    import threading

    with Qwen3Recognizer.load(ending_checkpoint, precision="fp32", threads=1, max_new_tokens=LIMIT) as rec:
        prompts = _prompts(rec)
        want = _generations_alone(rec, prompts)
        batch = rec.batch_decoder(BatchLimits(max_batch=4))
        got: dict[int, object] = {}
        errors: list[BaseException] = []

        def run(indices: list[int]) -> None:
            # each caller joins its own sequences (stepping while the batch is full), then steps until they end
            try:
                with thread_limit(1):
                    mine = []
                    for i in indices:
                        while (seq := batch.join(prompts[i], LIMIT, key=i, owner=indices, keep_logits=True)) is None:
                            batch.step()
                        mine.append(seq)
                    while not all(s.done for s in mine):
                        batch.step()
                    got.update({s.key: s.result() for s in mine})
            except BaseException as error:  # noqa: BLE001 - reported by the test below
                errors.append(error)

        threads = [threading.Thread(target=run, args=(idx,)) for idx in ([0, 2, 4, 6], [1, 3, 5])]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
    assert not errors
    for i, w in enumerate(want):
        _assert_generation(got[i], w)
    assert batch.shared_steps > 0, "the two callers never decoded in one step"


def test_a_prefill_decoder_of_another_precision_is_refused(ending_checkpoint) -> None:
    with Qwen3Recognizer.load(ending_checkpoint, precision="fp32", threads=1, max_new_tokens=LIMIT) as rec, \
            Qwen3Recognizer.load(ending_checkpoint, precision="bf16", threads=1, max_new_tokens=LIMIT) as other:
        batch = rec.batch_decoder()
        with pytest.raises(ValueError, match="another model or precision"):
            batch.join(other.chunk_prompt(tone(1.0, 0)), LIMIT, decoder=other.decoder)
        with pytest.raises(ValueError, match="max_new_tokens=0"):
            batch.join(rec.chunk_prompt(tone(1.0, 0)), 0)
        assert len(batch) == 0
