"""The policy section: the policy evaluated, built here (``--policy``) or served remotely (``--policy-server``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from simeval.checkpoints.bounds import parse_size
from simeval.launch.config.base import ConfigError, Section, opt
from simeval.policy_kinds.remote import REMOTE_FACTORY, check_keys, check_url


@dataclass
class PolicySection(Section):
    """``--policy`` and its kwargs, ``--no-obs-norm``, and the remote policy of ``--policy-server`` and its settings."""

    title = "policy"

    policy: str | None = opt(None, "module:factory building the policy from the env (default: the checkpoint's)")
    policy_kwargs: dict = opt(dict, "JSON keyword arguments for --policy", json=True)
    obs_norm: bool = opt(True, "evaluate without the checkpoint's VecNorm statistics", flag="--no-obs-norm")
    policy_server: str | None = opt(
        None,
        "evaluate the policy served at ws://HOST:PORT (openpi's WebSocket + msgpack protocol, e.g. python -m "
        "simeval.serve_policy) instead of a checkpoint's; its token, if it asks for one, from "
        "$SIMEVAL_POLICY_SERVER_TOKEN",
        metavar="URL",
    )
    policy_server_timeout: float = opt(
        30.0, "--policy-server: seconds to connect, or to get one step's replies, before the round fails"
    )
    policy_server_chunk: int | None = opt(
        None, "--policy-server: actions per reply (default: the server's metadata action_chunk, else 1)"
    )
    policy_server_keys: dict = opt(
        dict, '--policy-server: JSON {"state": KEY, "actions": KEY}: the request and reply keys', json=True
    )
    policy_server_max_message: str = opt("16M", "--policy-server: the largest message read from the server")

    def check(self) -> None:
        """``--policy-kwargs`` a mapping, ``--policy-server``'s settings (then the policy), ``--policy``'s form."""
        if not isinstance(self.policy_kwargs, dict):
            raise ConfigError(
                f"--policy-kwargs must be a JSON object of keyword arguments, got {self.policy_kwargs!r:.60}."
            )
        _check_policy_server(self)
        if self.policy is not None and self.policy.count(":") != 1:
            raise ConfigError(f"--policy must look like 'package.module:function', got {self.policy!r}.")


def _check_policy_server(cfg: PolicySection) -> None:
    """``--policy-server``: its address and settings checked; the policy it names is the remote client's."""
    if cfg.policy_server is None:
        return
    if cfg.policy not in (None, REMOTE_FACTORY) or (cfg.policy is None and cfg.policy_kwargs):
        raise ConfigError("--policy-server is the policy: leave --policy and --policy-kwargs out.")
    timeout = cfg.policy_server_timeout
    number = isinstance(timeout, (int, float)) and not isinstance(timeout, bool)
    if not number or not 0 < timeout < math.inf:
        raise ConfigError(f"--policy-server-timeout must be seconds > 0, got {timeout!r}.")
    if cfg.policy_server_chunk is not None and cfg.policy_server_chunk < 1:
        raise ConfigError(f"--policy-server-chunk must be >= 1, got {cfg.policy_server_chunk}.")
    try:
        url, keys = check_url(cfg.policy_server), check_keys(cfg.policy_server_keys or None)
        max_bytes = parse_size(cfg.policy_server_max_message)
    except ValueError as exc:
        raise ConfigError(f"--policy-server: {exc}") from None
    cfg.policy = REMOTE_FACTORY  # recorded in each line's settings (the token never is)
    cfg.policy_kwargs = {
        "url": url,
        "chunk": cfg.policy_server_chunk,
        "keys": keys,
        "timeout_s": float(timeout),
        "max_message_bytes": max_bytes,
    }
