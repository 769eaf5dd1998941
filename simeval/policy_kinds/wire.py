"""openpi's wire format: msgpack with NumPy arrays, read as data (both sides of a remote policy).

A message is one msgpack map. An array travels as openpi's ``msgpack_numpy`` writes it: a map
``{b"__ndarray__": True, b"data": <raw bytes>, b"dtype": <numpy dtype string>, b"shape": [...]}``
(a NumPy scalar as ``{b"__npgeneric__": True, b"data": <value>, b"dtype": ...}``), so openpi's own
client and servers read what simeval writes and the reverse.

Reading is bounded and inert: the caller caps a message's bytes before it is decoded (the
WebSocket's ``max_size``); before msgpack builds anything, one pass over the bytes (:func:`check`)
refuses what the protocol never needs, so that no message costs more than a few times its size
to decode (an empty map is one byte on the wire and 64 in memory): containers nested deeper than
:data:`MAX_DEPTH`, a map of more than :data:`MAX_MAP_LEN` entries, an array of more than
:data:`MAX_ARRAY_LEN` items, more than :data:`MAX_ITEMS` objects in all, a string over
:data:`MAX_STR_LEN` bytes or more than :data:`MAX_TEXT` bytes of strings, extension types, and
lengths past the message's end. Byte strings (an array's data, a camera image) are bounded by
the message's size alone. Only boolean, integer and floating dtypes are rebuilt (never object,
void or complex ones, which openpi's writer refuses too), and an array's bytes must be exactly
its shape times its item size. Anything else is a :class:`WireError` in one line.
"""

from __future__ import annotations

from typing import Any

TOKEN_ENV = "SIMEVAL_POLICY_SERVER_TOKEN"  # noqa: S105 - a variable's name, not a token: Api-Key <its value>
DEFAULT_MAX_MESSAGE_BYTES = 16 * 2**20  # 16 MiB: a 224x224x3 image is 150 KiB; a state vector is bytes
# simeval's client tags each request of one policy call (a worker's step) with the call's id and its request count,
# so that serve_policy answers a step in one forward pass (serve_policy.batching); openpi's servers ignore the keys.
STEP_KEY = "simeval/step"
STEP_REQUESTS_KEY = "simeval/step_requests"
_KINDS = frozenset("biuf")  # bool, signed, unsigned, floating

# What the protocol needs: a message is a map of a few dozen keys; an array is a map of 4 keys holding its shape (a
# list of at most 8 sizes): 3 levels; metadata nests a map or two more. A prompt is a sentence, a dtype 3 characters.
MAX_DEPTH = 8  # containers nested
MAX_MAP_LEN = 128  # entries in one map
MAX_ARRAY_LEN = 4096  # items in one array
MAX_ITEMS = 16384  # objects in one message, keys included
MAX_STR_LEN = 2**16  # bytes of one string
MAX_TEXT = 2**20  # bytes of all strings of one message


class WireError(ValueError):
    """A message that is not openpi's msgpack format, or holds what simeval does not rebuild."""


def _pack(obj: Any) -> Any:
    import numpy as np

    if isinstance(obj, (np.ndarray, np.generic)) and obj.dtype.kind not in _KINDS:
        raise WireError(f"cannot send an array of dtype {obj.dtype}: bool, integer or float only.")
    if isinstance(obj, np.ndarray):
        obj = np.ascontiguousarray(obj)
        return {b"__ndarray__": True, b"data": obj.tobytes(), b"dtype": obj.dtype.str, b"shape": list(obj.shape)}
    if isinstance(obj, np.generic):
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise WireError(f"cannot send a {type(obj).__name__}: numbers, text, arrays, lists and maps only.")


def _dtype(raw: Any) -> Any:
    import numpy as np

    if isinstance(raw, bytes):
        raw = raw.decode("ascii", "replace")
    if not isinstance(raw, str) or len(raw) > 8:
        raise WireError(f"an array's dtype must be a short numpy dtype string, got {raw!r:.40}.")
    try:
        dtype = np.dtype(raw)
    except TypeError:
        raise WireError(f"unknown array dtype {raw!r}.") from None
    if dtype.kind not in _KINDS:
        raise WireError(f"arrays of dtype {dtype} are refused: bool, integer or float only.")
    return dtype


def _unpack(obj: dict) -> Any:
    import numpy as np

    if b"__ndarray__" in obj:
        dtype, data, shape = _dtype(obj.get(b"dtype")), obj.get(b"data"), obj.get(b"shape")
        if not isinstance(data, bytes):
            raise WireError("an array's data must be bytes.")
        if not isinstance(shape, (list, tuple)) or len(shape) > 8:
            raise WireError(f"an array's shape must be a list of at most 8 sizes, got {shape!r:.40}.")
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
            raise WireError(f"an array's shape must hold sizes >= 0, got {shape!r:.40}.")
        count = 1
        for n in shape:
            count *= n
        if count * dtype.itemsize != len(data):
            raise WireError(
                f"an array of shape {list(shape)} and dtype {dtype} needs {count * dtype.itemsize} bytes, "
                f"got {len(data)}."
            )
        return np.frombuffer(data, dtype=dtype).reshape(shape)
    if b"__npgeneric__" in obj:
        value = obj.get(b"data")
        if isinstance(value, (dict, list, bytes, str)) or value is None:
            raise WireError("a scalar's data must be a number.")
        return _dtype(obj.get(b"dtype")).type(value)
    return obj


_SCALAR, _MAP, _ARRAY, _STR, _BIN, _EXT, _UNUSED = range(7)


def _table() -> list[tuple[int, int, int]]:
    """Each first byte of a msgpack object -> (kind, its length or the width of its length field, fixed: 1/0)."""
    table = [(_SCALAR, 0, 1)] * 256  # fixints (0x00-0x7f, 0xe0-0xff), nil, false, true
    for b in range(0x80, 0x90):
        table[b] = (_MAP, b & 0x0F, 1)
    for b in range(0x90, 0xA0):
        table[b] = (_ARRAY, b & 0x0F, 1)
    for b in range(0xA0, 0xC0):
        table[b] = (_STR, b & 0x1F, 1)
    widths = {0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8, 0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8}
    for b, width in widths.items():
        table[b] = (_SCALAR, width, 1)
    sized = {0xC4: (_BIN, 1), 0xC5: (_BIN, 2), 0xC6: (_BIN, 4), 0xD9: (_STR, 1), 0xDA: (_STR, 2), 0xDB: (_STR, 4)}
    sized |= {0xDC: (_ARRAY, 2), 0xDD: (_ARRAY, 4), 0xDE: (_MAP, 2), 0xDF: (_MAP, 4)}
    for b, (kind, width) in sized.items():
        table[b] = (kind, width, 0)
    for b in (*range(0xC7, 0xCA), *range(0xD4, 0xD9)):
        table[b] = (_EXT, 0, 1)
    table[0xC1] = (_UNUSED, 0, 1)
    return table


_TABLE = _table()


def _length(data: Any, pos: int, width: int) -> int:
    if pos + width > len(data):
        raise WireError(f"truncated: a length field at byte {pos} runs past the message's end.")
    return int.from_bytes(data[pos : pos + width], "big")


def _container(kind: int, n: int, depth: int) -> int:
    """The items a map or array of ``n`` entries holds; WireError past the protocol's limits."""
    if kind == _MAP and n > MAX_MAP_LEN:
        raise WireError(f"a map of {n} entries: the protocol's hold at most {MAX_MAP_LEN}.")
    if kind == _ARRAY and n > MAX_ARRAY_LEN:
        raise WireError(f"an array of {n} items: the protocol's hold at most {MAX_ARRAY_LEN}.")
    if depth > MAX_DEPTH:
        raise WireError(f"containers nested deeper than {MAX_DEPTH}.")
    return 2 * n if kind == _MAP else n


def check(data: bytes | bytearray | memoryview) -> None:
    """Refuse, before anything is built, a msgpack message outside the protocol's needs (module docstring).

    One pass over the object headers, string and byte contents skipped: at most :data:`MAX_ITEMS` steps whatever
    the message's size. WireError in one line; a message that passes decodes to at most a few times its size.
    """
    end, pos, items, text = len(data), 0, 0, 0
    left = [1]  # items still to read in each open container; the message itself is one item
    while left:
        if not left[-1]:
            left.pop()
            continue
        left[-1] -= 1
        if pos >= end:
            raise WireError(f"truncated: {sum(left) + 1} more items were declared.")
        items += 1
        if items > MAX_ITEMS:
            raise WireError(f"more than {MAX_ITEMS} items: the protocol's messages hold far fewer.")
        kind, n, fixed = _TABLE[data[pos]]
        if kind == _EXT:
            raise WireError(f"an extension type (byte 0x{data[pos]:02x} at {pos}): not part of the protocol.")
        if kind == _UNUSED:
            raise WireError(f"not a msgpack message: byte 0xc1 (at {pos}) is never used.")
        pos += 1
        if kind == _SCALAR:
            pos += n
            continue
        if not fixed:
            n, pos = _length(data, pos, n), pos + n
        if kind in (_MAP, _ARRAY):
            count = _container(kind, n, len(left))
            if count:
                left.append(count)
            continue
        if kind == _STR:
            text += n
            if n > MAX_STR_LEN or text > MAX_TEXT:
                raise WireError(f"a string of {n} bytes, {text} in all: at most {MAX_STR_LEN} and {MAX_TEXT}.")
        if pos + n > end:
            what = "string" if kind == _STR else "byte string"
            raise WireError(f"a {what} declares {n} bytes, {end - pos} are left.")
        pos += n
    if pos > end:
        raise WireError("truncated: the last number runs past the message's end.")
    if pos < end:
        raise WireError(f"{end - pos} bytes after the message's end.")


def packb(message: dict) -> bytes:
    """``message`` (a map of text keys to numbers, text, arrays, lists and maps) in openpi's msgpack format."""
    import msgpack

    return msgpack.packb(message, default=_pack, use_bin_type=True)


def unpackb(data: bytes | bytearray | memoryview) -> dict:
    """The map in ``data`` (openpi's msgpack format), arrays rebuilt read-only; WireError for anything else,
    before anything is built for what the protocol does not need (:func:`check`)."""
    import msgpack

    check(data)
    try:
        message = msgpack.unpackb(
            data,
            object_hook=_unpack,
            raw=False,
            strict_map_key=False,
            max_str_len=MAX_STR_LEN,
            max_bin_len=len(data),
            max_array_len=MAX_ARRAY_LEN,
            max_map_len=MAX_MAP_LEN,
            max_ext_len=0,
        )
    except WireError:
        raise
    except Exception as exc:  # noqa: BLE001 - msgpack's many error types: one line
        raise WireError(f"not a msgpack message ({type(exc).__name__}: {str(exc)[:80]}).") from None
    if not isinstance(message, dict):
        raise WireError(f"a message must be a msgpack map, got a {type(message).__name__}.")
    return message
