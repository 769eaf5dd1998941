"""Success two ways (at the episode's last step, at any step) and where each episode ran (sub-env, ordinal).

A real torchrl env whose ("next", "success") flag follows a known pattern per
sub-env, run through the public Evaluator (thread and process workers), the
worker's rollout, and results.jsonl; the expected numbers are written out by hand.
"""

from __future__ import annotations

import functools
import json

import pytest
import torch
from helpers import CountEnv, const_policy, count_envs, mlp_policy
from torchrl.data import Categorical
from torchrl.envs import RewardSum, TransformedEnv

from simeval import Evaluator
from simeval.envs import make_env
from simeval.metrics import prefixed, success_metrics
from simeval.records import make_record, read_records
from simeval.settings import EvalSettings
from simeval.worker.eval_worker import EvalWorker
from simeval.worker.rollout import EpisodeTally

pytestmark = pytest.mark.required


class SuccessEnv(CountEnv):
    """Sub-env i runs episodes of ``lengths[i]`` steps; ("next", "success") is true at the steps in ``hits[i]``.

    Step t is the t-th step of an episode (1 to ``lengths[i]``); reward = action.
    """

    def __init__(self, lengths, hits):
        super().__init__(lengths)
        n = len(lengths)
        self.hit = torch.zeros(n, max(lengths) + 1, dtype=torch.bool)  # step 0 (a reset) never succeeds
        for i, steps in enumerate(hits):
            self.hit[i, list(steps)] = True
        self.observation_spec["success"] = Categorical(2, shape=(n, 1), dtype=torch.bool)

    def _observations(self) -> dict:
        return {**super()._observations(), "success": self.hit[torch.arange(len(self.t)), self.t].unsqueeze(-1)}


# Sub-env 0 touches the goal at step 6 of 10 and falls off; sub-env 1 reaches it at its last step (4);
# sub-env 2 never does. 7 episodes over 3 sub-envs: quotas [2, 2, 3].
LENGTHS, HITS = (10, 4, 7), ((6,), (4,), ())
SUB_ENVS, ORDINALS = [0, 0, 1, 1, 2, 2, 2], [0, 1, 0, 1, 0, 1, 2]
AT_END, ONCE = [0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0]


def success_env(lengths=LENGTHS, hits=HITS):
    return TransformedEnv(SuccessEnv(list(lengths), hits), RewardSum())


def _evaluate(env_fn, **kwargs) -> dict:
    with Evaluator(env_fn, policy_factory=const_policy, **kwargs) as ev:
        return ev.evaluate()


@pytest.mark.parametrize(
    ("backend", "frames_per_batch"),
    [("thread", None), ("thread", 12), ("thread", 3), ("process", 12)],  # 12: batches of 4 steps, 3: of 1
)
def test_success_at_end_and_once_on_a_known_pattern(backend, frames_per_batch):
    # With batches of 4 (or 1) steps every 10-step episode straddles batches: sub-env 0's hit at step 6
    # lies in another batch than its end, so only the carried flag remembers it.
    result = _evaluate(
        success_env,
        num_trajectories=7,
        info_keys=["success"],
        keep_episodes=True,
        backend=backend,
        frames_per_batch=frames_per_batch,
    )
    assert result["eval/episode_lengths"].tolist() == [10, 10, 4, 4, 7, 7, 7]
    assert result["eval/success_at_end"] == pytest.approx(2 / 7)
    assert result["eval/success_once"] == pytest.approx(4 / 7)
    assert result["eval/success_rate"] == result["eval/success_at_end"] == result["eval/success"]
    at_end, once = result["eval/episode_success_at_end"], result["eval/episode_success_once"]
    assert at_end.dtype == once.dtype == torch.bool
    assert at_end.tolist() == [bool(v) for v in AT_END] and once.tolist() == [bool(v) for v in ONCE]
    line = make_record(result)
    assert line["episode_success_at_end"] == AT_END and line["episode_success_once"] == ONCE
    assert len(line["episode_success_once"]) == len(line["episode_returns"])
    assert {"success_at_end", "success_once", "success_rate"} <= set(line["metrics"])
    assert not any(name.startswith("episode_success") for name in line["metrics"])


@pytest.mark.parametrize(("hits", "at_end", "once"), [((3,), 0.0, 1.0), ((10,), 1.0, 1.0), ((), 0.0, 0.0)])
def test_one_sub_env_patterns(hits, at_end, once):
    # A 10-step episode: success only at step 3 (touched, fell off), at the last step, never.
    env_fn = functools.partial(success_env, lengths=(10,), hits=(hits,))
    result = _evaluate(env_fn, num_trajectories=2, info_keys=["success"], frames_per_batch=4)
    assert (result["eval/success_at_end"], result["eval/success_once"]) == (at_end, once)
    assert result["eval/success_rate"] == at_end


def test_the_worker_writes_the_per_episode_success_lists_to_results_jsonl(tmp_path):
    path = tmp_path / "results.jsonl"
    _evaluate(success_env, num_trajectories=7, info_keys=["success"], backend="process", results_path=str(path))
    (line,) = read_records(str(path))
    assert line["episode_success_at_end"] == AT_END and line["episode_success_once"] == ONCE
    assert line["metrics"]["success_once"] == pytest.approx(4 / 7)
    json.dumps(line, allow_nan=False)


def test_no_per_step_success_key_no_success_keys():
    result = _evaluate(functools.partial(count_envs, 3), num_trajectories=4, keep_episodes=True)
    assert not any("success" in key for key in result)
    assert not any("success" in key for key in make_record(result))
    # An info key not named like success is read at the end, but not tracked.
    result = _evaluate(
        functools.partial(success_env, lengths=(5,), hits=((2,),)), num_trajectories=2, info_keys=["observation"]
    )
    assert not any("success" in key for key in result)


def _log_success_at_each_end(td) -> dict:
    """metrics_fn: the env's own ("next", "log", "Metrics/success_rate") at each kept episode's last step, read
    with a bare loop over the padded trajectories (no simeval code): their mean, and the smallest and largest."""
    mask, logged = td.get(("collector", "mask")), td.get(("next", "log", "Metrics/success_rate"))
    values = []
    for episode in range(mask.shape[0]):
        last = None
        for step in range(mask.shape[1]):
            if bool(mask[episode, step]):
                last = step
        value = float(logged[episode, last])
        if value == value:  # not NaN: the env reported at this episode's end
            values.append(value)
    return {"bare_success": sum(values) / len(values), "bare_min": min(values), "bare_max": max(values)}


def test_log_entries_give_success_rate_but_no_at_end_or_once():
    # Isaac Lab's "log" summaries (helpers.InfoProbe) are per-episode figures, not per-step flags. The probe logs
    # observation[1] at each episode's end (10 steps: an even count, so it reports); the rate is their mean.
    from helpers import probed_env

    env_fn = functools.partial(probed_env, "HalfCheetah-v5", num_envs=2)
    result = _evaluate(
        env_fn, num_trajectories=2, max_steps=10, keep_episodes=True, metrics_fn=_log_success_at_each_end
    )
    result_keys = set(result)
    assert result["eval/bare_min"] < result["eval/bare_max"]  # two episodes that differ: the mean is no one of them
    assert result["eval/success_rate"] == pytest.approx(result["eval/bare_success"], rel=1e-6)
    assert result["eval/log/Metrics/success_rate"] == pytest.approx(result["eval/bare_success"], rel=1e-6)
    assert not {"eval/success_at_end", "eval/success_once", "eval/episode_success_once"} & result_keys


# -- where each episode ran ----------------------------------------------------------
def _worker(env_factory, policy_factory=const_policy, **settings) -> EvalWorker:
    worker = EvalWorker(EvalSettings(**settings), env_factory=env_factory, policy_factory=policy_factory)
    worker.build()
    return worker


def test_sub_envs_and_ordinals_of_the_kept_episodes():
    worker = _worker(success_env, num_trajectories=7, info_keys=(("success",),), frames_per_batch=12)
    try:
        episodes = worker._roll_out([2, 2, 3], None, None, None)
    finally:
        worker.close()
    assert (episodes.sub_envs, episodes.ordinals) == (SUB_ENVS, ORDINALS)
    assert episodes.lengths == [10, 10, 4, 4, 7, 7, 7]
    assert (episodes.success_at_end, episodes.success_once) == (AT_END, ONCE)


def _hopper_policy(env):
    return mlp_policy(seed=5, obs_dim=env.observation_spec["observation"].shape[-1], act_dim=env.action_spec.shape[-1])


def test_the_direct_rollout_gives_the_collectors_positions():
    factory = functools.partial(make_env, "Hopper-v5", num_envs=5, obs_norm=False, groups=2)
    rounds = {}
    for name, settings in (("direct", {}), ("collector", {"collector_cls": "Collector"})):
        worker = _worker(factory, _hopper_policy, num_trajectories=7, max_steps=100, seed=11, **settings)
        try:
            assert (worker._direct is not None) == (name == "direct")
            rounds[name] = worker._roll_out([1, 1, 1, 2, 2], 11, 100, None)
        finally:
            worker.close()
    direct, collector = rounds["direct"], rounds["collector"]
    assert direct.sub_envs == collector.sub_envs == [0, 1, 2, 3, 3, 4, 4]
    assert direct.ordinals == collector.ordinals == [0, 0, 0, 0, 1, 0, 1]
    assert direct.returns == collector.returns and direct.lengths == collector.lengths
    assert direct.success_at_end is direct.success_once is collector.success_once is None  # no success key


# -- the tally, directly -------------------------------------------------------------
def test_tally_carries_the_once_flag_across_batches():
    # Two sub-envs, three batches of 3 steps. Sub-env 0: episodes of 4 steps, a hit at step 2 of its
    # first episode (batch 0) and none in its second; sub-env 1: one 9-step episode, hit at step 5 only.
    done = torch.zeros(2, 9, dtype=torch.bool)
    done[0, [3, 7]] = True
    done[1, 8] = True
    hits = torch.zeros(2, 9, dtype=torch.bool)
    hits[0, 1] = True
    hits[1, 4] = True
    tally = EpisodeTally([2, 1])
    for b in range(3):
        cols = slice(3 * b, 3 * b + 3)
        tally.add(torch.ones(2, 3), done[:, cols], hits=hits[:, cols])
    assert tally.hit_once() == [True, False, True]
    assert tally.positions() == ([0, 0, 1], [0, 1, 0])
    assert tally.episodes()[1] == [4, 4, 9]
    plain = EpisodeTally([1])
    plain.add(torch.ones(1, 2), torch.tensor([[False, True]]))
    assert plain.hit_once() is None
    with pytest.raises(ValueError, match="hits"):
        plain.add(torch.ones(1, 2), torch.tensor([[False, True]]), hits=torch.ones(1, 2, dtype=torch.bool))


def test_success_metrics_and_prefixed():
    raw = {"episode_success_at_end": [1.0, 0.0, 0.0, 0.0], "episode_success_once": [1.0, 1.0, 0.0, 1.0]}
    assert success_metrics(raw) == {"success_at_end": 0.25, "success_once": 0.75}
    assert success_metrics({"episode_success_at_end": None, "episode_success_once": None}) == {}
    raw.update(episode_returns=[0.0] * 4, episode_lengths=[1] * 4, step=3)
    out = prefixed(raw, "eval", keep_episodes=False)
    assert (out["eval/success_at_end"], out["eval/success_once"]) == (0.25, 0.75)
    assert "eval/episode_success_once" not in out
    assert prefixed(raw, "eval", keep_episodes=True)["eval/episode_success_once"] == [1.0, 1.0, 0.0, 1.0]
