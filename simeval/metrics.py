"""Pure functions from per-episode numbers to reported metrics.

No torch here: episodes arrive as plain sequences, so the same code formats
results from every backend and can be tested without a simulator.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

# Keys every round reports, in the order the seed's Evaluator reports them.
CORE_KEYS = ("reward", "reward_std", "num_episodes", "episode_length", "fps")
# An info key whose last part is one of these is also reported as ``success_rate``.
SUCCESS_NAMES = ("success", "is_success", "success_rate")
# Per-episode lists a result carries with keep_episodes (beside episode_info/<name>). The success lists
# (0/1: the per-step success key true at the episode's last step, at any step) exist only for such a key.
EPISODE_FLAGS = ("episode_terminated", "episode_truncated", "episode_success_at_end", "episode_success_once")
# Round metric -> the per-episode list it is the mean of (see success_metrics).
SUCCESS_METRICS = {"success_at_end": "episode_success_at_end", "success_once": "episode_success_once"}


def episode_quotas(num_episodes: int, num_envs: int, batch_order: bool = False) -> list[int]:
    """How many episodes each sub-env contributes, decided before the round.

    Sub-env ``i`` of ``n`` runs ``(N + i) // n`` episodes (stable-baselines3's
    ``evaluate_policy`` scheme): the extra ones of a count that is not a multiple
    of ``n`` go to the last sub-envs. Fixing the quota up front removes the bias of
    keeping "the first N episodes to finish", which favours short episodes.

    ``batch_order``: the first ``N`` episodes of whole batches of ``n``, in batch
    order (batch ``k``'s episode on sub-env ``i`` is episode ``k * n + i``), as
    lerobot-eval keeps them: sub-env ``i`` runs ``(N + n - 1 - i) // n``, the
    extra ones going to the first sub-envs. Both layouts agree on a multiple of ``n``.
    """
    if num_episodes < 1:
        raise ValueError(f"num_trajectories must be >= 1, got {num_episodes}.")
    if num_envs < 1:
        raise ValueError(f"the eval env must have at least one sub-env, got {num_envs}.")
    if batch_order:
        return [(num_episodes + num_envs - 1 - i) // num_envs for i in range(num_envs)]
    return [(num_episodes + i) // num_envs for i in range(num_envs)]


T_METHOD = "t"
"""Student's t-interval of the mean (:func:`t_ci`): every round's ``reward_ci_low`` / ``reward_ci_high`` since
results lines carry ``schema`` 2."""
PERCENTILE_METHOD = "percentile bootstrap"
"""The percentile bootstrap of the mean (:func:`bootstrap_ci`): the rounds' interval before, kept by name."""
ROUND_CI_METHOD = T_METHOD
"""The method of every round's interval, recorded as ``ci_method`` on its results line."""
LEGACY_CI_METHOD = PERCENTILE_METHOD
"""The method of a results line that records none (``schema`` 1: written before lines said ``ci_method``)."""
CI_METHODS = (T_METHOD, PERCENTILE_METHOD)
"""The one-cell interval methods, by the names of :data:`simeval.stats.methods.METHODS`."""


def _collapsed(data: np.ndarray) -> tuple[float, float] | None:
    """The interval of no spread: NaNs for no episode, the mean for one or identical values; else None."""
    if data.size == 0:
        return math.nan, math.nan
    if data.size == 1 or np.all(data == data[0]):
        mean = float(data.mean())
        return mean, mean
    return None


def t_ci(returns: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Student's t-interval of the mean return (``scipy.stats.t``): the mean +- t(n - 1) * sd / sqrt(n).

    The round's interval (:data:`ROUND_CI_METHOD`): it holds its coverage from n = 5 on symmetric data
    where the percentile bootstrap falls short at n = 10 (docs/statistics.md, "One cell"), and costs
    one pass over the returns at any n. With a single episode, or identical returns, the interval
    collapses to the mean, as :func:`bootstrap_ci`'s does.
    """
    data = np.asarray(returns, dtype=np.float64)
    same = _collapsed(data)
    if same is not None:
        return same
    from scipy.stats import t

    n = data.size
    mean = float(data.mean())
    half = float(t.ppf(0.5 + confidence / 2, n - 1)) * float(data.std(ddof=1)) / math.sqrt(n)
    return mean - half, mean + half


def mean_interval(
    returns: Sequence[float],
    method: str = ROUND_CI_METHOD,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """The interval of the mean return by ``method`` (one of :data:`CI_METHODS`; ``n_resamples`` and
    ``seed`` are the bootstrap's, unused by ``t``).

    Raises:
        ValueError: an unknown ``method``, naming the known ones.
    """
    if method == T_METHOD:
        return t_ci(returns, confidence)
    if method == PERCENTILE_METHOD:
        return bootstrap_ci(returns, confidence, n_resamples, seed)
    raise ValueError(f"unknown interval method {method!r} for one checkpoint's mean: one of {', '.join(CI_METHODS)}.")


def ci_method_of(record: Mapping[str, Any]) -> str:
    """The interval method of a results line's ``reward_ci_low`` / ``reward_ci_high``: its ``ci_method``, or
    :data:`LEGACY_CI_METHOD` for a line written before lines recorded one."""
    return str(record.get("ci_method") or LEGACY_CI_METHOD)


def bootstrap_ci(
    returns: Sequence[float], confidence: float = 0.95, n_resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """Percentile-bootstrap interval of the mean return (scipy.stats.bootstrap): :data:`PERCENTILE_METHOD`.

    The rounds' interval before :func:`t_ci`; it undercovers at small n (0.905 at n = 10 on
    normal data, docs/statistics.md). With a single episode, or identical returns, the interval collapses to the
    mean: there is no spread to resample. The resampling seed is fixed so the same returns
    always give the same interval.
    """
    data = np.asarray(returns, dtype=np.float64)
    same = _collapsed(data)
    if same is not None:
        return same
    from scipy.stats import bootstrap

    # Resamples in chunks of about 2**19 values: 3-4x faster from a few thousand episodes (the
    # resample matrix stays in cache). An even chunk size draws the generator's stream exactly as
    # one call does (numpy buffers 32-bit draws in pairs), so the interval is unchanged.
    batch = max(2, (2**19 // data.size) // 2 * 2)  # pragma: no mutate - speed only (test_metrics: = one call)
    res = bootstrap(
        (data,),
        np.mean,
        confidence_level=confidence,
        n_resamples=n_resamples,
        batch=batch,
        method="percentile",
        random_state=np.random.default_rng(seed),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def summarize(
    returns: Sequence[float],
    lengths: Sequence[int],
    env_steps: int,
    seconds: float,
) -> dict[str, Any]:
    """Mean return and its spread, mean length, throughput and the 95% CI (:data:`ROUND_CI_METHOD`)."""
    data = np.asarray(returns, dtype=np.float64)
    n = int(data.size)
    if n == 0:
        raise ValueError("an evaluation round finished with no episodes.")
    low, high = mean_interval(data, ROUND_CI_METHOD)
    return {
        "reward": float(data.mean()),
        # Sample standard deviation, as torch.std: 0 for a single episode.
        "reward_std": float(data.std(ddof=1)) if n > 1 else 0.0,
        "num_episodes": n,
        "episode_length": float(np.mean(lengths)),
        "fps": env_steps / seconds if seconds > 0 else math.nan,
        "reward_ci_low": low,
        "reward_ci_high": high,
        "frame_count": int(env_steps),
    }


def nan_mean(values: Sequence[float]) -> float | None:
    """The mean of the values that are not NaN; None when there are none."""
    data = np.asarray(values, dtype=np.float64)
    data = data[~np.isnan(data)]
    return float(data.mean()) if data.size else None


def end_metrics(
    terminated: Sequence[bool] | None,
    truncated: Sequence[bool] | None,
    info: dict[str, Sequence[float]],
    info_keys: Sequence[tuple[str, ...]] = (),
) -> dict[str, float | None]:
    """What the episodes' last steps say, over the kept episodes.

    ``terminated_fraction``: episodes whose last step was terminal;
    ``truncated_fraction``: truncated and not terminated (ended by a time
    limit); either is left out when the batch had no such flag. Each ``info``
    entry (named ``"/".join(key)`` for ``info_keys``, ``log/<leaf>`` for the
    env's "log" entries) is its NaN-ignoring mean. ``success_rate`` repeats
    the first info key whose last part is in SUCCESS_NAMES, else the log entry
    ``Metrics/success_rate`` (Isaac Lab), else the first log entry ending in
    ``success_rate``, else the first ending in ``/episode_success`` (mjlab's
    manipulation commands latch it per episode).
    For an info key (a per-step flag read at the last step) that is the
    last-step definition, ``success_at_end`` of :func:`success_metrics`.
    """
    out: dict[str, float | None] = {}
    term = None if terminated is None else np.asarray(terminated, dtype=bool)
    if term is not None and term.size:
        out["terminated_fraction"] = float(term.mean())
    if truncated is not None and len(truncated):
        trunc = np.asarray(truncated, dtype=bool)
        out["truncated_fraction"] = float((trunc & ~term).mean() if term is not None else trunc.mean())
    for name, values in info.items():
        out[name] = nan_mean(values)
    named = ["/".join(key) for key in info_keys if key[-1] in SUCCESS_NAMES]
    logs = [name for name in info if name.startswith("log/") and name.endswith(("success_rate", "/episode_success"))]
    # stable: the exact name first, then the other success rates, then mjlab's episode_success
    logs.sort(key=lambda name: (name != "log/Metrics/success_rate", name.endswith("/episode_success")))
    source = next((name for name in (*named, *logs) if name in info), None)
    if source is not None:
        out["success_rate"] = out[source]
    return out


def success_metrics(raw: dict[str, Any]) -> dict[str, float]:
    """``success_at_end`` and ``success_once``: the fractions of episodes that succeeded, two ways.

    ManiSkill3's two definitions, from the per-episode 0/1 lists ``episode_success_at_end`` (the
    per-step success key was true at the episode's last step) and ``episode_success_once`` (true at
    any of its steps). Computed from the lists, so a round merged from shards gets them from the same
    episodes. Empty where ``raw`` has no such lists (the env reports no per-step success key).

    Args:
        raw: a round's raw worker metrics.

    Returns:
        ``{"success_at_end": ..., "success_once": ...}``, each present only where its list is.
    """
    out = {}
    for name, key in SUCCESS_METRICS.items():
        values = raw.get(key)
        if values is not None and len(values):
            out[name] = float(np.mean(np.asarray(values, dtype=np.float64)))
    return out


def prefixed(raw: dict[str, Any], prefix: str, keep_episodes: bool) -> dict[str, Any]:
    """The raw worker metrics under ``<prefix>/...`` keys, as the seed's Evaluator names them.

    ``raw`` holds plain numbers; ``end_metrics`` the scalars of :func:`end_metrics`;
    ``custom`` metrics_fn's output; ``episode_returns`` / ``episode_lengths``,
    ``episode_terminated`` / ``episode_truncated`` and ``episode_info`` (name ->
    list) the per-episode values, which only ``keep_episodes`` reports;
    ``episode_success_at_end`` / ``episode_success_once`` (where the env has a
    per-step success key) also give ``success_at_end`` / ``success_once``
    (:func:`success_metrics`); ``episode_sub_envs`` / ``episode_ordinals`` (where each
    episode ran) and ``round`` (the round's shape) are reported with the episodes.
    """
    out: dict[str, Any] = {}
    for key in (*CORE_KEYS, "reward_ci_low", "reward_ci_high", "frame_count"):
        if key in raw:
            out[f"{prefix}/{key}"] = raw[key]
    for key, value in (raw.get("end_metrics") or {}).items():
        out[f"{prefix}/{key}"] = value
    for key, value in success_metrics(raw).items():
        out[f"{prefix}/{key}"] = value
    if keep_episodes:
        out[f"{prefix}/episode_returns"] = list(raw["episode_returns"])
        out[f"{prefix}/episode_lengths"] = list(raw["episode_lengths"])
        if raw.get("episode_seeds") is not None:  # seeded rounds: each episode's seed (simeval.conditions)
            out[f"{prefix}/episode_seeds"] = list(raw["episode_seeds"])
        if raw.get("episode_env_seeds") is not None:  # the env's own seed of each episode, where it names one
            out[f"{prefix}/episode_env_seeds"] = list(raw["episode_env_seeds"])
        for key in ("episode_sub_envs", "episode_ordinals"):  # where each episode ran: (global sub-env, ordinal)
            if raw.get(key) is not None:
                out[f"{prefix}/{key}"] = list(raw[key])
        if raw.get("round") is not None:  # the round's shape: what a replay re-runs
            out[f"{prefix}/round"] = dict(raw["round"])
        for name, values in (raw.get("episode_conditions") or {}).items():  # condition settings drawn per episode
            out[f"{prefix}/episode_conditions/{name}"] = list(values)
        for key in EPISODE_FLAGS:
            if raw.get(key) is not None:
                out[f"{prefix}/{key}"] = list(raw[key])
        for name, values in (raw.get("episode_info") or {}).items():
            out[f"{prefix}/episode_info/{name}"] = list(values)
    for key, value in (raw.get("custom") or {}).items():
        out[f"{prefix}/{key}"] = value
    if raw.get("video") is not None:
        out[f"{prefix}/video"] = raw["video"]
    if raw.get("workers"):
        out[f"{prefix}/workers"] = list(raw["workers"])  # Ray: the node, host and pid each shard ran on
    out[f"{prefix}/step"] = raw["step"]
    return out
