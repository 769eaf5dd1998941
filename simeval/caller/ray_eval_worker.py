"""``simeval.RayEvalWorker``: torchrl's ``RayEvalWorker`` API on simeval's Ray backend.

``from torchrl.collectors.distributed import RayEvalWorker`` ->
``from simeval import RayEvalWorker`` works unchanged: same constructor,
``from_name``, ``submit``, ``poll`` and ``shutdown``, same result keys. What
differs, on purpose:

- ``init_fn`` runs before anything imports torch in the actor; env and policy
  are built there too, and a start-up failure comes back from ``poll``.
- Every submitted round is kept: a ``submit`` while a round runs is queued and
  ``poll`` hands results out in order (torchrl drops the earlier result).
- A failed round, a dead actor or one the cluster cannot schedule raises
  :class:`simeval.EvalError` from ``poll`` (torchrl's ``poll`` returns None for ever).
- A round plays one complete episode per sub-env, capped at ``max_steps``.
  ``reward`` keeps torchrl's figure, the mean *per-step* reward of a rollout
  from the reset until the first done of any sub-env (with
  ``break_when_any_done=False``: over every step of the round's episodes). It
  is biased towards short episodes; ``episode_reward`` beside it is the mean
  return of the complete episodes, with ``num_episodes``, ``episode_length``
  and a 95% bootstrap interval.
- ``frames`` is sub-env 0's first episode, ``(1, T, C, H, W)`` uint8, recorded
  only when the env renders (``render_mode="rgb_array"``), else None.
- Results also carry ``terminated_fraction`` / ``truncated_fraction`` and, with
  ``info_keys=[...]`` (as ``simeval.Evaluator``'s), each key's mean and
  ``success_rate``; the env's ``("next", "log")`` entries come as ``log/<name>``.
"""

from __future__ import annotations

from typing import Any

from simeval.backends.base import BackendOptions, WorkerRecipe
from simeval.backends.ray import NAMESPACE, RayBackend
from simeval.caller.requests import Request, RequestQueue
from simeval.settings import EvalSettings, RoundOverrides, as_info_keys, as_key


class RayEvalWorker:
    """An evaluation worker in a Ray actor: ``submit`` weights, ``poll`` results.

    Args:
        init_fn: called first in the actor, before torch is imported there
            (e.g. Isaac Lab's AppLauncher); a callable or ``"module:function"``; or None.
        env_maker: ``() -> env``, called in the actor after ``init_fn``.
        policy_maker: ``(env) -> policy``, called in the actor.
        num_gpus: GPUs the actor asks Ray for.
        reward_keys: the reward's nested key.
        name: registers a detached actor under this name (namespace
            ``"simeval"``) that :meth:`from_name` reaches from any process.
        info_keys: keys relative to "next" read at each episode's last step
            and reported as their means (simeval's addition).
        **remote_kwargs: forwarded to ``ray.remote`` (``num_cpus``,
            ``runtime_env``, ...), except simeval's ``start_timeout`` (seconds
            the actor may take to be scheduled and to start, default 120).
    """

    def __init__(
        self,
        init_fn: Any,
        env_maker: Any,
        policy_maker: Any,
        *,
        num_gpus: float = 1,
        reward_keys: tuple[str, ...] = ("next", "reward"),
        name: str | None = None,
        info_keys: Any = None,
        **remote_kwargs: Any,
    ) -> None:
        start_timeout = float(remote_kwargs.pop("start_timeout", 120.0))
        key = as_key(reward_keys)
        settings = EvalSettings(
            num_trajectories=None,
            reward_key=key,
            dump_video=False,
            record_frames=True,
            info_keys=as_info_keys(info_keys),
        )
        options = BackendOptions(
            start_timeout=start_timeout,
            num_gpus=num_gpus,
            ray_kwargs={**remote_kwargs, "name": name},
            info={"reward_keys": list(key)},
        )
        backend = RayBackend.create(WorkerRecipe(settings, env_maker, None, policy_maker, init_fn), options)
        self._front = RequestQueue(backend, _seed_layout, busy_policy="queue")

    @classmethod
    def from_name(
        cls, name: str, *, reward_keys: tuple[str, ...] = ("next", "reward"), start_timeout: float = 120.0
    ) -> RayEvalWorker:
        """Connect to a named worker from any process on the cluster.

        Its ``shutdown()`` kills the actor, as torchrl's does; ``reward_keys``
        must be those the worker was built with.
        """
        backend = RayBackend.attach(name, NAMESPACE, start_timeout, kill_on_shutdown=True)
        built_with = tuple(backend.describe().get("reward_keys", ()))
        if built_with and built_with != as_key(reward_keys):
            raise ValueError(
                f"RayEvalWorker {name!r} was built with reward_keys={built_with}, not {as_key(reward_keys)}: "
                "the reward key is fixed when the worker is created."
            )
        worker = cls.__new__(cls)
        worker._front = RequestQueue(backend, _seed_layout, busy_policy="queue")
        return worker

    def submit(
        self, weights: Any, max_steps: int, *, deterministic: bool = True, break_when_any_done: bool = True
    ) -> None:
        """Start a round with ``weights`` (a TensorDict or module of the policy; None keeps the last).

        A round already running is not disturbed: this one is queued, and both
        results come back from :meth:`poll`, in order.
        """
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps must be a positive int (steps per episode), got {max_steps!r}.")
        overrides = RoundOverrides(max_steps=max_steps, exploration_type="DETERMINISTIC" if deterministic else "RANDOM")
        self._front.submit(
            lambda: _policy_sources(weights), None, sync=False, overrides=overrides, tag=bool(break_when_any_done)
        )

    def poll(self, timeout: float = 0) -> dict[str, Any] | None:
        """The oldest finished result, or None if none is ready within ``timeout`` seconds.

        Keys: ``reward`` (torchrl's per-step figure), ``frames`` ((1, T, C, H, W)
        uint8 or None), ``episode_reward``, ``episode_reward_std``,
        ``episode_reward_ci_low`` / ``_high``, ``episode_length``,
        ``num_episodes``, ``fps``, and ``terminated_fraction`` / ``truncated_fraction``
        / ``info_keys``' means. A failed round raises :class:`simeval.EvalError`.
        """
        return self._front.poll(timeout)

    @property
    def pending(self) -> bool:
        """True while a round is running, queued, or not yet handed out."""
        return self._front.pending

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop a running round and kill the actor (also from a ``from_name`` handle)."""
        self._front.shutdown(timeout)


def _policy_sources(weights: Any) -> dict[str, Any] | None:
    if weights is None:
        return None
    from simeval.weights import as_weights

    return {"policy": as_weights(weights)}


def _seed_layout(raw: dict[str, Any], request: Request) -> dict[str, Any]:
    """torchrl's result keys from simeval's raw metrics (see the module docstring)."""
    if request.tag:  # break_when_any_done
        reward = raw["step_reward_to_first_done"]
    else:
        reward = sum(raw["episode_returns"]) / max(1, sum(raw["episode_lengths"]))
    frames = raw.get("frames")
    if frames is not None:
        import torch

        frames = (
            torch.tensor(frames).permute(0, 3, 1, 2).unsqueeze(0).contiguous()
        )  # copied: Ray's arrays are read-only
    return {
        **(raw.get("end_metrics") or {}),
        "reward": float(reward),
        "frames": frames,
        "episode_reward": raw["reward"],
        "episode_reward_std": raw["reward_std"],
        "episode_reward_ci_low": raw["reward_ci_low"],
        "episode_reward_ci_high": raw["reward_ci_high"],
        "episode_length": raw["episode_length"],
        "num_episodes": raw["num_episodes"],
        "fps": raw["fps"],
    }
