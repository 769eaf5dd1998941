"""The remote policy's client: a module (the observation, and any camera images -> "action") whose forward asks a
policy server.

Built in the worker by :func:`simeval.policy_kinds.remote.remote_policy`. One WebSocket
connection per worker, opened when the client is built (the server's metadata says its
chunk length) and again at the next call after any failure, so a round after a server
restart reconnects. A call sends one request per row back to back, each tagged with the call's
id and its number of requests (``simeval/step``, ``simeval/step_requests``: serve_policy answers
the call in one forward pass, the rows an in-process call would compute together; openpi's
servers ignore the keys), then reads the replies in order within ``timeout_s``; every fault
(no server, a closed connection, no reply in time, a text frame, a reply without ``actions``, a
wrong shape, NaN, a message over the size cap) is a :class:`RemotePolicyError` in one line
naming the server, and the round fails with it (an ``EvalError``).
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

from simeval.policy_kinds.wire import STEP_KEY, STEP_REQUESTS_KEY, TOKEN_ENV, WireError, packb, unpackb

MAX_CHUNK = 4096  # actions in one reply: openpi's policies send tens


class RemotePolicyError(RuntimeError):
    """A policy server that cannot be reached, stops answering, or answers what cannot be played."""


class RemoteClientPolicy(TensorDictModuleBase):
    """A policy server's client for ``obs_dim`` observations and ``act_dim`` actions (see the module docstring).

    Args:
        url: ``ws://HOST:PORT``.
        obs_dim, act_dim: the env's observation and action sizes.
        chunk: actions per reply (None: the server's metadata ``action_chunk``, else 1).
        keys: ``{"state": <request key>, "actions": <reply key>, ...}``.
        timeout_s: the most seconds to connect, or to receive one call's replies.
        max_message_bytes: the largest message read.
        state_key: the observation entry sent as the state (``observation``, or ``observation.state``
            where the env has cameras).
        images: camera image entries (float ``[3, H, W]`` in [0, 1]) -> their request keys; each is
            sent as uint8 ``[H, W, 3]``, openpi's layout.
        prompt: text sent as ``prompt`` with every request (openpi's key for a task's instruction), or None.
        variants: texts one of which is sent as ``prompt`` instead, per row: the one the row's ``variant_entry``
            (an observation entry, :func:`simeval.envs.perturb.variant_key`) names, its episode's draw; or None.
        variant_entry: the observation entry of each row's variant index (with ``variants``).
    """

    def __init__(
        self,
        url: str,
        obs_dim: int,
        act_dim: int,
        *,
        chunk: int | None,
        keys: dict[str, str],
        timeout_s: float,
        max_message_bytes: int,
        state_key: str = "observation",
        images: dict[str, str] | None = None,
        prompt: str | None = None,
        variants: tuple[str, ...] | None = None,
        variant_entry: str | None = None,
    ) -> None:
        super().__init__()
        self.state_key, self.images = state_key, dict(images or {})
        self.prompt = {"prompt": prompt} if prompt is not None else {}
        if variants and variant_entry is None:
            raise ValueError("a remote policy given prompt variants needs the entry of each row's variant index.")
        self.variants, self.variant_entry = (tuple(variants), variant_entry) if variants else (None, None)
        self.in_keys = [state_key, *self.images, *([variant_entry] if self.variants else [])]
        self.out_keys = ["action"]
        self.url, self.obs_dim, self.act_dim = url, obs_dim, act_dim
        self.keys, self.timeout_s, self.max_message_bytes = keys, float(timeout_s), int(max_message_bytes)
        if chunk is not None and not 1 <= chunk <= MAX_CHUNK:
            raise ValueError(f"a remote policy's chunk must be in 1..{MAX_CHUNK}, got {chunk}.")
        self._ws: Any = None
        self._chunk = chunk
        self._steps = 0  # the calls sent: each call's requests carry its number (STEP_KEY)
        self.metadata = self._connect()

    # -- connection ------------------------------------------------------
    def _connect(self) -> dict:
        """Open the connection and read the server's metadata (its first message)."""
        from websockets.exceptions import InvalidStatus, WebSocketException
        from websockets.sync.client import connect

        token = os.environ.get(TOKEN_ENV)
        try:
            ws = connect(
                self.url,
                open_timeout=self.timeout_s,
                close_timeout=1.0,
                max_size=self.max_message_bytes,
                compression=None,
                proxy=None,
                additional_headers={"Authorization": f"Api-Key {token}"} if token else None,
            )
        except InvalidStatus as exc:
            status = exc.response.status_code
            hint = f": set {TOKEN_ENV} to its token" if status in (401, 403) else ""
            raise RemotePolicyError(
                f"the policy server at {self.url} refused the connection (HTTP {status}){hint}."
            ) from None
        except (OSError, TimeoutError, WebSocketException) as exc:
            raise RemotePolicyError(f"cannot reach the policy server at {self.url} ({_why(exc)}).") from None
        self._ws = ws
        try:
            metadata = self._decode(self._recv(time.monotonic() + self.timeout_s), "its metadata")
            chunk = self._check_metadata(metadata)
            if chunk != getattr(self, "chunk", chunk):
                raise RemotePolicyError(
                    f"the policy server at {self.url} now declares action_chunk {chunk}, {self.chunk} before."
                )
            self.chunk = chunk
        except RemotePolicyError:
            self.close()
            raise
        return metadata

    def _check_metadata(self, metadata: dict) -> int:
        """The chunk length: ``chunk`` if given, else the metadata's ``action_chunk`` (default 1); the sizes the
        metadata declares must be the env's. RemotePolicyError naming the field otherwise; other fields are not read."""
        declared = self._declared(metadata, "action_chunk", MAX_CHUNK)
        for name, mine in (("obs_dim", self.obs_dim), ("action_dim", self.act_dim)):
            theirs = self._declared(metadata, name, 2**31 - 1)
            if theirs is not None and theirs != mine:
                raise RemotePolicyError(
                    f"the policy server at {self.url} serves {name} {theirs}, but the env's is {mine}: another task?"
                )
        chunk = self._chunk if self._chunk is not None else declared or 1
        if chunk * self.act_dim * 4 > self.max_message_bytes:
            raise RemotePolicyError(
                f"the policy server at {self.url}: action_chunk {chunk} means replies of {chunk} x {self.act_dim} "
                f"float32, over {self.max_message_bytes} bytes (--policy-server-max-message)."
            )
        return chunk

    def _declared(self, metadata: dict, name: str, most: int) -> int | None:
        """The integer ``metadata[name]`` (None where absent); RemotePolicyError for another value."""
        value = metadata.get(name)
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
            raise RemotePolicyError(
                f"the policy server at {self.url} declares {name} {value!r:.40}: an integer in 1..{most} expected "
                "(its metadata)."
            )
        return value

    def close(self) -> None:
        """Close the connection (the next call opens a new one)."""
        ws, self._ws = self._ws, None
        if ws is not None:
            try:
                ws.close()
            except Exception:  # noqa: BLE001, S110 - closing a broken connection: nothing left to do
                pass

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_ws"] = None  # a connection does not travel: the copy opens its own
        return state

    def _recv(self, deadline: float) -> bytes:
        from websockets.exceptions import ConnectionClosed

        try:
            data = self._ws.recv(timeout=max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            self.close()
            raise RemotePolicyError(
                f"the policy server at {self.url} did not answer within {self.timeout_s:g} s "
                "(--policy-server-timeout): is it running?"
            ) from None
        except ConnectionClosed as exc:
            self.close()
            if exc.sent is not None and exc.sent.code == 1009:
                raise RemotePolicyError(
                    f"the policy server at {self.url} sent a message over {self.max_message_bytes} bytes "
                    "(--policy-server-max-message)."
                ) from None
            if exc.rcvd is not None and exc.rcvd.code == 1009:
                raise RemotePolicyError(
                    f"the policy server at {self.url} refused a request as too large (its --max-message)."
                ) from None
            why = f": {exc.rcvd.reason}" if exc.rcvd is not None and exc.rcvd.reason else ""
            raise RemotePolicyError(f"the policy server at {self.url} closed the connection{why}.") from None
        if isinstance(data, str):
            self.close()
            first = (data.strip().splitlines() or ["(empty)"])[-1][:300]
            raise RemotePolicyError(f"the policy server at {self.url} answered an error: {first}")
        return data

    def _decode(self, data: bytes, what: str) -> dict:
        try:
            return unpackb(data)
        except WireError as exc:
            self.close()
            raise RemotePolicyError(f"the policy server at {self.url} sent {what} that cannot be read: {exc}") from None

    # -- calls ------------------------------------------------------------
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Set "action" ([..., act_dim], or [..., chunk, act_dim] for chunks) from the server's replies."""
        obs = tensordict.get(self.state_key)
        lead = obs.shape[:-1]
        flat = obs.detach().reshape(-1, obs.shape[-1]).to("cpu", torch.float32).numpy()
        images = {}
        for entry, key in self.images.items():
            image = tensordict.get(entry).detach()
            image = image.reshape(-1, *image.shape[-3:]).to("cpu")
            images[key] = (image * 255.0).round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).numpy()
        prompts = None
        if self.variants is not None:
            prompts = [self.variants[i] for i in tensordict.get(self.variant_entry).reshape(-1).tolist()]
        actions = torch.from_numpy(self.ask(flat, images, prompts)).to(obs.device)
        tensordict.set("action", actions.reshape(*lead, *actions.shape[1:]))
        return tensordict

    def ask(
        self, states: np.ndarray, images: dict[str, np.ndarray] | None = None, prompts: list[str] | None = None
    ) -> np.ndarray:
        """The actions for each row of ``states`` ([n, obs_dim]), with row ``i`` of each of ``images`` (request key
        -> [n, H, W, 3] uint8) and of ``prompts`` (None: the fixed prompt): [n, act_dim], or [n, chunk, act_dim] for
        chunks."""
        images = images or {}
        if self._ws is None:
            self.metadata = self._connect()
        from websockets.exceptions import ConnectionClosed

        self._steps += 1
        step = {STEP_KEY: self._steps, STEP_REQUESTS_KEY: len(states)}
        try:
            for i, row in enumerate(states):
                request = {self.keys["state"]: row, **{key: image[i] for key, image in images.items()}}
                prompt = self.prompt if prompts is None else {"prompt": prompts[i]}
                self._ws.send(packb({**request, **prompt, **step}))
        except (ConnectionClosed, OSError):
            self.close()
            raise RemotePolicyError(f"the policy server at {self.url} closed the connection.") from None
        deadline = time.monotonic() + self.timeout_s
        out = np.empty((len(states), self.chunk, self.act_dim), dtype=np.float32)
        for i in range(len(states)):
            out[i] = self._actions(self._decode(self._recv(deadline), "a reply"))
        return out[:, 0] if self.chunk == 1 else out

    def _actions(self, reply: dict) -> np.ndarray:
        """A reply's actions as [chunk, act_dim] float32; RemotePolicyError for what cannot be played."""
        key = self.keys["actions"]
        if key not in reply:
            self.close()
            raise RemotePolicyError(
                f"the policy server at {self.url} replied without {key!r} (it sent {sorted(map(str, reply))[:6]}): "
                "set the reply key with --policy-server-keys."
            )
        actions = reply[key]
        shape = getattr(actions, "shape", None)
        fits = shape == (self.chunk, self.act_dim) or (self.chunk == 1 and shape == (self.act_dim,))
        if not isinstance(actions, np.ndarray) or not fits:
            self.close()
            got = f"shape {list(shape)}" if shape is not None else f"a {type(actions).__name__}"
            expected = f"[{self.chunk}, {self.act_dim}]" + (f" or [{self.act_dim}]" if self.chunk == 1 else "")
            hint = " (set --policy-server-chunk)" if shape is not None and len(shape) == 2 else ""
            raise RemotePolicyError(
                f"the policy server at {self.url} answered {key!r} of {got}, expected {expected}{hint}."
            )
        if actions.dtype.kind not in "iuf":
            self.close()
            raise RemotePolicyError(f"the policy server at {self.url} answered {key!r} of dtype {actions.dtype}.")
        with np.errstate(over="ignore"):  # a float64 past float32's range becomes inf, refused below
            actions = actions.astype(np.float32).reshape(self.chunk, self.act_dim)
        if not np.isfinite(actions).all():
            self.close()
            raise RemotePolicyError(f"the policy server at {self.url} answered NaN or infinite {key!r}.")
        return actions


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:160]}" if text else type(exc).__name__
