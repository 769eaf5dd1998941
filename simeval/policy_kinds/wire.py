"""openpi's wire format: msgpack with NumPy arrays, read as data (both sides of a remote policy).

A message is one msgpack map. An array travels as openpi's ``msgpack_numpy`` writes it: a map
``{b"__ndarray__": True, b"data": <raw bytes>, b"dtype": <numpy dtype string>, b"shape": [...]}``
(a NumPy scalar as ``{b"__npgeneric__": True, b"data": <value>, b"dtype": ...}``), so openpi's own
client and servers read what simeval writes and the reverse.

Reading is bounded and inert: the caller caps a message's bytes before it is decoded (the
WebSocket's ``max_size``); only boolean, integer and floating dtypes are rebuilt (never object,
void or complex ones, which openpi's writer refuses too), and an array's bytes must be exactly
its shape times its item size. Anything else is a :class:`WireError` in one line.
"""

from __future__ import annotations

from typing import Any

TOKEN_ENV = "SIMEVAL_POLICY_SERVER_TOKEN"  # noqa: S105 - a variable's name, not a token: Api-Key <its value>
DEFAULT_MAX_MESSAGE_BYTES = 16 * 2**20  # 16 MiB: a 224x224x3 image is 150 KiB; a state vector is bytes
_KINDS = frozenset("biuf")  # bool, signed, unsigned, floating


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


def packb(message: dict) -> bytes:
    """``message`` (a map of text keys to numbers, text, arrays, lists and maps) in openpi's msgpack format."""
    import msgpack

    return msgpack.packb(message, default=_pack, use_bin_type=True)


def unpackb(data: bytes | bytearray | memoryview) -> dict:
    """The map in ``data`` (openpi's msgpack format), arrays rebuilt read-only; WireError for anything else."""
    import msgpack

    try:
        message = msgpack.unpackb(data, object_hook=_unpack, raw=False, strict_map_key=False)
    except WireError:
        raise
    except Exception as exc:  # noqa: BLE001 - msgpack's many error types: one line
        raise WireError(f"not a msgpack message ({type(exc).__name__}: {str(exc)[:80]}).") from None
    if not isinstance(message, dict):
        raise WireError(f"a message must be a msgpack map, got a {type(message).__name__}.")
    return message
