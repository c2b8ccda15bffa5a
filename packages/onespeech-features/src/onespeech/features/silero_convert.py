"""Silero VAD publisher ONNX file -> OneSpeech runtime tensor file.

The publisher file (silero-vad 6.2.3 ``silero_vad.onnx``, opset 16) holds no
initializers: the weights are ``Constant`` nodes inside the ``then_branch`` of the
top-level ``If`` on ``sr == 16000``. This module reads that branch with the
stdlib-level protobuf reader in ``onnx_reader`` (nothing in the file is executed),
checks that its convolutions have the strides, padding and shapes the numpy network
in ``vad`` assumes, and writes the 15 weight tensors with
``onespeech.kernels.tensorfile``. The conversion runs once; ``SileroVad.load`` keeps
the result in the cache and reuses it.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import numpy as np

from onespeech.features.errors import VadModelError
from onespeech.features.onnx_reader import Graph, Node, OnnxFormatError, parse_graph, read_model
from onespeech.features.pcm import SAMPLE_RATE
from onespeech.features.segments import WINDOW_SAMPLES
from onespeech.kernels.tensorfile import write_tensor_file

RUNTIME_FORMAT = "onespeech-silero-vad-16k"
RUNTIME_VERSION = 1

# publisher tensor name -> shape, in network order
TENSOR_SHAPES: dict[str, tuple[int, ...]] = {
    "stft.forward_basis_buffer": (258, 1, 256),  # 129 real rows then 129 imaginary rows
    "encoder.0.reparam_conv.weight": (128, 129, 3),
    "encoder.0.reparam_conv.bias": (128,),
    "encoder.1.reparam_conv.weight": (64, 128, 3),
    "encoder.1.reparam_conv.bias": (64,),
    "encoder.2.reparam_conv.weight": (64, 64, 3),
    "encoder.2.reparam_conv.bias": (64,),
    "encoder.3.reparam_conv.weight": (128, 64, 3),
    "encoder.3.reparam_conv.bias": (128,),
    "decoder.rnn.weight_ih": (512, 128),  # PyTorch LSTMCell gate order i, f, g, o
    "decoder.rnn.weight_hh": (512, 128),
    "decoder.rnn.bias_ih": (512,),
    "decoder.rnn.bias_hh": (512,),
    "decoder.decoder.2.weight": (1, 128, 1),
    "decoder.decoder.2.bias": (1,),
}

# (weight, stride, pads) of the branch's Conv nodes, in graph order
_CONVS = [
    ("stft.forward_basis_buffer", [128], [0, 0]),
    ("encoder.0.reparam_conv.weight", [1], [1, 1]),
    ("encoder.1.reparam_conv.weight", [2], [1, 1]),
    ("encoder.2.reparam_conv.weight", [2], [1, 1]),
    ("encoder.3.reparam_conv.weight", [1], [1, 1]),
    ("decoder.decoder.2.weight", [1], [0, 0]),
]


def is_onnx_file(path: str | os.PathLike[str]) -> bool:
    """True if the file starts like an ONNX ModelProto (field 1, ir_version, varint)."""
    with open(path, "rb") as handle:
        return handle.read(1) == b"\x08"


def read_silero_onnx(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Extract the 16 kHz branch weights of a Silero VAD ONNX file.

    Returns
    -------
    dict of str to ndarray[float32]
        The tensors of ``TENSOR_SHAPES`` with exactly those shapes.

    Raises
    ------
    VadModelError
        The file is not a Silero VAD graph of the expected structure.
    """
    name = os.fspath(path)
    try:
        branch = _sixteen_khz_branch(read_model(Path(path).read_bytes()))
    except OnnxFormatError as error:
        raise VadModelError(f"{name}: not a readable ONNX file ({error})") from error
    constants: dict[str, np.ndarray] = {}
    for node in branch.nodes:
        value = node.attributes.get("value")
        if node.op_type == "Constant" and isinstance(value, tuple):
            constants[value[0]] = value[1]  # (tensor name, array)
    tensors = {}
    for tensor_name, shape in TENSOR_SHAPES.items():
        array = constants.get(tensor_name, branch.initializers.get(tensor_name))
        if array is None:
            raise VadModelError(f"{name}: the 16 kHz branch has no tensor {tensor_name!r}; is this silero_vad.onnx?")
        if array.shape != shape or array.dtype != np.float32:
            raise VadModelError(f"{name}: tensor {tensor_name!r} is {array.dtype}{list(array.shape)}, "
                                f"expected float32{list(shape)}")
        tensors[tensor_name] = np.ascontiguousarray(array)
    _check_structure(name, branch)
    return tensors


def convert_silero_onnx(onnx_path: str | os.PathLike[str], out_path: str | os.PathLike[str]) -> Path:
    """Convert a Silero VAD ONNX file into a runtime tensor file (atomically replaced)."""
    onnx_path, out_path = Path(onnx_path), Path(out_path)
    tensors = read_silero_onnx(onnx_path)
    metadata = {
        "format": RUNTIME_FORMAT,
        "version": RUNTIME_VERSION,
        "source_file": onnx_path.name,
        "source_sha256": sha256_of(onnx_path),
        "sample_rate": SAMPLE_RATE,
        "window_samples": WINDOW_SAMPLES,
        "context_samples": 64,
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    handle, staging = tempfile.mkstemp(prefix=out_path.name + ".", suffix=".partial", dir=out_path.parent)
    os.close(handle)
    try:
        write_tensor_file(staging, tensors, metadata)
        os.replace(staging, out_path)
    except BaseException:
        Path(staging).unlink(missing_ok=True)
        raise
    return out_path


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _sixteen_khz_branch(graph: Graph) -> Graph:
    # top level: Constant(16000) -> Equal(sr, .) -> If(then = 16 kHz, else = 8 kHz)
    rates = {node.outputs[0]: node.attributes.get("value") for node in graph.nodes if node.op_type == "Constant"}
    for node in graph.nodes:
        if node.op_type != "If":
            continue
        condition = _producer(graph, node.inputs[0])
        if condition is None or condition.op_type != "Equal":
            continue
        values = [rates.get(name) for name in condition.inputs]
        if any(isinstance(v, tuple) and v[1].size == 1 and int(v[1].reshape(-1)[0]) == 16000 for v in values):
            branch = node.attributes.get("then_branch")
            if isinstance(branch, bytes):
                return parse_graph(branch)
    raise OnnxFormatError("no If node selecting a 16 kHz branch on sr == 16000")


def _producer(graph: Graph, output: str) -> Node | None:
    return next((node for node in graph.nodes if output in node.outputs), None)


def _check_structure(name: str, branch: Graph) -> None:
    convs = [node for node in branch.nodes if node.op_type == "Conv"]
    if len(convs) != len(_CONVS):
        raise VadModelError(f"{name}: the 16 kHz branch has {len(convs)} Conv nodes, expected {len(_CONVS)}")
    for node, (weight, strides, pads) in zip(convs, _CONVS, strict=True):
        if not node.inputs[1].endswith(weight):
            raise VadModelError(f"{name}: Conv {node.name!r} uses {node.inputs[1]!r}, expected {weight!r}")
        if node.attributes.get("strides") != strides or node.attributes.get("pads") != pads:
            raise VadModelError(f"{name}: Conv on {weight!r} has strides {node.attributes.get('strides')} and "
                                f"pads {node.attributes.get('pads')}, expected {strides} and {pads}")
    pad_nodes = [node for node in branch.nodes if node.op_type == "Pad"]
    if len(pad_nodes) != 1 or pad_nodes[0].attributes.get("mode") != b"reflect":
        raise VadModelError(f"{name}: expected one reflect Pad before the STFT")
