"""A minimal ONNX reader: protobuf wire format to nodes, attributes and tensors.

Only what the Silero VAD converter needs: a model's graph, its nodes (op type,
inputs, outputs, attributes), subgraphs held in attributes (``If`` branches) and
constant tensors (float32 / int64, raw or typed data). It decodes bytes and
nothing else: no code from the file is run, no onnx package is needed.
Field numbers are those of onnx/onnx.proto (IR version 8).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from onespeech.features.errors import OnnxFormatError

# onnx.proto field numbers
_MODEL_GRAPH = 7
_GRAPH_NODE, _GRAPH_INITIALIZER = 1, 5
_NODE_INPUT, _NODE_OUTPUT, _NODE_NAME, _NODE_OP_TYPE, _NODE_ATTRIBUTE = 1, 2, 3, 4, 5
_ATTR_NAME, _ATTR_F, _ATTR_I, _ATTR_S, _ATTR_T, _ATTR_G, _ATTR_FLOATS, _ATTR_INTS = 1, 2, 3, 4, 5, 6, 7, 8
_TENSOR_DIMS, _TENSOR_DATA_TYPE, _TENSOR_FLOAT_DATA, _TENSOR_INT64_DATA = 1, 2, 4, 7
_TENSOR_NAME, _TENSOR_RAW_DATA, _TENSOR_DATA_LOCATION = 8, 9, 14
_ONNX_DTYPES: dict[int, np.dtype[Any]] = {1: np.dtype("<f4"), 6: np.dtype("<i4"), 7: np.dtype("<i8"), 9: np.dtype("?"), 11: np.dtype("<f8")}

_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5


@dataclass
class Node:
    op_type: str
    name: str
    inputs: list[str]
    outputs: list[str]
    attributes: dict[str, object] = field(default_factory=dict)


@dataclass
class Graph:
    nodes: list[Node]
    initializers: dict[str, np.ndarray]


def read_model(data: bytes) -> Graph:
    """Parse a serialized ``ModelProto`` and return its main graph."""
    graphs = [value for number, _, value in _fields(data) if number == _MODEL_GRAPH]
    if len(graphs) != 1:
        raise OnnxFormatError(f"expected one graph in the model, found {len(graphs)}")
    return parse_graph(graphs[0])


def parse_graph(data: bytes) -> Graph:
    nodes: list[Node] = []
    initializers: dict[str, np.ndarray] = {}
    for number, _, value in _fields(data):
        if number == _GRAPH_NODE:
            nodes.append(_parse_node(value))
        elif number == _GRAPH_INITIALIZER:
            name, array = parse_tensor(value)
            initializers[name] = array
    return Graph(nodes, initializers)


def parse_tensor(data: bytes) -> tuple[str, np.ndarray]:
    """Decode a ``TensorProto`` into (name, array)."""
    dims: list[int] = []
    data_type = 0
    name = ""
    raw: bytes | None = None
    floats: list[float] = []
    int64s: list[int] = []
    for number, wire, value in _fields(data):
        if number == _TENSOR_DIMS:
            dims.extend(_packed_varints(value) if wire == _LENGTH_DELIMITED else [_signed64(value)])
        elif number == _TENSOR_DATA_TYPE:
            data_type = value
        elif number == _TENSOR_NAME:
            name = value.decode("utf-8")
        elif number == _TENSOR_RAW_DATA:
            raw = value
        elif number == _TENSOR_FLOAT_DATA:
            floats.extend(_packed_floats(value) if wire == _LENGTH_DELIMITED else [struct.unpack("<f", value)[0]])
        elif number == _TENSOR_INT64_DATA:
            int64s.extend(_packed_varints(value) if wire == _LENGTH_DELIMITED else [_signed64(value)])
        elif number == _TENSOR_DATA_LOCATION and value != 0:
            raise OnnxFormatError(f"tensor {name!r} keeps its data in an external file, which is not read")
    dtype = _ONNX_DTYPES.get(data_type)
    if dtype is None:
        raise OnnxFormatError(f"tensor {name!r} has ONNX data type {data_type}, which is not supported")
    count = int(np.prod(dims)) if dims else 1
    if raw is not None:
        if len(raw) != count * dtype.itemsize:
            raise OnnxFormatError(f"tensor {name!r} has {len(raw)} bytes of data; shape {dims} needs "
                                  f"{count * dtype.itemsize}")
        array = np.frombuffer(raw, dtype=dtype).copy()
    elif dtype.kind == "f" and dtype.itemsize == 4:
        array = np.asarray(floats, dtype=dtype)
    elif dtype.kind == "i" and dtype.itemsize == 8:
        array = np.asarray(int64s, dtype=dtype)
    else:
        raise OnnxFormatError(f"tensor {name!r}: typed data of ONNX type {data_type} is not supported")
    if array.size != count:
        raise OnnxFormatError(f"tensor {name!r} has {array.size} values; shape {dims} needs {count}")
    return name, array.reshape(dims)


def _parse_node(data: bytes) -> Node:
    node = Node(op_type="", name="", inputs=[], outputs=[])
    for number, _, value in _fields(data):
        if number == _NODE_INPUT:
            node.inputs.append(value.decode("utf-8"))
        elif number == _NODE_OUTPUT:
            node.outputs.append(value.decode("utf-8"))
        elif number == _NODE_NAME:
            node.name = value.decode("utf-8")
        elif number == _NODE_OP_TYPE:
            node.op_type = value.decode("utf-8")
        elif number == _NODE_ATTRIBUTE:
            name, attribute = _parse_attribute(value)
            node.attributes[name] = attribute
    return node


def _parse_attribute(data: bytes) -> tuple[str, object]:
    name = ""
    value: object = None
    ints: list[int] = []
    floats: list[float] = []
    for number, wire, raw in _fields(data):
        if number == _ATTR_NAME:
            name = raw.decode("utf-8")
        elif number == _ATTR_F:
            value = struct.unpack("<f", raw)[0]
        elif number == _ATTR_I:
            value = _signed64(raw)
        elif number == _ATTR_S:
            value = bytes(raw)
        elif number == _ATTR_T:
            value = parse_tensor(raw)  # (tensor name, array)
        elif number == _ATTR_G:
            value = raw  # a subgraph, parsed on demand with parse_graph
        elif number == _ATTR_INTS:
            ints.extend(_packed_varints(raw) if wire == _LENGTH_DELIMITED else [_signed64(raw)])
        elif number == _ATTR_FLOATS:
            floats.extend(_packed_floats(raw) if wire == _LENGTH_DELIMITED else [struct.unpack("<f", raw)[0]])
    if ints:
        value = ints
    elif floats:
        value = floats
    return name, value


def _fields(data: bytes) -> Iterator[tuple[int, int, Any]]:  # the value's type follows the wire type
    """Yield (field number, wire type, value) of one protobuf message.

    Varints come back as int, fixed32/fixed64 as 4/8 bytes, length-delimited as bytes.
    """
    view = memoryview(data)
    pos, end = 0, len(view)
    while pos < end:
        key, pos = _varint(view, pos)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            value, pos = _varint(view, pos)
            yield number, wire, value
        elif wire in (_FIXED64, _FIXED32):
            size = 8 if wire == _FIXED64 else 4
            if pos + size > end:
                raise OnnxFormatError("protobuf field runs past the end of its message")
            yield number, wire, bytes(view[pos : pos + size])
            pos += size
        elif wire == _LENGTH_DELIMITED:
            size, pos = _varint(view, pos)
            if pos + size > end:
                raise OnnxFormatError("protobuf field runs past the end of its message")
            yield number, wire, bytes(view[pos : pos + size])
            pos += size
        else:
            raise OnnxFormatError(f"protobuf wire type {wire} (field {number}) is not valid here")


def _varint(view: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(view) or shift > 63:
            raise OnnxFormatError("truncated or overlong protobuf varint")
        byte = view[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return result, pos


def _signed64(value: object) -> int:
    if isinstance(value, bytes):  # fixed64
        return struct.unpack("<q", value)[0]
    number = int(value)  # type: ignore[call-overload]
    return number - (1 << 64) if number >= 1 << 63 else number


def _packed_varints(data: bytes) -> list[int]:
    view = memoryview(data)
    out, pos = [], 0
    while pos < len(view):
        value, pos = _varint(view, pos)
        out.append(_signed64(value))
    return out


def _packed_floats(data: bytes) -> list[float]:
    if len(data) % 4:
        raise OnnxFormatError("packed float field length is not a multiple of 4")
    return np.frombuffer(data, dtype="<f4").tolist()
