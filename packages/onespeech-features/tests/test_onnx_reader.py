import struct

import numpy as np
import pytest

from onespeech.features.onnx_reader import OnnxFormatError, parse_tensor, read_model


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:  # length-delimited
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _int_field(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _tensor(name: str, dims: list[int], data_type: int, raw: bytes) -> bytes:
    packed_dims = b"".join(_varint(d) for d in dims)
    return _field(1, packed_dims) + _int_field(2, data_type) + _field(8, name.encode()) + _field(9, raw)


def test_float_tensor_with_raw_data() -> None:
    values = np.arange(6, dtype="<f4")
    name, array = parse_tensor(_tensor("w", [2, 3], 1, values.tobytes()))
    assert name == "w" and array.dtype == np.float32
    np.testing.assert_array_equal(array, values.reshape(2, 3))


def test_int64_scalar_and_typed_negative_values() -> None:
    name, array = parse_tensor(_tensor("k", [], 7, struct.pack("<q", -64)))
    assert array.shape == () and int(array) == -64
    typed = _int_field(2, 7) + _field(7, _varint(-5) + _varint(3)) + _field(1, _varint(2))
    assert parse_tensor(typed)[1].tolist() == [-5, 3]


def test_model_graph_node_and_attributes() -> None:
    tensor = _tensor("c", [1], 7, struct.pack("<q", 16000))
    attribute_t = _field(1, b"value") + _field(5, tensor)
    attribute_ints = _field(1, b"strides") + _field(8, _varint(128))
    node = _field(2, b"out") + _field(4, b"Constant") + _field(5, attribute_t) + _field(5, attribute_ints)
    model = _int_field(1, 8) + _field(7, _field(1, node))
    graph = read_model(model)
    [parsed] = graph.nodes
    assert parsed.op_type == "Constant" and parsed.outputs == ["out"]
    assert parsed.attributes["strides"] == [128]
    tensor_name, value = parsed.attributes["value"]
    assert tensor_name == "c" and value.tolist() == [16000]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (_field(7, b"\x0a\x05ab"), "past the end"),  # a node field longer than its graph
        (b"\x3a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", "varint"),
        (_int_field(1, 8) + b"\x3b", "wire type"),  # wire type 3 (groups) is refused
    ],
)
def test_malformed_bytes_raise(data: bytes, message: str) -> None:
    with pytest.raises(OnnxFormatError, match=message):
        read_model(data)


def test_raw_data_of_the_wrong_size_is_refused() -> None:
    with pytest.raises(OnnxFormatError, match="needs 24"):
        parse_tensor(_tensor("w", [2, 3], 1, b"\x00" * 20))


def test_unsupported_data_type_is_refused() -> None:
    with pytest.raises(OnnxFormatError, match="data type 16"):
        parse_tensor(_tensor("w", [1], 16, b"\x00\x00"))
