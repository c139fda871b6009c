"""The draft server's wire format: msgpack messages, token lists as little-endian int32 bytes.

A request is ``[call_id, method, args]``; a reply ``[call_id, server_id, ok, result]``.
"""

from __future__ import annotations

import sys
from array import array
from typing import Sequence

import msgspec

encode = msgspec.msgpack.Encoder().encode
decode = msgspec.msgpack.Decoder().decode


def pack_tokens(tokens: Sequence[int]) -> bytes:
    a = tokens if isinstance(tokens, array) and tokens.typecode == "i" else array("i", tokens)
    if sys.byteorder != "little":
        a = array("i", a)
        a.byteswap()
    return a.tobytes()


def unpack_tokens(data: bytes) -> array:
    a = array("i")
    a.frombytes(data)
    if sys.byteorder != "little":
        a.byteswap()
    return a
