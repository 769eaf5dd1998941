"""metrics.py: pure functions, checked against direct computation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simeval.metrics import bootstrap_ci, episode_quotas, prefixed, summarize


def test_summarize_matches_numpy():
    returns = [1.0, 2.0, 4.0, 8.0]
    out = summarize(returns, [10, 20, 30, 40], env_steps=200, seconds=2.0)
    assert out["reward"] == pytest.approx(3.75)
    assert out["reward_std"] == pytest.approx(np.std(returns, ddof=1))
    assert out["num_episodes"] == 4
    assert out["episode_length"] == 25.0
    assert out["fps"] == 100.0
    assert out["reward_ci_low"] < 3.75 < out["reward_ci_high"]


def test_bootstrap_interval_is_deterministic_and_covers_the_mean():
    rng = np.random.default_rng(0)
    data = rng.normal(10.0, 2.0, size=50)
    low, high = bootstrap_ci(data)
    assert (low, high) == bootstrap_ci(data)
    assert low < data.mean() < high
    assert high - low == pytest.approx(2 * 1.96 * data.std(ddof=1) / math.sqrt(50), rel=0.25)


def test_degenerate_samples_collapse_the_interval():
    assert bootstrap_ci([5.0]) == (5.0, 5.0)
    assert bootstrap_ci([2.0, 2.0, 2.0]) == (2.0, 2.0)
    out = summarize([5.0], [3], env_steps=3, seconds=1.0)
    assert out["reward_std"] == 0.0


def test_prefixed_prefixes_everything_and_keeps_scalars_by_default():
    raw = summarize([1.0, 3.0], [1, 1], env_steps=2, seconds=1.0)
    raw.update(step=9, episode_returns=[1.0, 3.0], episode_lengths=[1, 1], custom={"success": 0.5})
    out = prefixed(raw, "val", keep_episodes=False)
    assert all(k.startswith("val/") for k in out)
    assert out["val/success"] == 0.5 and out["val/step"] == 9
    assert all(np.isscalar(v) for v in out.values())
    assert "val/episode_returns" in prefixed(raw, "val", keep_episodes=True)


@pytest.mark.parametrize("n", [2, 7, 257, 1023, 4096, 70_001])
def test_the_chunked_bootstrap_gives_scipys_one_call_interval_exactly(n):
    from scipy.stats import bootstrap

    data = np.random.default_rng(n).standard_t(3, size=n)
    one_call = bootstrap(
        (data,), np.mean, n_resamples=2000, method="percentile", random_state=np.random.default_rng(0)
    ).confidence_interval
    assert bootstrap_ci(data) == (one_call.low, one_call.high)


def test_episode_quotas_split_the_episodes_over_the_sub_envs_and_refuse_none():
    assert episode_quotas(10, 4) == [2, 2, 3, 3]
    assert episode_quotas(3, 3) == [1, 1, 1]
    with pytest.raises(ValueError, match="at least one sub-env, got 0"):
        episode_quotas(4, 0)
    with pytest.raises(ValueError, match="num_trajectories must be >= 1"):
        episode_quotas(0, 4)
