"""A q8_0 GGUF from CrispASR's f16 GGUF of a Qwen3-ASR checkpoint (benchmark setup only).

    python benchmarks/gguf_q8.py IN-f16.gguf OUT-q8_0.gguf

CrispASR's own re-quantizer (``crispasr-quantize``) is a C++ tool of its source tree
that the PyPI wheel does not ship. This applies its selection rule for the
``qwen3asr`` architecture at q8_0 (2-D tensors named ``*weight*`` without ``norm``
whose rows are a multiple of the 32-value block: every Linear of the audio tower and
the decoder and the token embedding; norms, biases, the conv kernels and the mel
tables keep their types) with the Q8_0 quantizer of the ``gguf`` package (ggml's
reference quantizer: per 32 values, one float16 scale max|x|/127 and 32 rounded
int8). Every metadata field is copied. Needs an interpreter with ``gguf`` (and its
``pyyaml`` and ``tqdm``).
"""

from __future__ import annotations

import sys

import gguf  # type: ignore[import-not-found]
import numpy as np
from gguf.quants import quantize  # type: ignore[import-not-found]

Q8_0 = gguf.GGMLQuantizationType.Q8_0
BLOCK = 32


def eligible(tensor: gguf.ReaderTensor) -> bool:
    name = tensor.name
    return (tensor.data.ndim == 2 and "weight" in name and "norm" not in name and tensor.data.shape[-1] % BLOCK == 0
            and tensor.tensor_type in (gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.F32))


def main(source: str, target: str) -> int:
    reader = gguf.GGUFReader(source)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(target, arch=arch)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # written by GGUFWriter itself
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)
    n_quantized = 0
    for tensor in reader.tensors:
        if eligible(tensor):
            writer.add_tensor(tensor.name, quantize(np.asarray(tensor.data, np.float32), Q8_0), raw_dtype=Q8_0)
            n_quantized += 1
        else:
            writer.add_tensor(tensor.name, np.asarray(tensor.data))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"{target}: {n_quantized} of {len(reader.tensors)} tensors in q8_0")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__.splitlines()[2].strip())
    raise SystemExit(main(sys.argv[1], sys.argv[2]))
