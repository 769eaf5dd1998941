"""What episodes' last steps say: terminated/truncated fractions, info_keys, the env's "log" entries.

Real MuJoCo envs; the expected numbers come from the kept episodes' padded
trajectories (helpers.episode_ends, a metrics_fn) or from a direct reading of
the batches, never from the evaluator's own reading.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch
from helpers import episode_ends, mlp_policy, probed_env

from simeval import EvalError, Evaluator
from simeval.metrics import end_metrics
from simeval.policies import gaussian_actor
from simeval.worker.rollout import EpisodeTally


def _evaluate(env_fn, policy_factory, **kwargs):
    ev = Evaluator(env_fn, policy_factory=policy_factory, **kwargs)
    try:
        return ev.evaluate()
    finally:
        ev.shutdown()


def _random_hopper(env_backend="native", backend="process", max_steps=20, **kwargs):
    """Hopper under an untrained Gaussian actor sampling its actions: with a 20-step cap
    some episodes fall (terminated) and some reach the cap (truncated). The process
    worker seeds torch (the samples repeat); a thread worker uses this process's RNG."""
    torch.manual_seed(0)
    env_fn = functools.partial(probed_env, "Hopper-v5", num_envs=4, backend=env_backend)
    return _evaluate(
        env_fn,
        gaussian_actor,
        num_trajectories=24,
        max_steps=max_steps,
        seed=0,
        exploration_type="RANDOM",
        backend=backend,
        metrics_fn=episode_ends,
        keep_episodes=True,
        **kwargs,
    )


@pytest.mark.required
@pytest.mark.parametrize("env_backend, backend", [("native", "process"), ("gymnasium", "thread")])
def test_terminated_and_truncated_fractions_on_hopper(env_backend, backend):
    result = _random_hopper(env_backend, backend)
    terminated, truncated = result["eval/terminated_fraction"], result["eval/truncated_fraction"]
    assert terminated == pytest.approx(result["eval/check_terminated"])
    assert truncated == pytest.approx(result["eval/check_truncated"])
    assert 0 < terminated < 1 and 0 < truncated < 1  # both happen, so the check means something
    assert terminated + truncated == pytest.approx(1.0)  # every episode ends one way or the other
    # Per episode: one that ended before the cap fell; one that did not fall reached the cap.
    lengths = result["eval/episode_lengths"]
    flags = result["eval/episode_terminated"]
    assert flags.dtype == torch.bool and len(flags) == len(lengths) == result["eval/num_episodes"] == 24
    assert bool(flags[lengths < 20].all())
    assert bool((lengths[~flags] == 20).all())
    assert result["eval/episode_truncated"][~flags].all()


@pytest.mark.required
def test_info_key_success_rate_is_the_same_on_thread_and_process():
    # success = a velocity component's sign at the episode's last step (HalfCheetah, a fixed MLP).
    results = {}
    for backend in ("thread", "process"):
        results[backend] = _evaluate(
            functools.partial(probed_env, "HalfCheetah-v5", num_envs=3, index=2, log=False),
            mlp_policy,
            num_trajectories=9,
            max_steps=25,
            seed=3,
            backend=backend,
            info_keys=["success"],
            metrics_fn=episode_ends,
            keep_episodes=True,
        )
    thread, process = results["thread"], results["process"]
    assert thread["eval/success_rate"] == pytest.approx(thread["eval/check_success"])
    assert 0 < thread["eval/success_rate"] < 1
    assert thread["eval/success"] == thread["eval/success_rate"]
    for key in ("eval/success_rate", "eval/success", "eval/terminated_fraction", "eval/truncated_fraction"):
        assert process[key] == thread[key], key
    assert process["eval/episode_info/success"].tolist() == thread["eval/episode_info/success"].tolist()
    # HalfCheetah never falls: every episode is cut by the cap.
    assert (thread["eval/terminated_fraction"], thread["eval/truncated_fraction"]) == (0.0, 1.0)
    assert not any(key.startswith("eval/log/") for key in thread)  # the env has no "log" entry


@pytest.mark.required
def test_log_entries_ignore_steps_where_the_env_did_not_report():
    # Metrics/success_rate is reported only at the end of episodes with an even length: NaN otherwise.
    # An odd cap (21) keeps every episode that reaches it unreported, whatever the falls' floating-point
    # realization on the machine (a CI run once had 24 of 24 even-length episodes under a cap of 20).
    result = _random_hopper(max_steps=21)
    got = result["eval/log/Metrics/success_rate"]
    reported = result["eval/check_log_success_count"]
    assert 0 < reported < result["eval/num_episodes"]  # some episodes reported, some did not
    assert got == pytest.approx(result["eval/check_log_success"])
    assert result["eval/success_rate"] == got  # no info key named success: the log entry is the rate
    values = result["eval/episode_info/log/Metrics/success_rate"]
    assert int(torch.isnan(values).sum()) == result["eval/num_episodes"] - reported
    # Reported at every episode's end: the mean episode length.
    assert result["eval/log/Episode_Reward/length"] == pytest.approx(
        float(result["eval/episode_lengths"].double().mean())
    )


def test_an_info_key_sets_success_rate_before_the_log_entry():
    result = _random_hopper(info_keys=["success"])
    assert result["eval/success_rate"] == result["eval/success"] == pytest.approx(result["eval/check_success"])
    assert result["eval/log/Metrics/success_rate"] == pytest.approx(result["eval/check_log_success"])


@pytest.mark.required
@pytest.mark.parametrize("backend", ["thread", "process"])
def test_a_missing_info_key_is_a_one_line_error_naming_the_batch_keys(backend):
    env_fn = functools.partial(probed_env, "HalfCheetah-v5", num_envs=2, log=False)
    with pytest.raises(EvalError) as excinfo:
        _evaluate(env_fn, mlp_policy, num_trajectories=2, max_steps=5, backend=backend, info_keys=["is_success"])
    message = str(excinfo.value)
    assert "\n" not in message
    assert "ValueError: info key 'is_success' is not in the env's batch" in message
    for present in ("'success'", "'observation'", "'terminated'", "'truncated'"):
        assert present in message


def test_an_info_key_with_more_than_one_value_per_step_is_refused():
    env_fn = functools.partial(probed_env, "HalfCheetah-v5", num_envs=2, log=False)
    with pytest.raises(EvalError, match="one value .*per sub-env and step"):
        _evaluate(env_fn, mlp_policy, num_trajectories=2, max_steps=5, info_keys=["observation"])


def test_nested_and_next_prefixed_info_keys():
    result = _evaluate(
        functools.partial(probed_env, "Hopper-v5", num_envs=2),
        functools.partial(mlp_policy, obs_dim=11, act_dim=3),
        num_trajectories=4,
        max_steps=10,
        info_keys=[("next", "step_count"), ("log", "Episode_Reward/length")],
        metrics_fn=episode_ends,
    )
    assert result["eval/step_count"] == result["eval/episode_length"] == 10.0
    assert result["eval/log/Episode_Reward/length"] == 10.0
    # Every episode ran 10 steps (even): Metrics/success_rate was reported at each end, and is the rate. Its
    # value is read independently from the kept episodes' padded trajectories (helpers.episode_ends).
    assert result["eval/check_log_success_count"] == 4
    assert result["eval/log/Metrics/success_rate"] == pytest.approx(result["eval/check_log_success"], rel=1e-9)
    assert result["eval/success_rate"] == pytest.approx(result["eval/check_log_success"], rel=1e-9)


def test_tally_reads_values_at_episode_ends_across_batches():
    # Two sub-envs, two batches of 4 steps. Sub-env 0's second episode straddles the
    # boundary; sub-env 1 ends three episodes but its quota keeps two. Every step's reward differs.
    done = [
        torch.tensor([[0, 1, 0, 0], [1, 0, 1, 0]], dtype=torch.bool),
        torch.tensor([[0, 1, 0, 1], [0, 0, 1, 0]], dtype=torch.bool),
    ]
    value = [torch.arange(8, dtype=torch.float64).view(2, 4) + 10 * b for b in range(2)]
    flag = [d & (v.long() % 2 == 0) for d, v in zip(done, value, strict=True)]
    value[1][0, 1] = math.nan  # sub-env 0's second episode ends on a step the env did not report
    reward = [torch.tensor([[0.5, 1.0, 2.0, 4.0], [8.0, 16.0, 32.0, 64.0]]) * 2.0**b for b in (0, 8)]
    tally = EpisodeTally([3, 2])
    for d, v, f, r in zip(done, value, flag, reward, strict=True):
        tally.add(r, d, ends={"value": v, "flag": f.double()})
    # Independently: walk each sub-env's steps in time order and note the value at each done.
    expected = {"value": [], "flag": []}
    for env in range(2):
        ends = [
            (v[env, t], f[env, t]) for d, v, f in zip(done, value, flag, strict=True) for t in range(4) if d[env, t]
        ]
        for v, f in ends[: [3, 2][env]]:
            expected["value"].append(float(v))
            expected["flag"].append(float(f))
    got = tally.end_values()
    assert got["flag"] == expected["flag"]
    assert got["value"] == pytest.approx(expected["value"], nan_ok=True)
    assert got["value"][:3] == pytest.approx([1.0, math.nan, 13.0], nan_ok=True) and got["value"][3:] == [4.0, 6.0]
    returns, lengths, _ = tally.episodes()
    assert lengths == [2, 4, 2, 1, 2]
    # Each kept episode's rewards, walked in time order: sub-env 0's second episode is 2 + 4 (batch 0) + 128 + 256.
    steps = [[float(r[env, t]) for r in reward for t in range(4)] for env in range(2)]
    ends = [[t for t in range(8) if done[t // 4][env, t % 4]] for env in range(2)]
    expected_returns = []
    for env in range(2):
        starts = [0] + [t + 1 for t in ends[env]]
        expected_returns += [sum(steps[env][a : b + 1]) for a, b in zip(starts, ends[env], strict=False)][: [3, 2][env]]
    assert expected_returns == [1.5, 390.0, 1536.0, 8.0, 48.0]
    assert returns == expected_returns  # sums of powers of two: exact


def test_end_metrics_fractions_means_and_success_alias():
    out = end_metrics(
        [True, False, False, True],
        [False, True, False, True],  # the last is terminated and truncated: it counts as terminated
        {"goal/is_success": [1.0, 0.0, math.nan, 1.0], "log/Metrics/success_rate": [0.5] * 4, "log/x": [math.nan] * 4},
        [("goal", "is_success")],
    )
    assert out["terminated_fraction"] == 0.5 and out["truncated_fraction"] == 0.25
    assert out["goal/is_success"] == pytest.approx(2 / 3) and out["success_rate"] == pytest.approx(2 / 3)
    assert out["log/Metrics/success_rate"] == 0.5 and out["log/x"] is None
    logs = end_metrics(None, None, {"log/Task/success_rate": [0.0, 1.0], "log/Metrics/success_rate": [1.0, 1.0]})
    assert logs == {"log/Task/success_rate": 0.5, "log/Metrics/success_rate": 1.0, "success_rate": 1.0}
    # mjlab's manipulation commands latch success per episode: the success rate where no *success_rate is logged
    mjlab = {"log/Metrics/lift/episode_success": [1.0, 0.0, 1.0, 1.0], "log/Metrics/lift/at_goal": [0.0] * 4}
    assert end_metrics(None, None, mjlab)["success_rate"] == 0.75
    mjlab["log/Task/success_rate"] = [0.0] * 4
    assert end_metrics(None, None, mjlab)["success_rate"] == 0.0  # a success rate the task names comes first
    assert end_metrics(None, None, {}) == {}


# -- the launcher ------------------------------------------------------------------
def test_info_keys_from_flags_and_yaml(tmp_path):
    from simeval.launch.cli import parse
    from simeval.launch.config import ConfigError

    assert parse([]).cfg.info_keys == []
    assert parse(["--info-keys", "success", "other", "--episodes", "4"]).cfg.info_keys == ["success", "other"]
    profile = tmp_path / "p.yaml"
    profile.write_text("info-keys: [success, [agents, is_success]]\n")
    assert parse(["--config", str(profile)]).cfg.info_keys == ["success", ["agents", "is_success"]]
    assert parse(["--config", str(profile), "--info-keys", "x"]).cfg.info_keys == ["x"]
    profile.write_text("info_keys: [{a: 1}]\n")
    with pytest.raises(ConfigError, match="info_keys must be a list of keys"):
        parse(["--config", str(profile)])


def test_summary_shows_success_rate_only_when_a_result_has_it():
    from types import SimpleNamespace

    from simeval.launch.cells import summary

    ck = SimpleNamespace(path="/ckpt/step_0001000.pt", step=1000)
    base = {"eval/reward": 1.0, "eval/num_episodes": 4, "eval/terminated_fraction": 0.0}
    assert "success_rate" not in summary(base, ck)
    assert "success_rate" not in summary({**base, "eval/success_rate": None}, ck)
    assert "success_rate    0.75" in summary({**base, "eval/success_rate": 0.75}, ck).splitlines()


def test_launcher_records_info_key_means_and_fractions(tmp_path):
    import json

    from launch_helpers import cli, write_checkpoints

    (ckpt,) = write_checkpoints(str(tmp_path), steps=(1000,))
    out = tmp_path / "out"
    args = ("--checkpoint", ckpt, "--out", str(out), "--episodes", "2", "--num-envs", "2", "--max-steps", "12")
    proc = cli(*args, "--info-keys", "step_count")
    assert proc.returncode == 0, proc.stderr[-2000:]
    (record,) = [json.loads(line) for line in open(out / "results.jsonl")]
    metrics = record["metrics"]
    assert metrics["step_count"] == 12.0 == metrics["episode_length"]
    assert (metrics["terminated_fraction"], metrics["truncated_fraction"]) == (0.0, 1.0)  # HalfCheetah: the cap
    assert not any(name.startswith("episode_") and name != "episode_length" for name in metrics)
    proc = cli(*args, "--info-keys", "success")
    assert proc.returncode == 2 and "info key 'success' is not in the env's batch" in proc.stderr
