"""Isaac Lab rounds without the Collector (``simeval.worker.tensor_rollout``) give the Collector's numbers exactly.

One Isaac Lab process runs this file as a script: seeded rounds through the
public ``Evaluator`` (thread backend) on the offline direct and manager-based
cartpoles, each once by default and once with ``collector_cls="Collector"``, in
cases that exercise what the loop has to reproduce: uneven quotas, several
episodes per sub-env, terminations and Isaac Lab's time limit at different
steps, episodes that straddle Collector batches, frozen VecNorm statistics from a training run with the checkpoint's own
(probabilistic, deterministic-mode) actor, a plain MLP, Isaac Lab's logged
scalars read at episode ends, and two rounds in a row. It also records which loop each worker chose.

Both loops read one tally (``RoundTally``), so comparing them cannot see a number that tally gets wrong:
the direct plain-MLP case (episodes that end at 89 to 150 steps, in batches of 75) is also held to an
oracle that shares no code with the Evaluator (tests/returns_oracle.py: the env stepped with torchrl's own
auto-reset, rewards summed per sub-env). Isaac Lab resets sub-envs inside its step, so every return is the
tally's sum of rewards, carried across batches for the episodes that straddle them.

    python test_tensor_rollout.py OUT.json
"""

from __future__ import annotations

import functools
import json
import os
import sys

import pytest
from isaac_script import probe_of

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "simeval", "data")
VECNORM_CKPT = os.path.join(DATA, "isaaclab_cartpole_ppo", "step_000245760.pt")
DIRECT, MANAGER = "isaaclab:Simeval-Isaac-Cartpole-Direct", "isaaclab:Simeval-Isaac-Cartpole"
# (name, task, num_envs, episodes, Isaac Lab's episode cap, policy); a Collector batch is 128 steps, so
# episodes that terminate early straddle batches.
CASES = [
    ("direct-vecnorm-checkpoint", DIRECT, 16, 20, 30, "checkpoint"),
    ("direct-random-mlp", DIRECT, 8, 20, 150, "mlp"),
    ("manager-random-mlp", MANAGER, 6, 9, 25, "mlp"),
]
# The case the bare-loop oracle runs: a plain MLP (no VecNorm statistics to load into its env), episodes that
# straddle batches (the manager-based case's all run to its 25-step limit: one batch each).
ORACLE_CASE = "direct-random-mlp"
SEED = 5  # every round's, and the oracle's
KEYS = ("episode_returns", "episode_lengths", "reward", "reward_std", "reward_ci_low", "reward_ci_high")

pytestmark = [pytest.mark.required, pytest.mark.timeout(1500)]  # the first test waits for isaac_scripts


@pytest.fixture(scope="module")
def probed(isaac_scripts) -> dict:
    return probe_of(isaac_scripts, __name__)


@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_the_tensor_loop_gives_the_collectors_numbers_bit_for_bit(probed, case):
    fast, slow = probed[case]["tensor"], probed[case]["collector"]
    assert len(fast) == len(slow) == 2  # two rounds in a row
    for a, b in zip(fast, slow, strict=True):
        assert a == b  # every metric, every per-episode list, the log values and the env steps
        assert a["eval/num_episodes"] == probed[case]["episodes"]


def test_both_loops_give_the_returns_of_a_bare_loop_over_the_env(probed):
    """Returns (float64 sums of the float32 rewards: 1e-6 relative) and lengths, episode by episode, in order."""
    from returns_oracle import BareEpisodes, assert_same_episodes

    from simeval.worker.eval_worker import batch_steps

    _, _, num_envs, episodes, max_steps, _ = next(c for c in CASES if c[0] == ORACLE_CASE)
    oracle = BareEpisodes(**probed[ORACLE_CASE]["oracle"])
    assert len(oracle.lengths) == episodes and len(set(oracle.lengths)) > 3  # terminations and the time limit
    # Episodes end mid-batch, and later ones straddle the batches (the Collector's and the tensor loop's: 75 steps).
    assert oracle.straddling(batch_steps(max_steps, num_envs)) >= episodes // 2
    for loop in ("tensor", "collector"):
        for result in probed[ORACLE_CASE][loop]:
            assert_same_episodes(result, oracle, "float64")


def test_the_cases_cover_terminations_time_limits_logs_and_uneven_quotas(probed):
    rounds = [r for case in CASES for r in probed[case[0]]["tensor"]]
    assert any(0 < r["eval/terminated_fraction"] < 1 for r in rounds)  # both ends in one round
    assert any("eval/log/Episode_Reward/alive" in r for r in rounds)  # the manager-based task's log
    assert all("eval/log/Metrics/success_rate" in r for r in rounds)
    lengths = {n for r in rounds for n in r["eval/episode_lengths"]}
    assert len(lengths) > 3


def test_batches_divide_isaac_labs_own_episode_length_so_no_round_steps_past_it(probed):
    from simeval.worker.eval_worker import batch_steps

    for name, _, num_envs, _, max_steps, _ in CASES:
        horizon = batch_steps(max_steps, num_envs)  # 30, 75, 25 (a divisor of the task's length), not 128
        assert max_steps % horizon == 0
        for r in probed[name]["tensor"]:
            assert (r["eval/frame_count"] // num_envs) % horizon == 0, name


def test_each_worker_took_the_loop_its_settings_allow(probed):
    assert probed["loops"] == {
        "default": "TensorRollout",
        "collector_cls": None,
        "info_keys": None,
        "condition": None,
    }


# ---- the Isaac Lab process ----


def _plain(result: dict) -> dict:
    drop = ("eval/fps", "eval/video", "eval/time", "eval/wall_time")
    return {k: v.tolist() if hasattr(v, "tolist") else v for k, v in result.items() if k not in drop}


def _seeded_mlp(env):
    """The same random 32-32 MLP in every evaluator (a thread-backend worker leaves torch's generator alone)."""
    import torch

    from simeval.policies import mlp_policy

    torch.manual_seed(0)
    return mlp_policy(env, hidden=(32, 32))


def _rounds(task, num_envs, episodes, max_steps, policy, collector: bool) -> list[dict]:
    import simeval
    from simeval.envs import make_env
    from simeval.factories import build_policy

    weights = None
    if policy == "checkpoint":
        ck = simeval.load_checkpoint(VECNORM_CKPT)
        factory = functools.partial(build_policy, ck.policy_factory, ck.policy_kwargs)
        weights, norm = ck.weights_dict, True
    else:
        factory, norm = _seeded_mlp, False
    kwargs = {"collector_cls": "Collector"} if collector else {}
    ev = simeval.Evaluator(
        functools.partial(make_env, task, num_envs=num_envs, device="cpu", max_steps=max_steps, obs_norm=norm),
        policy_factory=factory,
        num_trajectories=episodes,
        backend="thread",
        seed=SEED,
        keep_episodes=True,
        **kwargs,
    )
    try:
        return [_plain(ev.evaluate(weights_dict=weights, step=i)) for i in range(2)]
    finally:
        ev.shutdown()


def _oracle(task, num_envs, episodes, max_steps) -> dict:
    """The bare loop's episodes (returns_oracle.bare_loop) on an env of the case's own, same policy and seed."""
    import dataclasses

    from returns_oracle import bare_loop

    from simeval.envs import make_env

    env = make_env(task, num_envs=num_envs, device="cpu", max_steps=max_steps, obs_norm=False)
    try:
        return dataclasses.asdict(bare_loop(env, _seeded_mlp(env), episodes, seed=SEED))
    finally:
        env.close()


def _loop(**settings) -> str | None:
    from simeval.envs import make_env
    from simeval.policies import mlp_policy
    from simeval.settings import EvalSettings
    from simeval.worker.eval_worker import EvalWorker

    condition = settings.pop("condition", None)
    factory = functools.partial(make_env, DIRECT, num_envs=4, device="cpu", max_steps=10, condition=condition)
    worker = EvalWorker(EvalSettings(num_trajectories=4, **settings), env_factory=factory, policy_factory=mlp_policy)
    worker.build()
    try:
        return None if worker._direct is None else type(worker._direct).__name__
    finally:
        worker.close()


def _probe(out: str) -> None:
    result = {}
    for name, task, num_envs, episodes, max_steps, policy in CASES:
        result[name] = {
            "episodes": episodes,
            "tensor": _rounds(task, num_envs, episodes, max_steps, policy, collector=False),
            "collector": _rounds(task, num_envs, episodes, max_steps, policy, collector=True),
        }
        if name == ORACLE_CASE:
            result[name]["oracle"] = _oracle(task, num_envs, episodes, max_steps)
    result["loops"] = {
        "default": _loop(),
        "collector_cls": _loop(collector_cls="Collector"),
        "info_keys": _loop(info_keys=("log/Metrics/success_rate",)),
        "condition": _loop(condition={"observation_noise": 0.1}),
    }
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/: returns_oracle
    _probe(sys.argv[1])
