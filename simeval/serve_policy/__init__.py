"""``python -m simeval.serve_policy CHECKPOINT --port P [--host 127.0.0.1] [--token T]``: serve a checkpoint's policy.

The checkpoint's deterministic action, its observation normaliser applied (what an in-process
evaluation computes), served over openpi's WebSocket + msgpack protocol
(:mod:`simeval.policy_kinds.remote`): openpi's ``WebsocketClientPolicy`` and the launcher's
``--policy-server ws://HOST:P`` evaluate it. Requests of every connection are batched into one
forward pass (:mod:`simeval.serve_policy.batching`).

Security defaults: it binds 127.0.0.1; bound to any other address it refuses to start without a
token (``--token``, or the environment variable ``SIMEVAL_POLICY_SERVER_TOKEN``), which every
connection must then present. Messages are read up to ``--max-message`` bytes. Bad input: one
line on stderr and exit code 2. On SIGINT or SIGTERM it stops and prints what it served.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from dataclasses import dataclass
from typing import Any

from simeval.checkpoints import CheckpointError, load_checkpoint
from simeval.checkpoints.bounds import parse_size
from simeval.command_line import OneLineParser, error_line, run_command
from simeval.policy_kinds.remote import DEFAULT_KEYS
from simeval.policy_kinds.wire import DEFAULT_MAX_MESSAGE_BYTES, TOKEN_ENV
from simeval.serve_policy.batching import BatchingServer

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
        "--batch-window-ms", type=float, default=2.0, help="wait after a request for others to join its pass"
    )
    p.add_argument("--max-batch", type=int, default=1024, help="the most requests in one forward pass")
    p.add_argument("--max-message", default=str(DEFAULT_MAX_MESSAGE_BYTES), help="largest message read (e.g. 16M)")
    p.add_argument("--device", default="cpu", help="where the policy runs (cpu, cuda:0)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


@dataclass
class Served:
    """A checkpoint's policy as served: ``obs [B, obs_dim] -> actions [B, act_dim]`` (NumPy float32)."""

    env: str
    step: int
    obs_dim: int
    act_dim: int
    policy: Any
    vecnorm: Any
    device: str

    def __call__(self, obs: Any) -> Any:
        """The deterministic actions for raw observations ``obs``: the env's frozen VecNorm, then the policy."""
        import torch

        from simeval.export import _policy_actions

        with torch.no_grad():
            x = torch.from_numpy(obs).to(self.device)
            return _policy_actions(self.policy, self.vecnorm, x).detach().to("cpu", torch.float32).numpy()


def load_served(path: str, env: str | None, format: str | None, policy: str | None, device: str = "cpu") -> Served:
    """The policy of checkpoint ``path`` as an evaluation runs it (its env's VecNorm statistics in front)."""
    from simeval.export import _build, _env_name

    ck = load_checkpoint(path, format)
    if ck.meta.get("format") == "onnx":
        raise CheckpointError(f"{path}: an exported ONNX policy; serve the checkpoint it came from.")
    name = _env_name(ck, env)
    _, net, vecnorm, obs_dim, act_dim, _ = _build(ck, name, policy)
    net.to(device)
    if vecnorm is not None:
        vecnorm.to(device)
    return Served(name, ck.step, obs_dim, act_dim, net, vecnorm, device)


def main(argv: list[str] | None = None) -> int:
    """Serve as the command line ``argv`` (default: ``sys.argv[1:]``) says, until SIGINT or SIGTERM."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
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
        max_bytes = parse_size(args.max_message)
        served = load_served(args.checkpoint, args.env, args.format, args.policy, args.device)
    except Exception as exc:  # noqa: BLE001 - every failure becomes one line and exit code 2
        return error_line("simeval.serve_policy", exc, argv)
    metadata = {
        "server": "simeval",
        "protocol": "openpi",
        "env": served.env,
        "step": served.step,
        "obs_dim": served.obs_dim,
        "action_dim": served.act_dim,
        "action_chunk": 1,
        "keys": {"state": args.state_key, "actions": args.actions_key},
        "max_message_bytes": max_bytes,
    }
    server = BatchingServer(
        served,
        metadata,
        obs_dim=served.obs_dim,
        state_key=args.state_key,
        actions_key=args.actions_key,
        window_s=args.batch_window_ms / 1e3,
        max_batch=args.max_batch,
        token=token,
        max_message_bytes=max_bytes,
    )
    return asyncio.run(_serve(server, args.host, args.port, f"{args.checkpoint} ({served.env}, step {served.step})"))


async def _serve(server: BatchingServer, host: str, port: int, what: str) -> int:
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
    """Console-script entry point (``python -m simeval.serve_policy``): :func:`run_command`."""
    run_command(main)
