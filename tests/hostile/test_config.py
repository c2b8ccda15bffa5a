"""Config values that pass as JSON numbers but would break the model are refused.

Each case edits the tiny checkpoint's config.json and loads it; a refusal must come
before anything is built or allocated (the 10^8-layer and 10^9-position cases would
otherwise allocate gigabytes), so the allocation peak of each load is bounded too, and
those cases run in a process of their own under a 1 GiB address-space cap.
"""

from __future__ import annotations

import json
import math
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from onespeech.qwen3 import ConfigError, Qwen3Options, Qwen3Recognizer

PEAK_BYTES = 256 << 20  # far above what the tiny model needs, far below the unbounded cases


def _edit(directory: Path, name: str, edit) -> None:
    path = directory / name
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _text(config: dict) -> dict:
    return config["thinker_config"]["text_config"]


def _load_bounded(directory: Path, options: Qwen3Options | None = None) -> Qwen3Recognizer:
    tracemalloc.start()
    try:
        return Qwen3Recognizer.load(directory, options)
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert peak < PEAK_BYTES, f"loading allocated {peak} bytes before deciding"


# the load and what it allocated, in a process whose address space is capped: a
# regression in the unbounded cases must not allocate gigabytes in the test process
_LOAD_CASE = """
import tracemalloc
from onespeech.qwen3 import Qwen3Options, Qwen3Recognizer
tracemalloc.start()
try:
    with Qwen3Recognizer.load(args["model"], Qwen3Options(threads=1, max_new_tokens=4)) as rec:
        result = {"positions": int(rec.encoder._positions.shape[0])}
        if args["generate"]:
            rec.generate(__import__("numpy").full(8000, 0.01, "float32"))
finally:
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < args["peak"], f"loading allocated {peak} bytes before deciding"
"""


def _load_in_capped_process(run_case, directory: Path, generate: bool = False):
    return run_case(_LOAD_CASE, args={"model": str(directory), "generate": generate, "peak": PEAK_BYTES},
                    memory_mb=1024, timeout_s=120)


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda c: _text(c).update(rms_norm_eps=math.inf), "rms_norm_eps must be a finite number"),
        (lambda c: _text(c).update(rms_norm_eps=1e30), "rms_norm_eps must be a finite number"),
        (lambda c: _text(c).update(rope_theta=1e300), "rope_theta must be a finite number"),
        (lambda c: _text(c).update(rope_theta=0.5), "rope_theta must be a finite number"),
        (lambda c: _text(c).update(num_hidden_layers=10**8), "num_hidden_layers is 100000000 but the checkpoint"),
        (lambda c: c["thinker_config"]["audio_config"].update(encoder_layers=10**8), "encoder_layers is 100000000"),
        (lambda c: c["thinker_config"]["audio_config"].update(max_source_positions=4), "max_source_positions is 4"),
    ],
)
def test_config_values_that_break_the_model_are_refused(run_case, asr_copy, edit, match) -> None:
    _edit(asr_copy, "config.json", edit)
    _load_in_capped_process(run_case, asr_copy).expect_error(ConfigError.__name__, match=match)


def test_end_tokens_outside_the_vocabulary_are_refused(asr_copy) -> None:
    _edit(asr_copy, "generation_config.json", lambda g: g.update(eos_token_id=[151645, 10**9]))
    with pytest.raises(ConfigError, match="outside the vocabulary"):
        _load_bounded(asr_copy)


def test_a_billion_source_positions_allocate_nothing(run_case, asr_copy) -> None:
    # positions restart at every convolution chunk: one chunk's rows are all that is built
    _edit(asr_copy, "config.json", lambda c: c["thinker_config"]["audio_config"].update(max_source_positions=10**9))
    assert _load_in_capped_process(run_case, asr_copy, generate=True).expect_ok() == {"positions": 13}


def test_max_position_embeddings_smaller_than_the_prompt_is_refused(asr_copy) -> None:
    _edit(asr_copy, "config.json", lambda c: _text(c).update(max_position_embeddings=16))
    with _load_bounded(asr_copy, Qwen3Options(threads=1, max_new_tokens=4)) as rec:
        with pytest.raises(ConfigError, match="max_position_embeddings is 16"):
            rec.transcribe(np.full(8000, 0.01, np.float32))
