"""One round over K workers: split its sub-envs into fixed shards, merge the shards' episodes back.

A round is defined over the ``num_envs`` sub-envs the env factory makes by
default, with each sub-env's episode quota fixed before the round
(``metrics.episode_quotas``). Worker ``k`` builds only its contiguous range
of sub-envs (the factory is called with ``num_envs=<its count>``), seeds its
local sub-env ``i`` as the global sub-env ``first + i`` would be seeded, and
keeps that range's quotas. Concatenating the shards' episodes in range order
gives the (sub-env, order) list one worker would have produced: the same
returns, in the same order, for any K, as long as the policy's output for a
row does not depend on how many rows it is given (true for MLPs on the CPU
here; see the README's note on BLAS kernels). No torch at import time.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from simeval import metrics


@dataclass(frozen=True)
class Shard:
    """Worker ``index``'s part of a round: sub-envs ``first .. first + len(quotas)`` and their quotas."""

    index: int
    first: int
    quotas: tuple[int, ...]

    @property
    def size(self) -> int:
        """The number of sub-envs in the shard."""
        return len(self.quotas)


def plan(num_envs: int, num_workers: int, num_episodes: int | None) -> list[Shard]:
    """Contiguous ranges as even as possible (the first ``num_envs % K`` get one more sub-env).

    ``num_episodes=None`` means one episode per sub-env, as with one worker.
    """
    if num_workers > num_envs:
        raise ValueError(
            f"num_workers={num_workers} is more than the env's num_envs={num_envs}: each worker needs at least one "
            "sub-env; raise the env factory's num_envs or lower num_workers."
        )
    quotas = metrics.episode_quotas(num_episodes or num_envs, num_envs)
    base, extra = divmod(num_envs, num_workers)
    shards, first = [], 0
    for k in range(num_workers):
        size = base + (k < extra)
        shards.append(Shard(k, first, tuple(quotas[first : first + size])))
        first += size
    return shards


def factory_num_envs(env_factory: Callable[..., Any]) -> int:
    """The ``num_envs`` an env factory uses by default: the round's total number of sub-envs.

    Splitting a round needs a factory that takes ``num_envs=`` (e.g.
    ``functools.partial(simeval.envs.make_env, "HalfCheetah-v5", num_envs=64)``).
    """
    hint = (
        "num_workers > 1 builds a share of the sub-envs in each worker, so the env factory must take a num_envs "
        "keyword with the round's total as its default, e.g. functools.partial(make_env, 'HalfCheetah-v5', "
        "num_envs=64)"
    )
    try:
        param = inspect.signature(env_factory).parameters.get("num_envs")
    except (TypeError, ValueError):
        param = None
    if param is None or param.kind not in (param.KEYWORD_ONLY, param.POSITIONAL_OR_KEYWORD):
        raise ValueError(f"the env factory {_name(env_factory)} has no num_envs keyword: {hint}.")
    if not isinstance(param.default, int) or isinstance(param.default, bool) or param.default < 1:
        raise ValueError(f"the env factory's num_envs has no default of at least 1 ({param.default!r}): {hint}.")
    return param.default


def _name(fn: Any) -> str:
    fn = getattr(fn, "func", fn)
    return getattr(fn, "__qualname__", type(fn).__name__)


def sub_env_seed(env: Any, seed: int, first: int) -> int:
    """The seed that makes ``env``'s sub-env 0 start as sub-env ``first`` of a ``seed``-seeded round.

    simeval's envs (native and gymnasium) seed sub-env ``i`` with ``seed + i``;
    torchrl's SerialEnv/ParallelEnv chain ``seed_generator`` from one sub-env to
    the next. Any other env gets ``seed + first``: its shards are then distinct
    streams, not a replay of one worker's round.
    """
    if first == 0:
        return seed
    from torchrl.envs.batched_envs import BatchedEnvBase

    base = env
    while hasattr(base, "base_env"):
        base = base.base_env
    if isinstance(base, BatchedEnvBase):
        from torchrl._utils import seed_generator

        for _ in range(first):
            seed = seed_generator(seed)
        return seed
    return seed + first


def merge_rounds(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The shards' round shapes (in shard order) as the round's: every sub-env's quota and every worker's range.

    The seed and the device are the round's, the same in every shard (each seeds its sub-envs from the round's
    seed as the global sub-envs they are).
    """
    quotas = [q for r in rounds for q in r["quotas"]]
    return {
        **rounds[0],
        "num_envs": len(quotas),
        "quotas": quotas,
        "shards": [shard for r in rounds for shard in r["shards"]],
    }


def merge(raws: Sequence[dict[str, Any]], info_keys: Sequence[tuple[str, ...]] = ()) -> dict[str, Any]:
    """The shards' raw metrics (in shard order) as one round's, as one worker would report them.

    Per-episode lists are concatenated, so the summary, the bootstrap interval
    and the end-of-episode means are computed from the same episodes in the
    same order. ``seconds`` is the slowest shard's (they run side by side), so
    ``fps`` is the round's aggregate throughput. Frames come from shard 0
    (global sub-env 0). ``step_reward_to_first_done`` is the shards' steps-weighted mean.
    """
    first = raws[0]
    returns = [r for raw in raws for r in raw["episode_returns"]]
    lengths = [n for raw in raws for n in raw["episode_lengths"]]
    env_steps = sum(raw["frame_count"] for raw in raws)
    seconds = max(raw["seconds"] for raw in raws)
    out = metrics.summarize(returns, lengths, env_steps, seconds)
    out["episode_returns"], out["episode_lengths"] = returns, lengths
    flags = {}
    for key in metrics.EPISODE_FLAGS:
        parts = [raw.get(key) for raw in raws]
        flags[key] = None if any(p is None for p in parts) else [v for p in parts for v in p]
        out[key] = flags[key]
    info = {name: [v for raw in raws for v in raw["episode_info"][name]] for name in first.get("episode_info") or {}}
    out["episode_info"] = info
    if all(raw.get("episode_seeds") is not None for raw in raws):
        out["episode_seeds"] = [v for raw in raws for v in raw["episode_seeds"]]
    if all(raw.get("episode_env_seeds") is not None for raw in raws):
        out["episode_env_seeds"] = [v for raw in raws for v in raw["episode_env_seeds"]]
    for key in ("episode_sub_envs", "episode_ordinals"):
        if all(raw.get(key) is not None for raw in raws):
            out[key] = [v for raw in raws for v in raw[key]]
    if all(raw.get("round") is not None for raw in raws):
        out["round"] = merge_rounds([raw["round"] for raw in raws])
    drawn = first.get("episode_conditions") or {}
    if drawn:
        out["episode_conditions"] = {
            name: [v for raw in raws for v in raw["episode_conditions"][name]] for name in drawn
        }
    out["end_metrics"] = metrics.end_metrics(flags["episode_terminated"], flags["episode_truncated"], info, info_keys)
    weights = [raw["frame_count"] for raw in raws if not math.isnan(raw["step_reward_to_first_done"])]
    values = [raw["step_reward_to_first_done"] for raw in raws if not math.isnan(raw["step_reward_to_first_done"])]
    out["step_reward_to_first_done"] = (
        sum(w * v for w, v in zip(weights, values, strict=True)) / sum(weights) if weights else math.nan
    )
    out["step"] = first["step"]
    for key in ("frames", "video"):
        if first.get(key) is not None:
            out[key] = first[key]
    return out
