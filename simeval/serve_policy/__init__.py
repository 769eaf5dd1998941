"""``simeval-serve-policy CHECKPOINT --port P [--host 127.0.0.1] [--token T]`` (or ``python -m simeval.serve_policy``):
serve a checkpoint's policy.

The checkpoint's deterministic action, its observation normaliser applied (what an in-process
evaluation computes: :func:`simeval.checkpoint_policy.build_checkpoint_policy`), served over
openpi's WebSocket + msgpack protocol (:mod:`simeval.policy_kinds.remote`): openpi's
``WebsocketClientPolicy`` and the launcher's ``--policy-server ws://HOST:P`` evaluate it.
Requests of every connection are batched into one forward pass
(:mod:`simeval.serve_policy.batching`), a simeval client's step whole.

A policy that sees pixels (``--policy module:factory --cameras CAMERA ... --image-size N``) gets
each request's images, openpi's uint8 ``[H, W, 3]``, as the env gives them in process:
``observation.images.<camera>``, float32 ``[3, H, W]`` in [0, 1] (the bytes divided by 255, the
env's own arithmetic), beside ``observation.state``.

Security defaults (docs/security.md, "Network"): it binds 127.0.0.1; bound to any other address
it refuses to start without a token (``--token``, or the environment variable
``SIMEVAL_POLICY_SERVER_TOKEN``), which every connection must then present. A WebSocket handshake
carrying an ``Origin`` header (what a browser sends for a web page) is refused with HTTP 403
unless ``--allow-origin`` names that origin. Messages are read up to ``--max-message`` bytes and
decoded within the wire format's bounds (:mod:`simeval.policy_kinds.wire`); a connection has at
most ``--max-in-flight`` requests read and not yet answered (the server stops reading it there),
passes take every waiting connection's requests in turn, and a closed connection's queued
requests are dropped. Bad input: one line on stderr and exit code 2. On SIGINT or SIGTERM it
stops and prints what it served.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from dataclasses import dataclass, field
from typing import Any

from simeval.backends.bootstrap import start_resource_tracker
from simeval.checkpoint_policy import CheckpointPolicy, build_checkpoint_policy
from simeval.checkpoints import CheckpointError, load_checkpoint
from simeval.checkpoints.bounds import parse_size
from simeval.command_line import OneLineParser, error_line, run_command
from simeval.extras import REMOTE_MODULES, require_extra
from simeval.policy_kinds.remote import CAMERA_KEY, DEFAULT_KEYS, image_keys
from simeval.policy_kinds.wire import DEFAULT_MAX_MESSAGE_BYTES, TOKEN_ENV
from simeval.serve_policy.batching import DEFAULT_MAX_IN_FLIGHT, BatchingServer, Field

LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m simeval.serve_policy``."""
    p = OneLineParser(
        prog="python -m simeval.serve_policy",
        description="Serve a checkpoint's policy over openpi's WebSocket + msgpack protocol, batching requests.",
        allow_abbrev=False,
    )
    p.add_argument("checkpoint", help="any checkpoint simeval reads (simeval, rsl_rl, ...)")
    p.add_argument("--port", type=int, required=True, help="TCP port (0: any free one, printed when ready)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; others need a token)")
    p.add_argument("--token", help=f"the token connections must present (default: ${TOKEN_ENV}, if set)")
    p.add_argument("--env", help="the env the policy is built for (required when the checkpoint records none)")
    p.add_argument("--format", help="the checkpoint format, when detection by content is not wanted")
    p.add_argument("--policy", help="module:function building the policy, instead of the checkpoint's factory")
    p.add_argument("--state-key", default=DEFAULT_KEYS["state"], help="the request key of the state")
    p.add_argument("--actions-key", default=DEFAULT_KEYS["actions"], help="the reply key of the actions")
    p.add_argument(
        "--cameras", nargs="+", default=[], metavar="CAMERA", help="the cameras a --policy sees (e.g. track)"
    )
    p.add_argument("--image-size", type=int, default=64, help="--cameras: the images' side in pixels")
    p.add_argument(
        "--image-key",
        action="append",
        default=[],
        metavar="CAMERA=KEY",
        help=f"a camera's request key (the first's: {DEFAULT_KEYS['image']}, others': observation/<camera>_image)",
    )
    p.add_argument(
        "--batch-window-ms", type=float, default=2.0, help="wait after a request for others to join its pass"
    )
    p.add_argument("--max-batch", type=int, default=1024, help="the most requests in one forward pass")
    p.add_argument(
        "--max-in-flight",
        type=int,
        default=DEFAULT_MAX_IN_FLIGHT,
        help="the most requests of one connection read and not yet answered (at least one worker's sub-envs); "
        "past it the connection is not read",
    )
    p.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="accept WebSocket handshakes from this browser origin (e.g. http://localhost:3000; repeatable): "
        "a handshake with any other Origin header is refused",
    )
    p.add_argument("--max-message", default=str(DEFAULT_MAX_MESSAGE_BYTES), help="largest message read (e.g. 16M)")
    p.add_argument("--device", default="cpu", help="where the policy runs (cpu, cuda:0)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


@dataclass
class Served:
    """A checkpoint's policy as served: a batch of requests (request key -> stacked arrays) -> actions
    ``[B, act_dim]`` (NumPy float32).

    ``built`` is the policy (:class:`~simeval.checkpoint_policy.CheckpointPolicy`), ``state_key`` the request
    key of the state and ``images`` each camera entry's request key (``observation.images.<camera>`` ->
    ``observation/image``).
    """

    built: CheckpointPolicy
    device: str = "cpu"
    state_key: str = DEFAULT_KEYS["state"]
    images: dict[str, str] = field(default_factory=dict)

    def fields(self) -> list[Field]:
        """What every request must hold: the state, float32 ``[obs_dim]``, and each image, uint8 ``[H, W, 3]``."""
        out = [Field(self.state_key, (self.built.obs_dim,))]
        for entry, key in self.images.items():
            _, height, width = self.built.images[entry]
            out.append(Field(key, (height, width, 3), image=True))
        return out

    def __call__(self, batch: Any) -> Any:
        """The deterministic actions for ``batch``: request key -> ``[B, ...]`` arrays (a bare ``[B, obs_dim]``
        array: the states alone); the env's frozen VecNorm, then the policy."""
        import torch

        if not isinstance(batch, dict):
            batch = {self.state_key: batch}
        obs = {self.built.state_key: torch.from_numpy(batch[self.state_key]).to(self.device)}
        for entry, key in self.images.items():
            pixels = torch.from_numpy(batch[key]).to(self.device).permute(0, 3, 1, 2)
            obs[entry] = pixels.float().div_(255.0)  # the env's own arithmetic: the rendered bytes / 255
        return self.built.actions(obs).detach().to("cpu", torch.float32).numpy()


def load_served(
    path: str,
    env: str | None,
    format: str | None,
    policy: str | None,
    device: str = "cpu",
    *,
    cameras: list[str] | None = None,
    image_size: int = 64,
    keys: dict[str, str] | None = None,
) -> Served:
    """The policy of checkpoint ``path`` as an evaluation runs it (its env's VecNorm statistics in front).

    ``policy`` (``module:function``) is trusted input, the command line's; without it the checkpoint's
    factory must be registered. ``cameras`` builds it for the env with those cameras at ``image_size``
    (a policy of the state vector alone is then refused in one line); ``keys`` are the request keys
    (``state``, ``image``, ``image:<camera>``, as ``--policy-server-keys`` names them).
    """
    cameras = list(cameras or [])
    if cameras and not 1 <= image_size <= 1024:
        raise ValueError(f"--image-size must be 1..1024 pixels, got {image_size}.")
    keys = {**DEFAULT_KEYS, **(keys or {})}
    ck = load_checkpoint(path, format)
    if ck.meta.get("format") == "onnx":
        raise CheckpointError(f"{path}: an exported ONNX policy; serve the checkpoint it came from.")
    if cameras:
        from simeval.envs.simulators import prepare_headless

        prepare_headless()  # MuJoCo reads MUJOCO_GL once, when it is imported: before the env is built
    built = build_checkpoint_policy(ck, env, policy, cameras=cameras, image_size=image_size).to(device)
    from simeval.envs.layout import image_key

    images = {image_key(c): key for c, key in image_keys(cameras, keys).items()}
    return Served(built, device, keys["state"], images)


def _image_keys(given: list[str]) -> dict[str, str]:
    """``--image-key CAMERA=KEY`` flags as ``{"image:CAMERA": KEY}``; ValueError in one line for another form."""
    out = {}
    for item in given:
        camera, _, key = item.partition("=")
        if not camera or not key:
            raise ValueError(f"--image-key takes CAMERA=KEY (e.g. wrist=observation/wrist_image), got {item!r:.80}.")
        out[CAMERA_KEY + camera] = key
    return out


def _check_origin(origin: str) -> str:
    """``origin`` if it is an ``Origin`` header's form (``scheme://host[:port]``, or ``null``); ValueError otherwise."""
    from urllib.parse import urlsplit

    parts = urlsplit(origin)
    if origin != "null" and (not parts.scheme or not parts.netloc or parts.path or parts.query or parts.fragment):
        raise ValueError(f"--allow-origin takes an origin such as http://localhost:3000, got {origin!r:.80}.")
    return origin


def main(argv: list[str] | None = None) -> int:
    """Serve as the command line ``argv`` (default: ``sys.argv[1:]``) says, until SIGINT or SIGTERM."""
    argv = sys.argv[1:] if argv is None else list(argv)
    start_resource_tracker()  # before the VecNorm lock (multiprocessing's) starts one that imports from the cwd
    try:
        require_extra(REMOTE_MODULES, "remote", "python -m simeval.serve_policy")
        args = build_parser().parse_args(argv)
        token = args.token or os.environ.get(TOKEN_ENV) or None
        if args.host not in LOOPBACK and not token:
            raise ValueError(
                f"--host {args.host} exposes the policy beyond this machine: give --token T (or set {TOKEN_ENV}); "
                "clients send it from their own environment variable of that name."
            )
        if not 0 <= args.port <= 65535:
            raise ValueError(f"--port must be in 0..65535, got {args.port}.")
        if args.max_batch < 1 or not 0 <= args.batch_window_ms <= 1000:
            raise ValueError("--max-batch must be >= 1 and --batch-window-ms in [0, 1000].")
        if args.max_in_flight < 1:
            raise ValueError(f"--max-in-flight must be >= 1, got {args.max_in_flight}.")
        for origin in args.allow_origin:
            _check_origin(origin)
        max_bytes = parse_size(args.max_message)
        if args.image_size != 64 and not args.cameras:
            raise ValueError("--image-size sets the camera images: add --cameras CAMERA.")
        keys = {"state": args.state_key, **_image_keys(args.image_key)}
        unknown = sorted({k[len(CAMERA_KEY) :] for k in keys if k.startswith(CAMERA_KEY)} - set(args.cameras))
        if unknown:
            raise ValueError(f"--image-key names cameras not in --cameras: {', '.join(unknown)}.")
        served = load_served(
            args.checkpoint,
            args.env,
            args.format,
            args.policy,
            args.device,
            cameras=args.cameras,
            image_size=args.image_size,
            keys=keys,
        )
    except Exception as exc:  # noqa: BLE001 - every failure becomes one line and exit code 2
        return error_line("simeval.serve_policy", exc, argv)
    built = served.built
    metadata = {
        "server": "simeval",
        "protocol": "openpi",
        "env": built.env,
        "step": built.step,
        "obs_dim": built.obs_dim,
        "action_dim": built.act_dim,
        "action_chunk": 1,
        "keys": {"state": args.state_key, "actions": args.actions_key},
        "max_message_bytes": max_bytes,
    }
    fields = served.fields()
    if served.images:
        metadata["images"] = {f.key: list(f.shape) for f in fields if f.image}
    server = BatchingServer(
        served,
        metadata,
        fields=fields,
        actions_key=args.actions_key,
        window_s=args.batch_window_ms / 1e3,
        max_batch=args.max_batch,
        token=token,
        max_message_bytes=max_bytes,
        max_in_flight=args.max_in_flight,
        allow_origins=args.allow_origin,
    )
    return asyncio.run(_serve(server, args.host, args.port, f"{args.checkpoint} ({built.env}, step {built.step})"))


async def _serve(server: BatchingServer, host: str, port: int, what: str) -> int:
    import gc

    gc.collect()
    gc.freeze()  # torch's objects out of the collector's way: a full collection under load stalled requests 100s of ms
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    def ready(bound: int) -> None:
        shown = f"[{host}]" if ":" in host else host
        print(f"serving {what} on ws://{shown}:{bound}", flush=True)

    try:
        await server.serve(host, port, stop, ready)
    except OSError as exc:
        print(f"simeval.serve_policy: error: cannot listen on {host}:{port} ({exc.strerror or exc}).", file=sys.stderr)
        return 2
    print(f"simeval.serve_policy: {server.stats.describe()}", file=sys.stderr, flush=True)
    return 0


def main_exit() -> None:
    """Console-script entry point (``simeval-serve-policy``, ``python -m simeval.serve_policy``): run_command."""
    run_command(main)
