"""GPT-2 byte-level alphabet: every byte as one printable character.

vocab.json and merges.txt spell tokens in this alphabet (``"Ġ"`` is the space
byte 0x20), so encoding maps UTF-8 bytes to it and decoding maps back.
"""

from __future__ import annotations


def _byte_to_char() -> list[str]:
    # Printable Latin-1 bytes stand for themselves; the other 68 bytes are
    # shifted to U+0100.. in byte order (the GPT-2 convention).
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = [""] * 256
    shifted = 0
    for byte in range(256):
        if byte in printable:
            chars[byte] = chr(byte)
        else:
            chars[byte] = chr(0x100 + shifted)
            shifted += 1
    return chars


BYTE_TO_CHAR: list[str] = _byte_to_char()
CHAR_TO_BYTE: dict[str, int] = {c: b for b, c in enumerate(BYTE_TO_CHAR)}

# bytes.translate cannot map one byte to a non-Latin-1 char, so encoding goes
# through latin-1 text and a str.translate table.
_LATIN1_TO_BYTE_CHAR = {b: c for b, c in enumerate(BYTE_TO_CHAR)}


def to_byte_chars(text: str) -> str:
    """UTF-8 bytes of ``text`` spelled in the byte-level alphabet."""
    return text.encode("utf-8").decode("latin-1").translate(_LATIN1_TO_BYTE_CHAR)


_BYTE_CHAR_TO_LATIN1 = {ord(c): b for b, c in enumerate(BYTE_TO_CHAR)}


def byte_chars_to_bytes(token: str) -> bytes:
    """Bytes spelled by a byte-level token (every char must be in the alphabet)."""
    return token.translate(_BYTE_CHAR_TO_LATIN1).encode("latin-1")


def tokens_to_bytes(tokens: list[str]) -> list[bytes]:
    """:func:`byte_chars_to_bytes` of many tokens in one translate (load-time speed)."""
    blob = "".join(tokens).translate(_BYTE_CHAR_TO_LATIN1).encode("latin-1")
    out = []
    pos = 0
    for token in tokens:
        end = pos + len(token)
        out.append(blob[pos:end])
        pos = end
    return out
