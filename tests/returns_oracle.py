"""An oracle for the Evaluator's per-episode returns and lengths that shares no code with it: a bare loop.

:func:`bare_loop` steps an env with a policy as a user's own loop would (torchrl's
``reset`` and ``step_and_maybe_reset``, nothing of simeval's), adds each sub-env's raw
``("next", "reward")`` step by step until its ``("next", "done")``, counts the steps itself,
and keeps each sub-env's first ``(N + i) // n`` complete episodes in (sub-env, order) order:
the selection docs/evaluator.md documents. It never reads RewardSum's ``episode_reward``,
StepCounter's ``step_count``, ``EpisodeTally`` or ``metrics.episode_quotas``.

Each episode's return is kept in two precisions, so that either reading of the
Evaluator can be held to 1e-6 relative without a tolerance that hides a dropped step:

* ``returns64``: float64 sums of the float32 rewards in step order. The Evaluator's
  tally (envs without RewardSum, and every native-autoreset env: Isaac Lab, mjlab) sums
  the same float32 values in float64, in another order: they agree to ~1e-15.
* ``returns32``: float32 running sums in step order, as RewardSum (and the loops without
  the Collector that reproduce it: the native env's, the Warp env's) adds them: bit for bit.

Also a documented precondition: the loop runs with one torch intra-op thread, as an eval
worker's policy does (the thread and process backends set it), so the policy's matrix
products round as the worker's do.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch

REL = 1e-6  # relative tolerance of every comparison: see the module docstring


@dataclass
class BareEpisodes:
    """The kept episodes of a bare loop, in (sub-env, order) order."""

    quotas: list[int]
    returns64: list[float] = field(default_factory=list)
    returns32: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    sub_envs: list[int] = field(default_factory=list)
    # ("next", "terminated") and ("next", "truncated") at each episode's last step (empty: the env has none)
    terminated: list[bool] = field(default_factory=list)
    truncated: list[bool] = field(default_factory=list)
    # (first step, last step) of each episode, counted per sub-env from the round's reset (0 is the first step)
    spans: list[tuple[int, int]] = field(default_factory=list)

    def straddling(self, horizon: int) -> int:
        """How many kept episodes have steps in two or more batches of ``horizon`` steps (batches start at step 0)."""
        return sum(first // horizon != last // horizon for first, last in self.spans)


def quotas(num_episodes: int, num_envs: int) -> list[int]:
    """Sub-env ``i`` of ``n`` keeps ``(N + i) // n`` episodes (docs/evaluator.md: stable-baselines3's scheme)."""
    return [(num_episodes + i) // num_envs for i in range(num_envs)]


def bare_loop(env, policy, num_episodes: int, seed: int | None, max_steps: int = 100_000) -> BareEpisodes:
    """Step ``env`` with ``policy`` (deterministic exploration) from ``env.set_seed(seed)`` and a reset.

    Args:
        env: a batched torchrl env (any batch shape: sub-envs are its flattened batch, row-major).
        policy: a TensorDict policy that writes "action".
        num_episodes: N, the episodes of the round whose choice is reproduced.
        seed: what the Evaluator's round seeds the env with (None: not reseeded).
        max_steps: a guard against a loop that never ends (an AssertionError past it).
    """
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    n = max(1, int(torch.Size(env.batch_size).numel()))
    out = BareEpisodes(quotas(num_episodes, n))
    kept: list[list[tuple]] = [[] for _ in range(n)]
    sum64 = torch.zeros(n, dtype=torch.float64)
    sum32 = torch.zeros(n, dtype=torch.float32)
    length = torch.zeros(n, dtype=torch.long)
    first = torch.zeros(n, dtype=torch.long)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    was_training = getattr(policy, "training", False)
    if hasattr(policy, "eval"):
        policy.eval()
    try:
        with torch.inference_mode(), set_exploration_type(ExplorationType.DETERMINISTIC):
            if seed is not None:
                env.set_seed(seed)
            td = env.reset()
            for step in range(max_steps):
                if all(len(kept[i]) >= out.quotas[i] for i in range(n)):
                    break
                td = policy(td)
                td, td_next = env.step_and_maybe_reset(td)
                reward = td.get(("next", "reward")).detach().cpu().reshape(n)
                done = td.get(("next", "done")).detach().cpu().reshape(n)
                flags = [td.get(("next", k), None) for k in ("terminated", "truncated")]
                flags = [None if f is None else f.detach().cpu().reshape(n) for f in flags]
                assert reward.dtype == torch.float32, reward.dtype
                sum64 += reward.double()
                sum32 += reward
                length += 1
                for i in done.nonzero().flatten().tolist():
                    if len(kept[i]) < out.quotas[i]:
                        ends = tuple(None if f is None else bool(f[i]) for f in flags)
                        kept[i].append((float(sum64[i]), float(sum32[i]), int(length[i]), int(first[i]), step, ends))
                    sum64[i], sum32[i], length[i], first[i] = 0.0, 0.0, 0, step + 1
                td = td_next
            else:
                raise AssertionError(f"the bare loop did not finish {num_episodes} episodes in {max_steps} steps")
    finally:
        torch.set_num_threads(threads)
        if was_training:
            policy.train()
    for i, episodes in enumerate(kept):
        for r64, r32, steps, start, last, (terminated, truncated) in episodes:
            out.returns64.append(r64)
            out.returns32.append(r32)
            out.lengths.append(steps)
            out.sub_envs.append(i)
            out.spans.append((start, last))
            if terminated is not None:
                out.terminated.append(terminated)
            if truncated is not None:
                out.truncated.append(truncated)
    return out


def assert_same_episodes(result: dict, oracle: BareEpisodes, precision: str, prefix: str = "eval") -> None:
    """An Evaluator result's (``keep_episodes``) episodes are the oracle's, in order.

    Lengths and end flags exactly; returns and their mean to ``REL`` against the oracle's ``precision``
    sums ("float64": the tally's; "float32": RewardSum's). Tensors or plain lists (a result sent as JSON).
    """
    assert precision in ("float64", "float32"), precision
    want = oracle.returns64 if precision == "float64" else oracle.returns32

    def plain(value):
        return value.tolist() if hasattr(value, "tolist") else list(value)

    lengths, returns = plain(result[f"{prefix}/episode_lengths"]), plain(result[f"{prefix}/episode_returns"])
    assert lengths == oracle.lengths, f"episode lengths {lengths}, the bare loop's {oracle.lengths}"
    assert returns == pytest.approx(want, rel=REL, abs=0), f"episode returns {returns}, the bare loop's {want}"
    mean = float(result[f"{prefix}/reward"])
    assert mean == pytest.approx(sum(want) / len(want), rel=REL, abs=0), (mean, sum(want) / len(want))
    for flag in ("terminated", "truncated"):  # read at the same last steps
        got = result.get(f"{prefix}/episode_{flag}")
        if getattr(oracle, flag) and got is not None:
            assert [bool(v) for v in plain(got)] == getattr(oracle, flag), f"episode_{flag}"


def without_reward_sum(factory, **kwargs):
    """``factory(**kwargs)`` (a ``make_env`` layout) with its last transform, RewardSum, taken off.

    The Evaluator then has no running return to read at an episode's end: its tally sums the rewards.
    """
    from torchrl.envs import RewardSum

    env = factory(**kwargs)
    assert isinstance(env.transform[-1], RewardSum), env.transform
    env.transform.pop()
    return env
