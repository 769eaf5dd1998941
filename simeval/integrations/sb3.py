"""Stable-Baselines3's ``EvalCallback``, with rounds that run beside training instead of inside it.

Two lines in a training script::

    from simeval.integrations.sb3 import EvalCallback

    model.learn(total_timesteps, callback=EvalCallback("HalfCheetah-v5", eval_freq=10_000, log_path="logs"))

Every ``eval_freq`` calls (as SB3 counts them: one per step of the training
VecEnv) the callback snapshots the model as ``model.save`` writes it, with the
training env's VecNormalize statistics of that step, and hands it to a
:class:`simeval.Evaluator`; training goes on while the round runs (in a child
process by default). A finished round is taken in at a later step, as SB3's own
callback would have at the trigger step: ``log_path/evaluations.npz`` in SB3's
layout (``timesteps``, ``results``, ``ep_lengths``), ``eval/mean_reward`` and
``eval/mean_ep_length`` in the model's logger, ``best_model.zip`` (the bytes of
the snapshot that scored best, with its statistics as ``vecnormalize.npz`` beside
it, which ``python -m simeval.launch --checkpoint`` reads) and
``callback_on_new_best``; ``callback_after_eval`` after each round. The zips it
writes name their env (a ``simeval.json`` member SB3 ignores), so
``--checkpoint best_model.zip`` needs no ``--env``; the env id is checked when the
callback is built, not at the first round. When training
ends, the rounds still running are finished and taken in.

Every round plays the same episodes (``seed``): rounds of different steps, and
of different runs, are compared on common random numbers.
"""

from __future__ import annotations

import functools
import io
import os
from typing import TYPE_CHECKING, Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback, EventCallback

from simeval.atomic import write_atomically
from simeval.checkpoints.formats import sb3
from simeval.envs import check_env, make_env
from simeval.integrations.rounds import Rounds

if TYPE_CHECKING:
    from simeval.checkpoints.base import Checkpoint


class EvalCallback(EventCallback):
    """A drop-in for SB3's ``EvalCallback`` whose rounds run beside training.

    Args:
        eval_env: the task to evaluate on: an env id (``"HalfCheetah-v5"``,
            ``"mjlab:<task>"``, ... as :func:`simeval.envs.make_env` takes it), a
            gymnasium env or SB3 VecEnv made from a registered id (its id is used;
            simeval builds its own batched env from it), or a callable returning a
            torchrl env.
        callback_on_new_best: called (``on_step()``) when a round has a new best mean
            reward; returning False stops training, as in SB3.
        callback_after_eval: called after every round is taken in.
        n_eval_episodes: episodes per round.
        eval_freq: evaluate every this many calls (SB3 counts one call per VecEnv step).
        log_path: folder of ``evaluations.npz`` (None: not written).
        best_model_save_path: folder of ``best_model.zip`` (None: not written).
        deterministic: must be True: simeval plays SB3's deterministic action
            (``predict(deterministic=True)``).
        render: must be False (rounds run in another process or thread).
        verbose: 1 prints each round as SB3 does.
        warn: accepted for SB3's signature; unused.
        backend: where rounds run: ``"process"`` (default: a child process with its
            own interpreter, so rounds never contend with training for the GIL),
            ``"thread"`` or ``"ray"``.
        num_envs: sub-envs stepped together in a round (default ``n_eval_episodes``:
            one episode each).
        seed: the rounds' seed: every round plays the same episodes.
        max_steps: episode cap (None: the task's own time limit).
        evaluator_kwargs: more :class:`simeval.Evaluator` arguments (e.g. ``num_gpus``).
    """

    def __init__(
        self,
        eval_env: Any,
        callback_on_new_best: BaseCallback | None = None,
        callback_after_eval: BaseCallback | None = None,
        n_eval_episodes: int = 5,
        eval_freq: int = 10000,
        log_path: str | None = None,
        best_model_save_path: str | None = None,
        deterministic: bool = True,
        render: bool = False,
        verbose: int = 1,
        warn: bool = True,
        *,
        backend: str = "process",
        num_envs: int | None = None,
        seed: int = 0,
        max_steps: int | None = None,
        evaluator_kwargs: dict | None = None,
    ) -> None:
        super().__init__(callback_after_eval, verbose=verbose)
        if not deterministic:
            raise ValueError(
                "EvalCallback(deterministic=False): simeval plays SB3's deterministic action "
                "(predict(deterministic=True)); pass deterministic=True."
            )
        if render:
            raise ValueError("EvalCallback(render=True): rounds run beside training and do not render; pass False.")
        self.callback_on_new_best = callback_on_new_best
        if callback_on_new_best is not None:
            callback_on_new_best.parent = self
        self.env_id = _checked_id(eval_env)
        env_maker = _env_maker(eval_env, num_envs or n_eval_episodes, max_steps)
        self.n_eval_episodes = n_eval_episodes
        self.eval_freq = eval_freq
        self.log_path = os.path.join(log_path, "evaluations") if log_path is not None else None
        self.best_model_save_path = best_model_save_path
        self.deterministic = deterministic
        self.warn = warn
        settings = {"num_trajectories": n_eval_episodes, "seed": seed, "backend": backend, "keep_episodes": True}
        self.rounds = Rounds(env_maker, {"num_gpus": 0, "device": "cpu", **settings, **(evaluator_kwargs or {})})
        self.best_mean_reward = -np.inf
        self.last_mean_reward = -np.inf
        self.evaluations_timesteps: list[int] = []
        self.evaluations_results: list[list[float]] = []
        self.evaluations_length: list[list[int]] = []
        self._snapshots: dict[int, tuple[bytes, dict | None]] = {}
        self._continue = True

    def _init_callback(self) -> None:
        super()._init_callback()  # callback_after_eval
        if self.callback_on_new_best is not None:
            self.callback_on_new_best.init_callback(self.model)
        for path in (self.best_model_save_path, os.path.dirname(self.log_path) if self.log_path else None):
            if path:
                os.makedirs(path, exist_ok=True)

    def _on_step(self) -> bool:
        if self.eval_freq > 0 and self.n_calls % self.eval_freq == 0:
            raw, stats, ck = self._snapshot()
            self._snapshots[self.num_timesteps] = (raw, stats)
            self.rounds.start(ck, self.num_timesteps)
        for result in self.rounds.finished():
            self._record(result)
        return self._continue

    def _on_training_end(self) -> None:
        self.rounds.close(self._record)

    def _snapshot(self) -> tuple[bytes, dict | None, Checkpoint]:
        """The model as ``model.save`` writes it now, its VecNormalize statistics, and simeval's reading of both."""
        buffer = io.BytesIO()
        self.model.save(buffer)
        raw = buffer.getvalue() if self.env_id is None else sb3.with_env(buffer.getvalue(), self.env_id)
        stats = _vecnormalize_stats(self.model.get_vec_normalize_env())
        name = f"the {type(self.model).__name__} model at step {self.num_timesteps}"
        return raw, stats, sb3.read_saved(raw, name, stats)

    def _record(self, result: dict[str, Any]) -> None:
        """One finished round, as SB3's EvalCallback records its evaluation at the trigger step."""
        step = int(result["eval/step"])
        rewards = [float(r) for r in result["eval/episode_returns"]]
        lengths = [int(n) for n in result["eval/episode_lengths"]]
        raw, stats = self._snapshots.pop(step, (None, None))
        if self.log_path is not None:
            self.evaluations_timesteps.append(step)
            self.evaluations_results.append(rewards)
            self.evaluations_length.append(lengths)
            arrays = {
                "timesteps": np.asarray(self.evaluations_timesteps),
                "results": np.asarray(self.evaluations_results),
                "ep_lengths": np.asarray(self.evaluations_length),
            }
            write_atomically(self.log_path + ".npz", lambda f: np.savez(f, **arrays))
        mean_reward, std_reward = float(np.mean(rewards)), float(np.std(rewards))
        mean_length, std_length = float(np.mean(lengths)), float(np.std(lengths))
        self.last_mean_reward = mean_reward
        if self.verbose >= 1:
            print(f"Eval num_timesteps={step}, episode_reward={mean_reward:.2f} +/- {std_reward:.2f}")
            print(f"Episode length: {mean_length:.2f} +/- {std_length:.2f}")
        self.logger.record("eval/mean_reward", mean_reward)
        self.logger.record("eval/mean_ep_length", mean_length)
        if "eval/success_rate" in result:
            self.logger.record("eval/success_rate", float(result["eval/success_rate"]))
        self.logger.record("time/total_timesteps", step, exclude="tensorboard")
        self.logger.dump(step)
        if mean_reward > self.best_mean_reward:
            if self.verbose >= 1:
                print("New best mean reward!")
            if self.best_model_save_path is not None and raw is not None:
                self._save_best(raw, stats)
            self.best_mean_reward = mean_reward
            if self.callback_on_new_best is not None:
                self._continue = self.callback_on_new_best.on_step() and self._continue
        if self.callback is not None:
            self._continue = self._on_event() and self._continue

    def _save_best(self, raw: bytes, stats: dict | None) -> None:
        """``best_model.zip`` (and ``vecnormalize.npz`` beside it, where training normalised) of the best round."""
        folder = self.best_model_save_path
        if stats is not None:
            write_atomically(os.path.join(folder, "vecnormalize.npz"), lambda f: np.savez(f, **stats))
        write_atomically(os.path.join(folder, "best_model.zip"), lambda f: f.write(raw))


def _vecnormalize_stats(vec_normalize: Any) -> dict | None:
    """The statistics simeval folds into the actor, from SB3's VecNormalize (None: none, or norm_obs off)."""
    if vec_normalize is None or not vec_normalize.norm_obs:
        return None
    return {
        "mean": np.array(vec_normalize.obs_rms.mean, dtype=np.float64),
        "var": np.array(vec_normalize.obs_rms.var, dtype=np.float64),
        "clip_obs": float(vec_normalize.clip_obs),
        "epsilon": float(vec_normalize.epsilon),
    }


def _checked_id(eval_env: Any) -> str | None:
    """The env id the rounds will build, checked now (a typo fails here, not mid-training); None for a callable."""
    if not isinstance(eval_env, str) and callable(eval_env) and not hasattr(eval_env, "step"):
        return None
    name = eval_env if isinstance(eval_env, str) else _env_id(eval_env)
    try:
        check_env(name)
    except ValueError as exc:
        raise ValueError(f"EvalCallback(eval_env={name!r}): {exc}") from None
    return name


def _env_maker(eval_env: Any, num_envs: int, max_steps: int | None) -> Any:
    """A picklable ``make_env`` call for ``eval_env`` (an id, a gymnasium env or VecEnv, or a callable)."""
    if isinstance(eval_env, str):
        name = eval_env
    elif callable(eval_env) and not hasattr(eval_env, "step"):
        return eval_env
    else:
        name = _env_id(eval_env)
    return functools.partial(make_env, name, num_envs=num_envs, max_steps=max_steps, obs_norm=False)


def _env_id(env: Any) -> str:
    """The registered id a gymnasium env or SB3 VecEnv was made from; a one-line ValueError if it has none."""
    spec = getattr(env, "spec", None)
    if spec is None and hasattr(env, "get_attr"):  # an SB3 VecEnv (VecNormalize and other wrappers pass it on)
        spec = env.get_attr("spec", [0])[0]
    env_id = getattr(spec, "id", None)
    if not isinstance(env_id, str):
        raise ValueError(
            f"EvalCallback(eval_env={type(env).__name__}): simeval builds its own env from a registered id, and this "
            "env has none; pass the id (e.g. 'HalfCheetah-v5') or a callable returning a torchrl env."
        )
    return env_id
