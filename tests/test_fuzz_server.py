"""Fuzzing the policy server and its client over the network (issue 44), on 127.0.0.1.

The server (``python -m simeval.serve_policy`` with the shipped checkpoint, one process for the module) is sent
msgpack payloads, valid and not (random bytes, truncated or flipped messages, nesting, huge declared lengths,
wrong types, openpi arrays with odd dtypes and shapes, text frames), and raw WebSocket frames (odd opcodes, bits,
lengths, unmasked). The oracle: each connection gets one answer per request or an error line and is closed, or is
closed; the process never dies, its memory stays bounded, and an honest client afterwards still gets actions.

The client (:class:`~simeval.policy_kinds.remote_client.RemoteClientPolicy`) is run against a malicious server
sending drawn metadata and replies. The oracle: actions of the right shape, or one ``RemotePolicyError`` line naming
the server, never another exception and never a hang.

The seeded slice runs in ``make test`` (the same inputs every run); SIMEVAL_FUZZ_EXAMPLES (``make fuzz``) draws that
many random ones per fuzzer.
"""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import struct
import threading
import time
from typing import Any

import msgpack
import numpy as np
import pytest
from fuzz_inputs import fuzz_settings
from hypothesis import event, given
from hypothesis import strategies as st
from test_remote_policy import _start, _stop

from simeval.checkpoints.shipped import shipped_checkpoint
from simeval.policy_kinds.remote_client import RemoteClientPolicy, RemotePolicyError
from simeval.policy_kinds.wire import WireError, packb, unpackb

STATE = "observation/state"
KEYS = {"state": STATE, "actions": "actions"}
MAX_MESSAGE = 2**20  # the server's and the client's cap here: payloads stay small
ANSWER_S = 30.0  # the most one answer or close may take (a loaded 2-core machine)
MEMORY_BOUND = 300 * 2**20  # the server's resident memory may grow by at most this over a fuzzer

pytestmark = pytest.mark.timeout(1800)


# -- inputs -------------------------------------------------------------------------------------------------------
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=24)
    | st.binary(max_size=64)
)
DTYPES = ["<f4", "<f8", "<f2", "|u1", "|b1", "<i8", ">f4", "|O", "<c8", "|V8", "<U4", "S3", "<M8[s]", "f4", "x", ""]


@st.composite
def ndarrays(draw: Any) -> dict:
    """openpi's array map, each field valid or not."""
    dtype = draw(st.sampled_from(DTYPES) | SCALARS)
    shape = draw(st.lists(st.integers(-2, 2**40), max_size=9) | st.just([17]) | st.just([6]) | SCALARS)
    size = draw(st.sampled_from([0, 4, 24, 68, 136]) | st.integers(0, 300))
    raw = draw(st.binary(min_size=size, max_size=size) | SCALARS)
    out = {b"__ndarray__": draw(st.just(True) | SCALARS), b"data": raw, b"dtype": dtype, b"shape": shape}
    if draw(st.booleans()):
        out.pop(draw(st.sampled_from(sorted(out))))
    return out


KEYS_DRAWN = st.text(max_size=20) | st.binary(max_size=12) | st.sampled_from([STATE, "actions", "prompt"])
VALUES = st.recursive(
    SCALARS | ndarrays(),
    lambda kids: st.lists(kids, max_size=6) | st.dictionaries(KEYS_DRAWN, kids, max_size=6),
    max_leaves=24,
)  # any msgpack value, openpi arrays among the leaves


@st.composite
def state_arrays(draw: Any) -> np.ndarray:
    """A state of 17 numbers, odd in dtype, shape or values now and then."""
    shape = draw(st.sampled_from([(17,), (17,), (17,), (1, 17), (16,), (17, 1), (), (0,)]))
    dtype = draw(st.sampled_from([np.float32, np.float32, np.float64, np.int32, np.uint8, np.bool_, np.float16]))
    fill = draw(st.floats(allow_nan=True, allow_infinity=True, width=16))
    with np.errstate(all="ignore"):
        return np.full(shape, fill).astype(dtype)


@st.composite
def bombs(draw: Any) -> bytes:
    """Small messages declaring much: deep nesting, huge container and byte-string lengths, wide maps."""
    n = draw(st.integers(1, 4000))
    return draw(
        st.sampled_from(
            [
                b"\x91" * n + b"\xc0",
                b"\x81\xa1x\xdd" + struct.pack(">I", n) + b"\x80" * n,
                b"\x81\xa1x\xdd\xff\xff\xff\xff",
                b"\x81\xa1x\xdf\xff\xff\xff\xff",
                b"\x81\xa1x\xc6\xff\xff\xff\xff",
                b"\x81\xa1x\xdb\xff\xff\xff\xff",
                b"\x81\xa1x\xc9\x00\x00\x00\x01\x05x",
                b"\xde\xff\xff" + b"\xa1x\xc0" * n,
                packb({f"k{i}": i for i in range(n % 300)}),
            ]
        )
    )


@st.composite
def payloads(draw: Any) -> bytes | str:
    """One message a client could send: a request, any msgpack, mutated msgpack, random bytes, a bomb, text."""
    kind = draw(st.sampled_from(["request", "request", "value", "mutated", "random", "bomb", "text"]))
    if kind == "request":
        extra = draw(st.dictionaries(st.text(max_size=12), SCALARS, max_size=3))
        return packb({**extra, STATE: draw(state_arrays())})
    if kind == "text":
        return draw(st.text(max_size=200))
    if kind == "random":
        return draw(st.binary(max_size=2048))
    if kind == "bomb":
        return draw(bombs())
    raw = msgpack.packb(draw(VALUES), use_bin_type=True)
    if kind == "mutated" and raw:
        cut = draw(st.integers(0, len(raw)))
        flips = draw(st.lists(st.tuples(st.integers(0, max(0, len(raw) - 1)), st.integers(0, 255)), max_size=4))
        raw = bytearray(raw)
        for at, byte in flips:
            if at < len(raw):
                raw[at] = byte
        raw = bytes(raw[:cut]) if draw(st.booleans()) else bytes(raw)
    return raw


# -- the server ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server():
    """The shipped checkpoint served on 127.0.0.1 (1 MiB messages): (url, port, process)."""
    proc, port = _start(
        ["-m", "simeval.serve_policy", shipped_checkpoint(), "--port", "0", "--max-message", "1M"]
        + ["--batch-window-ms", "1"]
    )
    try:
        yield f"ws://127.0.0.1:{port}", port, proc
    finally:
        _stop(proc)


def _rss(proc) -> int:
    import psutil

    return psutil.Process(proc.pid).memory_info().rss


def _answers(url: str, messages: list[bytes | str]) -> None:
    """Send ``messages`` on one connection; each is answered with actions, or an error line comes and the connection
    closes, or it closes; never a hang."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    with connect(url, max_size=None, compression=None, open_timeout=ANSWER_S, close_timeout=1) as ws:
        ws.recv(timeout=ANSWER_S)  # the metadata
        try:
            for message in messages:
                ws.send(message)
            for _ in messages:
                reply = ws.recv(timeout=ANSWER_S)
                if isinstance(reply, str):
                    assert reply.startswith("simeval.serve_policy: ") and "\n" not in reply, reply
                    with pytest.raises(ConnectionClosed):
                        ws.recv(timeout=ANSWER_S)
                    event(f"error line: {reply.split(': ')[2][:40] if reply.count(': ') > 1 else reply[:40]}")
                    return
                assert unpackb(reply)["actions"].shape == (6,)
                event("answered")
        except ConnectionClosed as exc:
            assert exc.rcvd is None or exc.rcvd.code in (1002, 1007, 1008, 1009, 1011), exc
            event(f"closed ({exc.rcvd.code if exc.rcvd else 'no close frame'})")


def _honest(port: int) -> None:
    from openpi_client.websocket_client_policy import WebsocketClientPolicy

    client = WebsocketClientPolicy("127.0.0.1", port)
    reply = client.infer({STATE: np.zeros(17, np.float32)})
    assert reply["actions"].shape == (6,) and np.isfinite(reply["actions"]).all()


@pytest.fixture(scope="module")
def baseline(server):
    """The server's resident memory once it has answered a request (torch's first pass allocates)."""
    _honest(server[1])
    return _rss(server[2])


@fuzz_settings(80)
@given(messages=st.lists(payloads(), min_size=1, max_size=3))
def test_the_server_answers_or_closes_every_connection_and_survives(server, baseline, messages):
    url, port, proc = server
    _answers(url, messages)
    assert proc.poll() is None, "the server died"
    assert _rss(proc) - baseline <= MEMORY_BOUND


@st.composite
def frames(draw: Any) -> bytes:
    """One WebSocket frame as a client could write it: half of them well formed (a binary or text frame of a payload
    above), the others with each bit and length drawn."""
    payload = draw(st.binary(max_size=300) | payloads())
    text = isinstance(payload, str)
    payload = payload.encode() if text else payload
    if draw(st.booleans()):
        fin, rsv, opcode, masked, declared = True, 0, 0x1 if text else 0x2, True, "true"
    else:
        fin = draw(st.booleans())
        rsv = draw(st.sampled_from([0, 0, 0, 1, 2, 4]))
        opcode = draw(st.sampled_from([0x0, 0x1, 0x2, 0x2, 0x8, 0x9, 0xA, 0x3, 0xB, 0xF]))
        masked = draw(st.booleans() | st.just(True))
        declared = draw(st.sampled_from(["true", "true", "short", "long", "huge"]))
    n = {"true": len(payload), "short": max(0, len(payload) - 3), "long": len(payload) + 50, "huge": 2**63 - 1}
    length = n[declared]
    head = bytes([(0x80 if fin else 0) | rsv << 4 | opcode])
    bit = 0x80 if masked else 0
    if length < 126:
        head += bytes([bit | length])
    elif length < 2**16:
        head += bytes([bit | 126]) + struct.pack(">H", length)
    else:
        head += bytes([bit | 127]) + struct.pack(">Q", length)
    if masked:
        key = draw(st.binary(min_size=4, max_size=4))
        head += key
        payload = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
    return head + payload


def _read_for(sock: socket.socket, seconds: float) -> int:
    """Bytes read from ``sock`` for ``seconds`` (or until the server closes)."""
    sock.settimeout(seconds)
    got = 0
    try:
        while chunk := sock.recv(65536):
            got += len(chunk)
    except TimeoutError:
        pass
    return got


def _raw(port: int, frames: list[bytes]) -> None:
    """A handshake by hand, ``frames`` written, our side closed for writing: the server must close too."""
    with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_S) as sock:
        key = base64.b64encode(os.urandom(16)).decode()
        sock.sendall(
            f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        response = b""
        while b"\r\n\r\n" not in response:
            response += sock.recv(4096)
        assert response.startswith(b"HTTP/1.1 101"), response[:80]
        got = len(response) - response.index(b"\r\n\r\n") - 4
        try:
            for frame in frames:
                sock.sendall(frame)
            got += _read_for(sock, 0.2)  # answers come before our side closes (then they are dropped)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            event("closed while written to")
            return
        sock.settimeout(ANSWER_S)
        deadline = time.monotonic() + ANSWER_S
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except OSError:
                event("reset")
                return
            if not chunk:
                event(f"closed, {'answered' if got > 300 else 'metadata alone'}")  # the metadata is ~260 bytes
                return
            got += len(chunk)
        raise AssertionError(f"the server kept a connection open {ANSWER_S} s after its client stopped writing")


@fuzz_settings(40)
@given(written=st.lists(frames(), min_size=1, max_size=4))
def test_raw_frames_are_answered_or_closed_and_the_server_survives(server, baseline, written):
    _, port, proc = server
    _raw(port, written)
    assert proc.poll() is None, "the server died"
    assert _rss(proc) - baseline <= MEMORY_BOUND


def test_an_honest_client_is_answered_after_the_fuzzers(server, baseline):
    """Run after the fuzzers above (file order): the server still answers, its memory back near where it began."""
    _, port, proc = server
    for _ in range(3):
        _honest(port)
    assert proc.poll() is None
    assert _rss(proc) - baseline <= MEMORY_BOUND


# -- the client ---------------------------------------------------------------------------------------------------
class Scripted:
    """A server sending ``script["metadata"]`` first, then ``script["replies"]`` in turn (bytes, or text: an error
    frame) for each request; a thread with its own event loop, for the module."""

    def __init__(self) -> None:
        self.script: dict[str, Any] = {}
        self.port = 0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(),), daemon=True)

    async def _handler(self, ws: Any) -> None:
        from websockets.exceptions import ConnectionClosed

        script = self.script
        try:
            await ws.send(script["metadata"])
            replies = script["replies"]
            i = 0
            async for _ in ws:
                await ws.send(replies[i % len(replies)])
                i += 1
        except ConnectionClosed:
            pass

    async def _main(self) -> None:
        from websockets.asyncio.server import serve

        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        async with serve(self._handler, "127.0.0.1", 0, max_size=None, compression=None) as srv:
            self.port = srv.sockets[0].getsockname()[1]
            self._ready.set()
            await self._stop.wait()

    def start(self) -> Scripted:
        self._thread.start()
        assert self._ready.wait(30)
        return self

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


@pytest.fixture(scope="module")
def scripted():
    server = Scripted().start()
    try:
        yield server
    finally:
        server.stop()


@st.composite
def metadatas(draw: Any) -> bytes | str:
    """Metadata a server could send: the fields the client reads drawn from valid and odd values, or anything."""
    kind = draw(st.sampled_from(["fields", "fields", "fields", "fields", "value", "random", "text"]))
    if kind == "fields":
        fields = {}
        for name, good in (("action_chunk", st.integers(1, 8)), ("obs_dim", st.just(17)), ("action_dim", st.just(6))):
            value = draw(st.sampled_from(["absent", "good", "good", "good", "odd"]))
            if value != "absent":
                fields[name] = draw(good if value == "good" else SCALARS | st.integers(-(2**63), 2**63))
        fields.update(draw(st.dictionaries(st.text(max_size=12), SCALARS, max_size=3)))
        return msgpack.packb(fields, use_bin_type=True)
    if kind == "value":
        return msgpack.packb(draw(VALUES), use_bin_type=True)
    if kind == "random":
        return draw(st.binary(max_size=512))
    return draw(st.text(max_size=100))


@st.composite
def replies(draw: Any) -> bytes | str:
    """A reply a server could send: actions of drawn shape, dtype and values, an openpi array map, or anything."""
    kind = draw(st.sampled_from(["actions"] * 6 + ["array", "value", "random", "bomb", "text"]))
    if kind == "actions":
        shape = draw(st.sampled_from([(6,), (6,), (1, 6), (2, 6), (4, 6), (6, 1), (), (0, 6), (7,)]))
        dtype = draw(st.sampled_from([np.float32, np.float64, np.float16, np.int64, np.uint8, np.bool_]))
        fill = draw(st.floats(-10, 10, width=32) | st.floats(allow_nan=True, allow_infinity=True, width=32))
        with np.errstate(all="ignore"):
            return packb({"actions": np.full(shape, fill).astype(dtype), "server_timing": {"infer_ms": 1.0}})
    if kind == "array":
        return msgpack.packb({"actions": draw(ndarrays())}, use_bin_type=True)
    if kind == "value":
        return msgpack.packb(draw(VALUES), use_bin_type=True)
    if kind == "random":
        return draw(st.binary(max_size=512))
    if kind == "bomb":
        return draw(bombs())
    return draw(st.text(max_size=100))


@fuzz_settings(80)
@given(metadata=metadatas(), sent=st.lists(replies(), min_size=1, max_size=3), rows=st.integers(1, 3))
def test_the_client_against_a_malicious_server_is_actions_or_one_line(scripted, metadata, sent, rows):
    scripted.script = {"metadata": metadata, "replies": sent}
    url = f"ws://127.0.0.1:{scripted.port}"
    try:
        client = RemoteClientPolicy(
            url, 17, 6, chunk=None, keys=KEYS, timeout_s=ANSWER_S, max_message_bytes=MAX_MESSAGE
        )
        try:
            actions = client.ask(np.zeros((rows, 17), np.float32))
        finally:
            client.close()
    except RemotePolicyError as exc:
        text = str(exc)
        assert "\n" not in text and url in text and len(text) < 600, text
        event(f"refused: {text.split(url, 1)[1][:28]}")
        return
    except WireError as exc:  # the wire format's own refusal, if it ever reaches the caller: one line
        assert "\n" not in str(exc)
        return
    expected = (rows, 6) if client.chunk == 1 else (rows, client.chunk, 6)
    assert actions.shape == expected and actions.dtype == np.float32 and np.isfinite(actions).all()
    event("actions")
