"""Evaluation beside skrl's trainers (``SequentialTrainer``, ``ParallelTrainer``, skrl's ``Runner``), every N timesteps.

Two lines in a train script, once the agent (or skrl's ``Runner``) is built::

    from simeval.integrations.skrl import evaluate_during_training

    evaluate_during_training(runner, "isaaclab:Isaac-Cartpole-Direct-v0", every=16_000)
    runner.run()

At every timestep ``t`` with ``t % every == 0`` (counted as skrl counts them for
``checkpoint_interval``: after ``post_interaction``, from 1) the agent's modules, as
``agent.write_checkpoint`` would save them (the policy and its observation
preprocessor), go to a :class:`simeval.Evaluator` whose rounds run beside
training. Finished rounds are appended to
``<experiment_dir>/simeval/results.jsonl`` and written to skrl's TensorBoard writer
as ``Eval/*``; at the last timestep the rounds still running are finished first.
The actor is rebuilt from the runner's config (``models.policy`` in skrl's model
instantiator format, what Isaac Lab writes to ``params/agent.yaml``) where there is
one, else from the weights (ELU activations), as
``python -m simeval.launch --checkpoint agent_<t>.pt`` does.
"""

from __future__ import annotations

import os
from typing import Any

from simeval.checkpoints.formats import skrl
from simeval.integrations.rounds import Rounds, training_rounds, write_scalars


class SkrlEvaluation:
    """The evaluation attached to one skrl agent (made by :func:`evaluate_during_training`).

    Attributes:
        results: every finished round's metrics, in the order they were taken in.
        rounds: the :class:`~simeval.integrations.rounds.Rounds` running them.
    """

    def __init__(self, agent: Any, agent_cfg: dict | None, rounds: Rounds, every: int) -> None:
        self.agent = agent
        self.agent_cfg = agent_cfg
        self.rounds = rounds
        self.every = every
        self.results: list[dict[str, Any]] = []
        self._post_interaction = agent.post_interaction
        agent.post_interaction = self._post_interaction_then_evaluate

    def _post_interaction_then_evaluate(self, *, timestep: int, timesteps: int) -> None:
        self._post_interaction(timestep=timestep, timesteps=timesteps)
        done = timestep + 1  # skrl counts checkpoints this way
        if done % self.every == 0:
            self.rounds.start(self._snapshot(done), done)
        if done >= timesteps:
            self.rounds.close(self._record)
        else:
            for result in self.rounds.finished():
                self._record(result)

    def _snapshot(self, timestep: int) -> Any:
        """simeval's reading of what ``agent.write_checkpoint`` would save now (CPU copies)."""
        data = {}
        for name, module in self.agent.checkpoint_modules.items():
            state = module.state_dict() if hasattr(module, "state_dict") else module
            data[name] = {k: v.detach().to("cpu", copy=True) if hasattr(v, "detach") else v for k, v in state.items()}
        return skrl.read_saved(data, self.agent_cfg, f"the skrl agent at timestep {timestep}", timestep)

    def _record(self, result: dict[str, Any]) -> None:
        self.results.append(result)
        writer = getattr(self.agent, "writer", None)
        if writer is not None:  # skrl's own SummaryWriter takes keywords
            write_scalars(lambda tag, value, step: writer.add_scalar(tag=tag, value=value, timestep=step), result)


def evaluate_during_training(
    agent: Any,
    env: str,
    *,
    every: int = 10_000,
    agent_cfg: dict | None = None,
    episodes: int = 64,
    num_envs: int | None = None,
    max_steps: int | None = None,
    seed: int = 0,
    device: str = "cpu",
    backend: str = "process",
    **evaluator_kwargs: Any,
) -> SkrlEvaluation:
    """Evaluate an skrl agent's policy every ``every`` timesteps beside its training.

    Args:
        agent: an skrl agent (PPO, SAC, ...), or skrl's ``Runner`` (its agent and config are used).
        env: the env to evaluate on, as :func:`simeval.envs.make_env` names it.
        every: evaluate at timesteps divisible by this.
        agent_cfg: skrl's runner config with ``models`` (None: the Runner's, else the
            architecture is inferred from the weights).
        episodes: episodes per round.
        num_envs: sub-envs per round (default ``episodes``).
        max_steps: episode cap (None: the task's own).
        seed: the rounds' seed: every round plays the same episodes.
        device: where the eval env and policy run.
        backend: ``"process"`` (default), ``"ray"`` or ``"thread"``.
        **evaluator_kwargs: more :class:`simeval.Evaluator` arguments.

    Returns:
        The attached :class:`SkrlEvaluation` (its ``results`` fill in as rounds finish).
    """
    if not isinstance(every, int) or every < 1:
        raise ValueError(f"evaluate_during_training(every={every!r}): a whole number of timesteps >= 1.")
    if hasattr(agent, "agent") and hasattr(agent, "trainer"):  # skrl's Runner
        agent_cfg = agent_cfg if agent_cfg is not None else getattr(agent, "_cfg", None)
        agent = agent.agent
    directory = getattr(agent, "experiment_dir", None)
    results_path = os.path.join(directory, "simeval", "results.jsonl") if directory else None
    rounds = training_rounds(
        env, episodes=episodes, num_envs=num_envs, max_steps=max_steps, seed=seed, device=device, backend=backend,
        results_path=results_path, evaluator_kwargs=evaluator_kwargs,
    )  # fmt: skip
    return SkrlEvaluation(agent, agent_cfg, rounds, every)
