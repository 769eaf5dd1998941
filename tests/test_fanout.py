"""One round split over K Ray workers: the same episodes for any K, faults re-run, bad input refused."""

from __future__ import annotations

import functools
import json
import os
import signal
import threading
import time

import pytest
from helpers import cheetah, const_policy, count_envs, mlp_policy, slow_cheetah, vecnorm_of, warmed_cheetah

from simeval import EvalError, Evaluator
from simeval.conditions import Condition, episode_seed
from simeval.envs import OBS_NORM_ID, make_env

# Four workers on the test cluster's two logical CPUs: each asks for half a CPU.
HALF_CPU = {"num_cpus": 0.5}


def _fanout(env_factory, k: int, **kwargs) -> Evaluator:
    kwargs.setdefault("ray_kwargs", HALF_CPU)
    return Evaluator(env_factory, backend="ray", num_gpus=0, num_workers=k, **kwargs)


@pytest.fixture(scope="module")
def trained():
    """A policy and the VecNorm statistics of a (short) training run, as training would stream them."""
    train_env = warmed_cheetah(num_envs=4, steps=40)
    return {"policy": mlp_policy(seed=3), OBS_NORM_ID: vecnorm_of(train_env)}


def test_a_seeded_round_gives_the_same_episodes_in_the_same_order_for_1_2_and_4_workers(ray_cluster, trained):
    # 16 sub-envs, 20 episodes: uneven quotas (sub-envs 12..15 run two), shards of 16, 8 and 4 sub-envs.
    factory = functools.partial(cheetah, num_envs=16, obs_norm=True, max_steps=40)
    runs = {}
    for k in (1, 2, 4):
        ev = _fanout(
            factory, k, policy_factory=mlp_policy, num_trajectories=20, max_steps=40, seed=11, keep_episodes=True
        )
        try:
            runs[k] = ev.evaluate(weights_dict=trained, step=7)
        finally:
            ev.shutdown()
    reference = runs[1]["eval/episode_returns"].tolist()
    assert len(reference) == 20 and len(set(reference)) == 20  # distinct episodes, not one replayed
    for k in (2, 4):
        result = runs[k]
        assert result["eval/episode_returns"].tolist() == reference, f"{k} workers changed the episodes"
        assert result["eval/episode_lengths"].tolist() == runs[1]["eval/episode_lengths"].tolist()
        # (frame_count may drop: a shard stops once its own sub-envs met their quotas)
        for key in ("reward", "reward_std", "reward_ci_low", "reward_ci_high", "num_episodes", "episode_length"):
            assert result[f"eval/{key}"] == runs[1][f"eval/{key}"], key
        assert result["eval/step"] == 7
        workers = result["eval/workers"]
        assert [w["worker"] for w in workers] == list(range(k))
        assert len({w["pid"] for w in workers}) == k  # k processes really ran it
        assert all(w["restarts"] == 0 for w in workers)


# Both ranged, so each episode records its draws: observation noise (simeval's Perturb adds it from the episode's
# seed, so only the returns show it) and body mass (set in the native env's simulations at each reset).
DRAWN = {"observation_noise": [0.05, 0.5], "body_mass_scale": [0.5, 2.0]}


def test_a_seeded_round_under_conditions_gives_one_workers_episodes_seeds_and_draws_on_two(ray_cluster, tmp_path):
    # 8 sub-envs (4 rows per worker: the policy's output for a row is then the same bits as in 8 rows; see
    # docs/ray.md), 10 episodes: sub-envs 6 and 7 run two, so worker 1 (global sub-envs 4..7) runs episodes 0
    # and 1. Its conditions must come from the global episode seeds, not from its local sub-env numbers.
    factory = functools.partial(make_env, "HalfCheetah-v5", num_envs=8, max_steps=20, obs_norm=False, condition=DRAWN)
    weights = {"policy": mlp_policy(seed=3)}
    records = {}
    for k in (1, 2):
        path = tmp_path / f"results-{k}.jsonl"
        ev = _fanout(
            factory, k, policy_factory=mlp_policy, num_trajectories=10, max_steps=20, seed=5, keep_episodes=True,
            results_path=str(path),
        )  # fmt: skip
        try:
            ev.evaluate(weights_dict=weights, step=1)
        finally:
            ev.shutdown()
        (records[k],) = [json.loads(line) for line in path.read_text().splitlines()]
    one, two = records[1], records[2]
    assert [w["worker"] for w in two["workers"]] == [0, 1]  # really split: two shards, two workers
    assert len(set(one["episode_returns"])) == 10  # distinct episodes, not one replayed
    for key in ("episode_returns", "episode_lengths", "episode_seeds", "episode_conditions"):
        assert two[key] == one[key], f"2 workers changed {key}"
    # the seeds are the round's: episode k of global sub-env i has episode_seed(5, i, k)
    quotas = (1, 1, 1, 1, 1, 1, 2, 2)
    assert sorted(one["episode_seeds"]) == sorted(episode_seed(5, i, k) for i in range(8) for k in range(quotas[i]))
    # and each episode ran under the values its recorded seed draws (recomputed here, from the seed alone)
    condition = Condition.parse(DRAWN)
    for name in DRAWN:
        expected = [condition.draw(seed)[name] for seed in one["episode_seeds"]]
        assert two["episode_conditions"][name] == expected, name
        assert len(set(expected)) == 10 and all(DRAWN[name][0] <= v <= DRAWN[name][1] for v in expected)


def test_async_api_busy_policies_on_result_and_keep_episodes_behave_as_with_one_worker(ray_cluster):
    seen = []
    factory = functools.partial(count_envs, num_envs=4, length=3)
    ev = _fanout(
        factory,
        2,
        policy_factory=const_policy,
        num_trajectories=6,
        busy_policy="queue",
        keep_episodes=True,
        on_result=lambda td: seen.append((int(td["eval/step"]), float(td["eval/reward"]))),
    )
    try:
        assert ev.trigger_eval(const_policy(w=1.0), step=1)
        assert ev.trigger_eval(const_policy(w=2.0), step=2)  # queued behind the first
        first, second = ev.wait(120), ev.wait(120)
        assert (first["eval/step"], first["eval/reward"]) == (1, 3.0)
        assert (second["eval/step"], second["eval/reward"]) == (2, 6.0)
        assert second["eval/episode_returns"].tolist() == [6.0] * 6
        assert seen == [(1, 3.0), (2, 6.0)]  # on_result ran for each, in order, before it was handed out
        assert not ev.pending and ev.poll() is None
        assert ev.evaluate(const_policy(w=3.0), step=3)["eval/reward"] == 9.0
    finally:
        ev.shutdown()
    skipping = _fanout(factory, 2, policy_factory=const_policy, num_trajectories=2, busy_policy="skip")
    erring = _fanout(factory, 2, policy_factory=const_policy, num_trajectories=2)
    try:
        assert skipping.trigger_eval(const_policy(w=1.0), step=1)
        assert not skipping.trigger_eval(const_policy(w=5.0), step=2)  # dropped while the first runs
        assert skipping.wait(120)["eval/step"] == 1
        assert erring.trigger_eval(step=1)
        with pytest.raises(RuntimeError, match="pending"):
            erring.trigger_eval(step=2)
        assert erring.wait(120)["eval/step"] == 1
    finally:
        skipping.shutdown()
        erring.shutdown()


def _kill_when_running(ev: Evaluator, index: int, after: float) -> threading.Thread:
    """SIGKILL worker ``index``'s process ``after`` seconds into the round (as a crash or OOM kill would)."""

    def kill():
        time.sleep(after)
        os.kill(ev._backend._slots[index].where["pid"], signal.SIGKILL)

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread


def test_a_worker_killed_mid_round_has_its_share_rerun_and_the_result_is_unchanged(ray_cluster, trained):
    factory = functools.partial(slow_cheetah, num_envs=8, delay=0.01, max_steps=60)
    ev = _fanout(factory, 2, policy_factory=mlp_policy, num_trajectories=16, max_steps=60, seed=5, keep_episodes=True)
    try:
        clean = ev.evaluate(weights_dict=trained, step=1)  # ~2 rounds of 60 steps per shard: over a second
        assert [w["restarts"] for w in clean["eval/workers"]] == [0, 0]
        killer = _kill_when_running(ev, 1, after=0.5)
        faulted = ev.evaluate(weights_dict=trained, step=2)
        killer.join()
        assert faulted["eval/episode_returns"].tolist() == clean["eval/episode_returns"].tolist()
        assert faulted["eval/episode_lengths"].tolist() == clean["eval/episode_lengths"].tolist()
        assert faulted["eval/reward"] == clean["eval/reward"]
        assert [w["restarts"] for w in faulted["eval/workers"]] == [0, 1]
        # the dead worker's slot has a fresh actor for the next round
        again = ev.evaluate(weights_dict=trained, step=3)
        assert again["eval/episode_returns"].tolist() == clean["eval/episode_returns"].tolist()
    finally:
        ev.shutdown()


def test_a_single_worker_killed_mid_round_is_replaced_and_the_round_rerun(ray_cluster):
    factory = functools.partial(count_envs, num_envs=2, length=50)
    ev = Evaluator(factory, policy_factory=const_policy, num_trajectories=4, backend="ray", num_gpus=0)
    try:
        assert ev.evaluate(step=1)["eval/reward"] == 50.0
        # count_envs has no step delay: kill it while it waits for the next request, then send one
        os.kill(ev._backend._slots[0].where["pid"], signal.SIGKILL)
        result = ev.evaluate(const_policy(w=2.0), step=2)
        assert result["eval/reward"] == 100.0 and result["eval/workers"][0]["restarts"] == 1
    finally:
        ev.shutdown()


def test_past_max_restarts_the_round_fails_naming_the_worker_and_the_next_round_runs(ray_cluster, trained):
    factory = functools.partial(slow_cheetah, num_envs=4, delay=0.02, max_steps=60)
    ev = _fanout(factory, 2, policy_factory=mlp_policy, num_trajectories=8, max_steps=60, seed=5, max_restarts=0)
    try:
        ev.evaluate(weights_dict=trained, step=1)
        host = ev._backend._slots[1].where["host"]
        killer = _kill_when_running(ev, 1, after=0.5)
        start = time.monotonic()
        with pytest.raises(EvalError, match=rf"Ray eval worker 1 of 2 on {host} .* died 1 time\(s\).*max_restarts=0"):
            ev.evaluate(weights_dict=trained, step=2)
        killer.join()
        assert time.monotonic() - start < 60
        assert not ev.pending
        assert ev.evaluate(weights_dict=trained, step=3)["eval/num_episodes"] == 8
    finally:
        ev.shutdown()


def test_a_worker_that_cannot_be_scheduled_fails_the_round_within_start_timeout(ray_cluster):
    factory = functools.partial(count_envs, num_envs=4)
    ev = _fanout(
        factory,
        2,
        policy_factory=const_policy,
        num_trajectories=4,
        start_timeout=3,
        ray_kwargs={**HALF_CPU, "resources": {"simeval_absent": 1}},
    )
    try:
        start = time.monotonic()
        with pytest.raises(EvalError, match=r"Ray eval worker \d of 2 did not start within 3 s.*simeval_absent"):
            ev.evaluate()
        assert time.monotonic() - start < 30
    finally:
        ev.shutdown()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_workers": 0}, r"num_workers must be a whole number >= 1, got 0\."),
        ({"num_workers": 2, "backend": "thread"}, r"num_workers=2 needs backend='ray'"),
        ({"num_workers": 2, "backend": "process"}, r"num_workers=2 needs backend='ray'"),
        ({"max_restarts": -1, "backend": "ray"}, r"max_restarts must be a whole number >= 0, got -1\."),
    ],
)
def test_bad_worker_counts_are_one_line_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Evaluator(functools.partial(count_envs, num_envs=4), policy_factory=const_policy, **kwargs)


def test_what_cannot_be_split_or_placed_is_refused_before_any_worker_starts(ray_cluster):
    def no_num_envs():
        return count_envs(4)

    cases = [
        (dict(env=no_num_envs), "has no num_envs keyword"),
        (dict(env=functools.partial(count_envs, num_envs=2), num_workers=4), "num_workers=4 is more than"),
        (dict(metrics_fn=lambda td: {}), "metrics_fn sees a round's trajectories in one place"),
        (dict(num_gpus=1, ray_kwargs={}), "2 Ray eval worker\\(s\\) with num_gpus=1 ask for 2 GPUs but the Ray"),
        (dict(num_gpus=0, ray_kwargs={"num_cpus": 2}), "ask for 4 CPUs but the Ray cluster has 2"),
    ]
    for overrides, message in cases:
        kwargs = dict(env=functools.partial(count_envs, num_envs=4), num_workers=2, num_gpus=0, ray_kwargs=HALF_CPU)
        kwargs.update(overrides)
        env = kwargs.pop("env")
        with pytest.raises(ValueError, match=message) as info:
            Evaluator(env, policy_factory=const_policy, backend="ray", **kwargs)
        assert "\n" not in str(info.value)
