"""The batching WebSocket server: openpi's protocol, the requests of every connection in one forward pass.

Each connection gets the server's metadata first, then sends requests (one observation each,
openpi's msgpack format: the state, and camera images where the policy sees them, :class:`Field`)
and reads one reply per request, in order; a client may send several before reading (simeval's
client sends a worker's sub-envs back to back). The batcher waits ``window_s`` after a request
arrives for others to join its pass, the window extended while more keep arriving (at most 8
windows, ``max_batch`` requests), takes the queued requests one connection at a time in turn
(round-robin, each connection's in order), stacks each field, runs one forward pass in a worker
thread, and answers each.

A pass holds whole client steps: simeval's client tags each request with its step
(:data:`~simeval.policy_kinds.wire.STEP_KEY`, an id, and :data:`~simeval.policy_kinds.wire.STEP_REQUESTS_KEY`,
how many requests the step sends), and a step's requests go into one pass together, once all
have come (a step of more than ``max_batch`` requests fills whole passes; one left partial by a
connection at its in-flight cap, or followed by another step, goes as it is). One client's pass
then holds the rows its in-process policy call would: the same float32 operations, the same
actions to the last bit. A request without the tag (openpi's client) is a step of its own, as
before. Round-robin turns take a whole step of each connection; a step that does not fit the
pass's room waits for the next pass.

One connection cannot starve the others: it has at most ``max_in_flight`` requests (and
``max_in_flight_bytes`` of them) read and not yet answered, past which the server stops reading
it (TCP pushes back on the client); every connection is read one message per turn; a pass holds
every waiting connection's requests in turn; and the queued requests of a connection that closes
are dropped, never computed.

A request that cannot be read (not msgpack, past the wire format's bounds, a field missing, a
wrong shape or dtype, NaN) is answered with one line of text, openpi's error frame, and its
connection is closed; the server goes on serving the others. Messages are read up to
``max_message_bytes`` (a larger one closes its connection, code 1009). A WebSocket handshake
carrying an ``Origin`` header (a web page's) is refused with HTTP 403 unless that origin is in
``allow_origins``. With a ``token``, a connection must send ``Authorization: Api-Key <token>``
(openpi's client's header) or ``Bearer <token>``; ``GET /healthz`` answers 200 without one.
"""

from __future__ import annotations

import asyncio
import hmac
import http
import itertools
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from simeval.policy_kinds.wire import STEP_KEY, STEP_REQUESTS_KEY, WireError, packb, unpackb

DEFAULT_MAX_IN_FLIGHT = 1024  # requests of one connection read and not yet answered: 1024 sub-envs' step
DEFAULT_MAX_IN_FLIGHT_BYTES = 256 * 2**20  # their bytes: 256 sub-envs' step with 3 images of 224x224
RECEIVE_QUEUE = 4  # frames websockets buffers per connection before it stops reading the socket
TURN = 16  # messages one connection reads, or answers it sends, before the others get their turn
CLOSE_TIMEOUT_S = 2.0  # how long a closing connection waits for its peer's close frame (loopback: milliseconds)


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
    """What the server did: requests answered, forward passes, the largest pass (requests, connections), the most
    requests one connection had in flight, how often a connection was left unread at its cap, and the requests
    dropped with their closed connections (queued, never computed)."""

    requests: int = 0
    forwards: int = 0
    largest: int = 0
    most_clients: int = 0
    most_in_flight: int = 0
    paused: int = 0
    dropped: int = 0

    def record(self, size: int, clients: int) -> None:
        """Count one forward pass of ``size`` requests from ``clients`` connections."""
        self.requests += size
        self.forwards += 1
        self.largest = max(self.largest, size)
        self.most_clients = max(self.most_clients, clients)

    def describe(self) -> str:
        """One line: requests, passes, mean and largest batch, most connections in one pass, then the caps' work."""
        mean = self.requests / self.forwards if self.forwards else 0.0
        return (
            f"served {self.requests} requests in {self.forwards} forward passes (mean batch {mean:.1f}, "
            f"largest {self.largest}; most connections in one pass: {self.most_clients}); most requests in flight "
            f"on one connection: {self.most_in_flight}, connections paused at their cap {self.paused} times, "
            f"{self.dropped} requests dropped with their closed connections"
        )


@dataclass(eq=False)
class _Client:
    """One connection's requests: queued for a pass (request, future, step tag) and in flight (read, not yet
    answered); ``step`` and ``step_taken``: the step whose first requests went into a pass already, and how many."""

    id: int
    queue: deque = field(default_factory=deque)
    step: int | None = None
    step_taken: int = 0
    read: int = 0
    in_flight: int = 0
    in_flight_bytes: int = 0
    room: asyncio.Event = field(default_factory=asyncio.Event)
    closed: bool = False


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
        max_in_flight: the most requests of one connection read and not yet answered (at least one client
            step's: a client sends one request per sub-env); past it the connection is not read.
        max_in_flight_bytes: the most bytes of those requests (one message past it is read when none is in flight).
        allow_origins: the ``Origin`` headers accepted; a handshake without one is accepted, any other refused.
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
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        max_in_flight_bytes: int = DEFAULT_MAX_IN_FLIGHT_BYTES,
        allow_origins: Sequence[str] = (),
    ) -> None:
        self.forward, self.metadata, self.fields = forward, metadata, tuple(fields)
        self.actions_key = actions_key
        self.window_s, self.max_batch, self.token = window_s, max_batch, token
        self.max_message_bytes = max_message_bytes
        self.max_in_flight, self.max_in_flight_bytes = max_in_flight, max_in_flight_bytes
        self.origins: list[str | None] = [None, *allow_origins]
        self.stats = BatchStats()
        self._clients: dict[int, _Client] = {}
        self._queued = 0
        self._turns = itertools.count()
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
                max_queue=RECEIVE_QUEUE,
                close_timeout=CLOSE_TIMEOUT_S,
                origins=self.origins,
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

        client = _Client(next(self._ids))
        self._clients[client.id] = client
        closing = asyncio.ensure_future(ws.wait_closed())
        closing.add_done_callback(lambda _: self._drop(client))
        answers: asyncio.Queue = asyncio.Queue()
        writer = asyncio.create_task(self._write(ws, answers, client))
        refused = False
        try:
            await ws.send(packb(self.metadata))
            refused = await self._read(ws, client, answers)
        except ConnectionClosed:
            pass
        finally:
            if not refused:
                self._drop(client)  # closed: what it queued is never computed
            answers.put_nowait(None)
            await writer
            self._drop(client)
            closing.cancel()

    async def _read(self, ws: Any, client: _Client, answers: asyncio.Queue) -> bool:
        """Queue each request of ``ws`` for a pass, one per turn of the event loop, none while ``client`` is at its
        cap, until the connection closes (False) or a request cannot be read (True: its error line queued after
        the answers to those before it)."""
        from websockets.protocol import State

        loop = asyncio.get_running_loop()
        while not client.closed:
            if self._full(client):
                self.stats.paused += 1
                await self._room(client)
                continue
            message = await ws.recv()
            if client.closed or ws.state is not State.OPEN:
                return False  # read from the buffer of a connection closed meanwhile: nobody to answer
            try:
                obs, step = self._request(message)
            except WireError as exc:
                answers.put_nowait(f"simeval.serve_policy: bad request: {exc}")
                return True
            future = loop.create_future()
            client.queue.append((obs, future, step))
            client.read += 1
            client.in_flight += 1
            client.in_flight_bytes += len(message)
            self._queued += 1
            self.stats.most_in_flight = max(self.stats.most_in_flight, client.in_flight)
            self._arrived.set()
            answers.put_nowait((future, len(message)))
            if client.read % TURN == 0:
                await asyncio.sleep(0)  # this connection's next messages wait for every other's turn
        return False

    def _full(self, client: _Client) -> bool:
        return client.in_flight >= self.max_in_flight or client.in_flight_bytes >= self.max_in_flight_bytes

    async def _room(self, client: _Client) -> None:
        """Wait until ``client`` is below its caps (an answer sent) or closed."""
        while self._full(client) and not client.closed:
            client.room.clear()
            await client.room.wait()

    def _drop(self, client: _Client) -> None:
        """Forget a closed connection: its queued requests are never computed (their answers: None)."""
        client.closed = True
        client.room.set()
        if self._clients.pop(client.id, None) is None:
            return
        self._queued -= len(client.queue)
        self.stats.dropped += len(client.queue)
        for _, future, _ in client.queue:
            if not future.done():
                future.set_result(None)
        client.queue.clear()

    def _request(self, message: Any) -> tuple[tuple, tuple[int, int] | None]:
        """A request's fields, in :attr:`fields`' order, and its step tag (id, requests; None: untagged or a tag
        that is not two integers, the requests >= 1); WireError in one line for anything else."""
        if isinstance(message, str):
            raise WireError("a request is a binary msgpack message, not text.")
        request = unpackb(message)
        step, count = request.get(STEP_KEY), request.get(STEP_REQUESTS_KEY)
        tag = (step, count) if type(step) is int and type(count) is int and count >= 1 else None
        return tuple(f.read(request) for f in self.fields), tag

    async def _write(self, ws: Any, answers: asyncio.Queue, client: _Client) -> None:
        """Send each request's answer in the order the requests came; an error line ends the connection."""
        from websockets.exceptions import ConnectionClosed
        from websockets.protocol import State

        try:
            while (item := await answers.get()) is not None:
                if isinstance(item, str):
                    await ws.send(item)
                    await ws.close(1008, item[:120])
                    return
                future, size = item
                try:
                    answer = await future
                except Exception as exc:  # noqa: BLE001 - the policy's own error: one line to the client
                    line = f"simeval.serve_policy: the policy failed: {type(exc).__name__}: {str(exc)[:200]}"
                    await ws.send(line)
                    await ws.close(1011, line[:120])
                    return
                if answer is None or ws.state is not State.OPEN:
                    return  # dropped with its closed connection, or closing: nobody reads it
                await ws.send(packb({self.actions_key: answer[0], "server_timing": answer[1]}))
                client.in_flight -= 1
                client.in_flight_bytes -= size
                client.room.set()
                if client.in_flight % TURN == 0:
                    await asyncio.sleep(0)  # other connections' answers go out in between
        except ConnectionClosed:
            pass
        finally:
            client.closed = True
            client.room.set()

    # -- batches -------------------------------------------------------
    async def _batches(self) -> None:
        """Forever: wait for a request, give others ``window_s`` to join, one forward pass, answer each."""
        while True:
            await self._arrived.wait()
            await self._window()
            batch = self._take()
            if not any(self._unit(c) for c in self._clients.values()):
                self._arrived.clear()  # nothing to take until a request arrives (a step's rest)
            if batch:
                await self._run(batch)

    async def _window(self) -> None:
        """Wait ``window_s``, again while every waiting connection keeps sending (a client's back-to-back requests
        join one pass; one that keeps sending cannot hold back another's), at most 8 windows in all, or until a pass
        is full."""
        for _ in range(8 if self.window_s > 0 else 0):
            seen = {c.id: c.read for c in self._clients.values() if c.queue}
            await asyncio.sleep(self.window_s)
            if self._queued >= self.max_batch or any(
                c.read == seen.get(c.id) for c in self._clients.values() if c.queue
            ):
                return

    def _unit(self, client: _Client) -> int:
        """How many of ``client``'s queued requests go into a pass together next (0: none yet): an untagged
        request alone; a tagged step's requests once all have come (at most ``max_batch``), or those that came
        where another step follows or the connection is at its cap (it sends no more until answered)."""
        if not client.queue:
            return 0
        head = client.queue[0][2]
        if head is None:
            return 1
        step, count = head
        need = count - (client.step_taken if client.step == step else 0)
        limit = min(max(need, 1), self.max_batch)
        came = 0
        for _, _, tag in client.queue:
            if tag is None or tag[0] != step:
                return came
            came += 1
            if came == limit:
                return came
        return came if self._full(client) else 0

    def _take(self) -> list[tuple[Any, asyncio.Future, _Client]]:
        """At most ``max_batch`` queued requests, one step of each waiting connection in turn (each connection's in
        order, a step whole: :meth:`_unit`; one that does not fit waits for the next pass), the first connection
        another at each pass."""
        ready = [c for c in self._clients.values() if c.queue]
        if ready:
            turn = next(self._turns) % len(ready)
            ready = ready[turn:] + ready[:turn]
        batch: list[tuple[Any, asyncio.Future, _Client]] = []
        while ready and len(batch) < self.max_batch:
            again = []
            for client in ready:
                size = self._unit(client)
                if not size or size > self.max_batch - len(batch):
                    continue  # not all of its step has come, or it does not fit: a later pass
                for _ in range(size):
                    obs, future, step = client.queue.popleft()
                    batch.append((obs, future, client))
                if step is not None:
                    client.step_taken = (client.step_taken if client.step == step[0] else 0) + size
                    client.step = step[0]
                if client.queue:
                    again.append(client)
                if len(batch) >= self.max_batch:
                    break
            ready = again
        self._queued -= len(batch)
        return batch

    async def _run(self, batch: list[tuple[Any, asyncio.Future, _Client]]) -> None:
        """One forward pass over ``batch``; each request's future gets (its actions, the pass's timing) or the
        policy's exception."""
        import numpy as np

        clients = len({client.id for _, _, client in batch})
        start = time.perf_counter()
        try:
            stacked = {f.key: np.stack([b[0][i] for b in batch]) for i, f in enumerate(self.fields)}
            loop = asyncio.get_running_loop()
            actions = await loop.run_in_executor(self._executor, self.forward, stacked)
        except Exception as exc:  # noqa: BLE001 - handed to each request's connection as one line
            for _, future, _ in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        self.stats.record(len(batch), clients)
        timing = {"infer_ms": (time.perf_counter() - start) * 1e3, "batch_size": len(batch), "batch_clients": clients}
        for i, (_, future, _) in enumerate(batch):
            if not future.done():
                future.set_result((actions[i], timing))
