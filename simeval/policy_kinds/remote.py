"""Remote policies: a policy served elsewhere over openpi's WebSocket + msgpack protocol.

The policy is a client (:class:`~simeval.policy_kinds.remote_client.RemoteClientPolicy`)
built in the worker by :func:`remote_policy`; the worker runs it like any policy: one call
per step for the sub-envs that need actions, action chunks kept per sub-env and cleared at
the sub-env's reset by :class:`~simeval.policy_kinds.acting.ActingPolicy` (what
:class:`RemotePolicy` declares). The protocol, as openpi's ``websocket_client_policy`` and
``WebsocketPolicyServer`` speak it:

* the server sends its metadata (a msgpack map) first on every connection;
* each request is one sub-env's observation, a msgpack map (``observation/state``: float32
  ``[obs_dim]`` by default; with camera observations, each camera's current image as uint8
  ``[H, W, 3]``: the first camera's as ``observation/image``, another's as
  ``observation/<camera>_image``; with a prompt, a suite task's text, as ``prompt``: where the env's
  condition draws the prompt per episode from a list of variants, the sub-env's variant), NumPy arrays as
  openpi's ``msgpack_numpy`` encodes them (:mod:`simeval.policy_kinds.wire`);
* each reply is a map holding ``actions`` (``[chunk, act_dim]`` or ``[act_dim]``); a text
  frame instead is the server's error.

Requests of one call are sent back to back on one connection and their replies read in order,
so a batching server (``python -m simeval.serve_policy``) answers them in one forward pass.
"""

from __future__ import annotations

import sys
from typing import Any

from simeval.extras import REMOTE_MODULES, require_extra
from simeval.policy_kinds.base import Acting, PolicyKind
from simeval.policy_kinds.wire import DEFAULT_MAX_MESSAGE_BYTES

DEFAULT_TIMEOUT_S = 30.0  # a reply later than this fails the round (a dead or hung server)
DEFAULT_KEYS = {"state": "observation/state", "actions": "actions", "image": "observation/image"}
CAMERA_KEY = "image:"  # "image:<camera>": that camera's request key (default observation/<camera>_image)
REMOTE_FACTORY = "simeval.policy_kinds.remote:remote_policy"  # trusted input only: never registered for files
CLIENT_CLASS = "RemoteClientPolicy"
CLIENT_MODULE = "simeval.policy_kinds.remote_client"


class RemotePolicy(PolicyKind):
    """The kind of :func:`remote_policy`'s clients: one request per sub-env, chunks as the server declares."""

    name = "remote"
    title = "a remote policy server (openpi's WebSocket protocol)"

    def owns(self, policy: Any) -> bool:
        """Whether ``policy`` is a remote client (checked without importing anything)."""
        module = sys.modules.get(CLIENT_MODULE)
        return module is not None and isinstance(policy, getattr(module, CLIENT_CLASS))

    def acting(self, policy: Any) -> Acting:
        """Chunks of the length the server declared (or ``chunk`` said), all played before the next request."""
        return Acting(chunk=policy.chunk)


def check_url(url: Any) -> str:
    """``url`` if it is a ``ws://HOST:PORT`` or ``wss://HOST:PORT`` address; ValueError in one line otherwise."""
    from urllib.parse import urlsplit

    if not isinstance(url, str) or not url.startswith(("ws://", "wss://")):
        raise ValueError(f"a policy server is a ws://HOST:PORT address, got {url!r:.80}.")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"a policy server is a ws://HOST:PORT address, got {url!r:.80} ({exc}).") from None
    if not parts.hostname or port is None:
        raise ValueError(f"a policy server is a ws://HOST:PORT address (with its port), got {url!r:.80}.")
    return url


def check_keys(keys: Any) -> dict[str, str]:
    """The request and reply keys: :data:`DEFAULT_KEYS` updated by ``keys`` (``state``, ``actions``, ``image``:
    the first camera's image, ``image:<camera>``: any camera's)."""
    if keys is None:
        return dict(DEFAULT_KEYS)
    if not isinstance(keys, dict) or not all(isinstance(v, str) and v for v in keys.values()):
        raise ValueError(f"the policy server's keys must be a mapping of names to keys, got {keys!r:.80}.")
    camera = [k for k in keys if k.startswith(CAMERA_KEY) and len(k) > len(CAMERA_KEY)]
    unknown = sorted(k for k in keys if k not in DEFAULT_KEYS and k not in camera)
    if unknown:
        names = sorted(DEFAULT_KEYS) + [CAMERA_KEY + "<camera>"]
        raise ValueError(f"unknown policy server key names {unknown}: choose among {names}.")
    return {**DEFAULT_KEYS, **keys}


def image_keys(cameras: list[str], keys: dict[str, str]) -> dict[str, str]:
    """Each camera's request key: ``image:<camera>`` where given, else the first camera's ``image`` and
    ``observation/<camera>_image`` for the others."""
    out = {}
    for i, camera in enumerate(cameras):
        default = keys["image"] if i == 0 else f"observation/{camera}_image"
        out[camera] = keys.get(CAMERA_KEY + camera, default)
    return out


def remote_policy(
    env: Any,
    url: str,
    chunk: int | None = None,
    keys: dict | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    prompt: str | None = None,
) -> Any:
    """A client of the policy server at ``url`` for ``env`` (a policy factory: the launcher's ``--policy-server``).

    Args:
        env: the env the policy acts in (its specs give the observation and action sizes).
        url: ``ws://HOST:PORT``.
        chunk: actions per reply; None: the server's metadata ``action_chunk``, else 1.
        keys: request and reply keys (:data:`DEFAULT_KEYS` by default; :func:`check_keys`).
        timeout_s: the most seconds a connection or a reply may take before the round fails.
        max_message_bytes: the largest message read from the server.
        prompt: text sent as ``prompt`` with every request (a suite task's ``prompt``); None: none. Where ``env``'s
            condition sets ``prompt`` variants (:func:`simeval.envs.perturb.variants_of`), each request carries its
            sub-env's variant for the episode instead.

    The token, where the server asks for one, is read from the environment variable
    ``SIMEVAL_POLICY_SERVER_TOKEN`` (never from the command line or a results file).
    """
    require_extra(REMOTE_MODULES, "remote", "simeval.policy_kinds.remote.remote_policy")
    from simeval.condition_terms import Prompt
    from simeval.envs.layout import IMAGE_PREFIX, STATE_KEY, image_key
    from simeval.envs.perturb import variant_key, variants_of
    from simeval.policy_kinds.remote_client import RemoteClientPolicy

    spec = env.observation_spec
    names = [k for k in spec.keys() if isinstance(k, str)]
    state_key = STATE_KEY if STATE_KEY in names else "observation"
    cameras = [k[len(IMAGE_PREFIX) :] for k in names if k.startswith(IMAGE_PREFIX)]
    obs_dim = int(spec[state_key].shape[-1])
    act_dim = int(env.full_action_spec_unbatched["action"].shape[-1])
    keys = check_keys(keys)
    return RemoteClientPolicy(
        check_url(url),
        obs_dim,
        act_dim,
        chunk=chunk,
        keys=keys,
        timeout_s=timeout_s,
        max_message_bytes=max_message_bytes,
        state_key=state_key,
        images={image_key(c): key for c, key in image_keys(cameras, keys).items()},
        prompt=prompt,
        variants=variants_of(env, Prompt.name),
        variant_entry=variant_key(Prompt.name),
    )
