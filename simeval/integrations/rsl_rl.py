"""Evaluation beside rsl_rl's ``OnPolicyRunner`` (Isaac Lab's and mjlab's runners), every N iterations.

Two lines in a train script, after the runner is built::

    from simeval.integrations.rsl_rl import evaluate_during_training

    evaluate_during_training(runner, "isaaclab:Isaac-Velocity-Flat-Anymal-D-v0", every=50)
    runner.learn(num_learning_iterations=1500)

At every iteration ``it`` with ``it % every == 0`` (rsl_rl's own ``save_interval``
rule) the actor's weights and its empirical normaliser, as ``runner.save`` would
write them, go to a :class:`simeval.Evaluator` whose rounds run beside training
(in a child process by default; ``backend="ray"`` for an actor on its own GPU).
Finished rounds are taken in at later iterations: appended to
``<log_dir>/simeval/results.jsonl`` (the launcher's record of a round) and written
to rsl_rl's log writer (TensorBoard, W&B, Neptune) as ``Eval/*`` at their own
iteration. When ``learn`` returns, the rounds still running are finished first.
The actor is rebuilt from the runner's train config (``runner.cfg``, what
``params/agent.yaml`` holds), so a round's numbers are those of
``python -m simeval.launch --checkpoint model_<it>.pt`` with the same seed.
"""

from __future__ import annotations

import os
from typing import Any

from simeval.checkpoints.formats import rsl_rl
from simeval.integrations.rounds import Rounds, training_rounds, write_scalars


class RslRlEvaluation:
    """The evaluation attached to one runner (made by :func:`evaluate_during_training`).

    Attributes:
        results: every finished round's metrics, in the order they were taken in.
        results_path: ``<log_dir>/simeval/results.jsonl``, or None when the runner logs nowhere.
        rounds: the :class:`~simeval.integrations.rounds.Rounds` running them.
    """

    def __init__(self, runner: Any, rounds: Rounds, every: int) -> None:
        self.runner = runner
        self.rounds = rounds
        self.every = every
        self.results: list[dict[str, Any]] = []
        self.results_path = rounds.evaluator_kwargs.get("results_path")
        self._log = runner.logger.log
        self._learn = runner.learn
        runner.logger.log = self._log_then_evaluate
        runner.learn = self._learn_then_finish

    def _log_then_evaluate(self, *args: Any, **kwargs: Any) -> Any:
        out = self._log(*args, **kwargs)
        it = int(kwargs["it"]) if "it" in kwargs else int(args[0])
        if it % self.every == 0:
            self.rounds.start(self._snapshot(it), it)
        for result in self.rounds.finished():
            self._record(result)
        return out

    def _learn_then_finish(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._learn(*args, **kwargs)
        finally:
            self.rounds.close(self._record)

    def _snapshot(self, it: int) -> Any:
        """simeval's reading of what ``runner.save`` would write now (CPU copies)."""
        state = self.runner.alg.save()["actor_state_dict"]
        data = {"actor_state_dict": {k: v.detach().to("cpu", copy=True) for k, v in state.items()}, "iter": it}
        return rsl_rl.read_saved(data, dict(self.runner.cfg), f"the rsl_rl actor at iteration {it}")

    def _record(self, result: dict[str, Any]) -> None:
        self.results.append(result)
        writer = getattr(self.runner.logger, "writer", None)
        write_scalars(writer.add_scalar if writer is not None else None, result)


def evaluate_during_training(
    runner: Any,
    env: str,
    *,
    every: int = 50,
    episodes: int = 64,
    num_envs: int | None = None,
    max_steps: int | None = None,
    seed: int = 0,
    device: str = "cpu",
    backend: str = "process",
    **evaluator_kwargs: Any,
) -> RslRlEvaluation:
    """Evaluate ``runner``'s actor every ``every`` iterations beside its training.

    Args:
        runner: an rsl_rl ``OnPolicyRunner`` (or a subclass: Isaac Lab's, mjlab's), built.
        env: the env to evaluate on, as :func:`simeval.envs.make_env` names it
            (``isaaclab:<task>``, ``mjlab:<task>``, a gymnasium id).
        every: evaluate at iterations divisible by this (0 included).
        episodes: episodes per round.
        num_envs: sub-envs per round (default ``episodes``: one episode each, where
            common random numbers hold on simulators that reset inside their step).
        max_steps: episode cap (None: the task's own).
        seed: the rounds' seed: every round plays the same episodes.
        device: where the eval env and policy run (``"cuda:1"`` for a second GPU).
        backend: ``"process"`` (default), ``"ray"`` or ``"thread"``.
        **evaluator_kwargs: more :class:`simeval.Evaluator` arguments (e.g. ``num_gpus``,
            ``init_fn``).

    Returns:
        The attached :class:`RslRlEvaluation` (its ``results`` fill in as rounds finish).
    """
    if not isinstance(every, int) or every < 1:
        raise ValueError(f"evaluate_during_training(every={every!r}): a whole number of iterations >= 1.")
    log_dir = runner.logger.log_dir
    results_path = os.path.join(log_dir, "simeval", "results.jsonl") if log_dir else None
    rounds = training_rounds(
        env, episodes=episodes, num_envs=num_envs, max_steps=max_steps, seed=seed, device=device, backend=backend,
        results_path=results_path, evaluator_kwargs=evaluator_kwargs,
    )  # fmt: skip
    return RslRlEvaluation(runner, rounds, every)
