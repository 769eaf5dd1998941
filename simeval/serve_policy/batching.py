"""The batching WebSocket server: openpi's protocol, the requests of every connection in one forward pass.

Each connection gets the server's metadata first, then sends requests (one observation each,
openpi's msgpack format: the state, and camera images where the policy sees them, :class:`Field`)
and reads one reply per request, in order; a client may send several before reading (simeval's
client sends a worker's sub-envs back to back). Requests from every connection go into one
queue; the batcher takes what arrived within ``window_s`` of the first one, the window extended
while more keep arriving (at most 8 windows, ``max_batch`` requests), stacks each field,
runs one forward pass in a worker thread, and answers each.

A request that cannot be read (not msgpack, a field missing, a wrong shape or dtype, NaN) is
answered with one line of text, openpi's error frame, and its connection is closed; the server goes on serving
the others. Messages are read up to ``max_message_bytes`` (a larger one closes its connection,
code 1009). With a ``token``, a connection must send ``Authorization: Api-Key <token>`` (openpi's
client's header) or ``Bearer <token>``; ``GET /healthz`` answers 200 without one.
"""

from __future__ import annotations

import asyncio
import hmac
import http
import itertools
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from simeval.policy_kinds.wire import WireError, packb, unpackb


@dataclass(frozen=True)
class Field:
    """One entry every request must hold: ``key``, an array of ``shape``.

    ``image=False``: numbers (any integer or float dtype; a leading 1 is allowed), read as float32 and
    required finite: the state. ``image=True``: uint8 exactly, openpi's ``[H, W, 3]`` image layout.
    """

    key: str
    shape: tuple[int, ...]
    image: bool = False

    def read(self, request: dict) -> Any:
        """This field of ``request`` as the batch will hold it; WireError in one line for anything else."""
        import numpy as np

        value = request.get(self.key)
        if value is None:
            raise WireError(f"no {self.key!r} in the request (it holds {sorted(map(str, request))[:6]}).")
        shape = list(self.shape)
        if self.image:
            if not isinstance(value, np.ndarray) or value.dtype != np.uint8 or value.shape != self.shape:
                got = f"{value.dtype} {list(value.shape)}" if isinstance(value, np.ndarray) else type(value).__name__
                raise WireError(f"{self.key!r} must be a uint8 image of shape {shape} (H, W, 3), got {got}.")
            return value
        if (
            not isinstance(value, np.ndarray)
            or value.dtype.kind not in "iuf"
            or value.shape not in (self.shape, (1, *self.shape))
        ):
            got = f"shape {list(value.shape)}" if isinstance(value, np.ndarray) else f"a {type(value).__name__}"
            raise WireError(f"{self.key!r} must be numbers of shape {shape}, got {got}.")
        value = value.reshape(self.shape).astype(np.float32)
        if not np.isfinite(value).all():
            raise WireError(f"{self.key!r} holds NaN or infinite values.")
        return value


@dataclass
class BatchStats:
    """What the batcher did: requests answered, forward passes, and the largest pass (requests, connections)."""

    requests: int = 0
    forwards: int = 0
    largest: int = 0
    most_clients: int = 0

    def record(self, size: int, clients: int) -> None:
        """Count one forward pass of ``size`` requests from ``clients`` connections."""
        self.requests += size
        self.forwards += 1
        self.largest = max(self.largest, size)
        self.most_clients = max(self.most_clients, clients)

    def describe(self) -> str:
        """One line: requests, passes, mean and largest batch, most connections in one pass."""
        mean = self.requests / self.forwards if self.forwards else 0.0
        return (
            f"served {self.requests} requests in {self.forwards} forward passes (mean batch {mean:.1f}, "
            f"largest {self.largest}; most connections in one pass: {self.most_clients})"
        )


class BatchingServer:
    """Serve ``forward`` ({request key: [B, ...]} -> [B, act_dim]) over openpi's protocol, batching requests.

    Args:
        forward: the policy on a batch of requests, each field stacked (the state float32 ``[B, obs_dim]``,
            images uint8 ``[B, H, W, 3]``), called in one worker thread.
        metadata: the map sent first on every connection.
        fields: what every request must hold (:class:`Field`).
        actions_key: the reply key of the actions.
        window_s: how long the batcher waits after a request arrives for others to join its pass.
        max_batch: the most requests in one pass.
        token: the token a connection must present (None: none asked).
        max_message_bytes: the largest message read.
    """

    def __init__(
        self,
        forward: Callable[[dict[str, Any]], Any],
        metadata: dict,
        *,
        fields: Sequence[Field],
        actions_key: str = "actions",
        window_s: float = 0.002,
        max_batch: int = 1024,
        token: str | None = None,
        max_message_bytes: int,
    ) -> None:
        self.forward, self.metadata, self.fields = forward, metadata, tuple(fields)
        self.actions_key = actions_key
        self.window_s, self.max_batch, self.token = window_s, max_batch, token
        self.max_message_bytes = max_message_bytes
        self.stats = BatchStats()
        self._pending: list[tuple[Any, asyncio.Future, int]] = []
        self._arrived: asyncio.Event | None = None
        self._ids = itertools.count()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="forward")

    async def serve(self, host: str, port: int, stop: asyncio.Event, ready: Callable[[int], None]) -> None:
        """Serve on ``host:port`` until ``stop`` is set; ``ready(port)`` once listening (the port bound)."""
        from websockets.asyncio.server import serve

        self._arrived = asyncio.Event()
        batcher = asyncio.create_task(self._batches())
        try:
            async with serve(
                self._handler,
                host,
                port,
                compression=None,
                max_size=self.max_message_bytes,
                process_request=self._admit,
            ) as server:
                bound = next(iter(server.sockets)).getsockname()[1]
                ready(bound)
                await stop.wait()
        finally:
            batcher.cancel()
            self._executor.shutdown(wait=False, cancel_futures=True)

    # -- connections ---------------------------------------------------
    def _admit(self, connection: Any, request: Any) -> Any:
        """The health check, and the token check before the handshake (401 without the right one)."""
        if request.path == "/healthz":
            return connection.respond(http.HTTPStatus.OK, "OK\n")
        if self.token is None:
            return None
        given = request.headers.get("Authorization", "")
        for scheme in ("Api-Key ", "Bearer "):
            if given.startswith(scheme) and hmac.compare_digest(given[len(scheme) :].encode(), self.token.encode()):
                return None
        return connection.respond(http.HTTPStatus.UNAUTHORIZED, "this policy server needs its token\n")

    async def _handler(self, ws: Any) -> None:
        from websockets.exceptions import ConnectionClosed

        client = next(self._ids)
        answers: asyncio.Queue = asyncio.Queue()
        writer = asyncio.create_task(self._write(ws, answers))
        try:
            await ws.send(packb(self.metadata))
            async for message in ws:
                try:
                    obs = self._request(message)
                except WireError as exc:
                    await answers.put(f"simeval.serve_policy: bad request: {exc}")
                    break
                future = asyncio.get_running_loop().create_future()
                self._pending.append((obs, future, client))
                self._arrived.set()
                await answers.put(future)
        except ConnectionClosed:
            pass
        finally:
            await answers.put(None)
            await writer

    def _request(self, message: Any) -> tuple:
        """A request's fields, in :attr:`fields`' order; WireError in one line for anything else."""
        if isinstance(message, str):
            raise WireError("a request is a binary msgpack message, not text.")
        request = unpackb(message)
        return tuple(f.read(request) for f in self.fields)

    async def _write(self, ws: Any, answers: asyncio.Queue) -> None:
        """Send each request's answer in the order the requests came; an error line ends the connection."""
        from websockets.exceptions import ConnectionClosed

        try:
            while True:
                item = await answers.get()
                if item is None:
                    return
                if isinstance(item, str):
                    await ws.send(item)
                    await ws.close(1008, item[:120])
                    return
                try:
                    actions, timing = await item
                except Exception as exc:  # noqa: BLE001 - the policy's own error: one line to the client
                    line = f"simeval.serve_policy: the policy failed: {type(exc).__name__}: {str(exc)[:200]}"
                    await ws.send(line)
                    await ws.close(1011, line[:120])
                    return
                await ws.send(packb({self.actions_key: actions, "server_timing": timing}))
        except ConnectionClosed:
            return

    # -- batches -------------------------------------------------------
    async def _batches(self) -> None:
        """Forever: wait for a request, give others ``window_s`` to join, one forward pass, answer each."""
        import numpy as np

        loop = asyncio.get_running_loop()
        while True:
            await self._arrived.wait()
            # A window, extended while requests keep coming (a client's back-to-back requests join one pass),
            # at most 8 windows in all.
            for _ in range(8 if self.window_s > 0 else 0):
                seen = len(self._pending)
                await asyncio.sleep(self.window_s)
                if len(self._pending) == seen or len(self._pending) >= self.max_batch:
                    break
            batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
            if not self._pending:
                self._arrived.clear()
            batch = [item for item in batch if not item[1].done()]
            if not batch:
                continue
            clients = len({client for _, _, client in batch})
            start = time.perf_counter()
            try:
                stacked = {f.key: np.stack([b[0][i] for b in batch]) for i, f in enumerate(self.fields)}
                actions = await loop.run_in_executor(self._executor, self.forward, stacked)
            except Exception as exc:  # noqa: BLE001 - handed to each request's connection as one line
                for _, future, _ in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            self.stats.record(len(batch), clients)
            infer_ms = (time.perf_counter() - start) * 1e3
            timing = {"infer_ms": infer_ms, "batch_size": len(batch), "batch_clients": clients}
            for i, (_, future, _) in enumerate(batch):
                if not future.done():
                    future.set_result((actions[i], timing))
