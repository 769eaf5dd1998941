"""``--search SETTING=LOW:HIGH``: the launcher side of the failure-region search (:mod:`simeval.strategies.search`).

One ``--checkpoint`` on ``--env`` (its nominal settings: ``--num-envs``, ``--max-steps``, ``--seed``), one or two
searched condition settings. Each round is ``--look-every`` episodes (default ``--num-envs``) on one region, its
searched settings drawn per episode within the region's bounds; ``--max-episodes`` (default ``--episodes``) is the
search's total. Lines go to ``OUT/results.jsonl``, one per round; the same command resumes (the lines are replayed
through the strategy; lines of another search refuse the resume in one line).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from simeval.conditions import Condition
from simeval.envs.simulators import check_condition
from simeval.launch.cells import Nominal
from simeval.launch.config import ConfigError, LaunchConfig
from simeval.launch.scheduler import Scheduler
from simeval.launch.sources import checkpoint_name
from simeval.records import numbered_records, read_records
from simeval.stats.failure_map import SearchAxis, key_text
from simeval.strategies import SearchPlan, SearchStrategy
from simeval.strategies.search import box_text

if TYPE_CHECKING:
    from simeval.checkpoints import Checkpoint
    from simeval.launch.results import ResultsLog
    from simeval.launch.session import Session


@dataclass(frozen=True)
class RegionCell(Nominal):
    """Round ``visit`` of region ``region``: the run's settings with the round's episodes and seed, and the region's
    bounds as the searched settings' per-episode ranges."""

    region: tuple[int, ...] = ()
    bounds: dict = field(default_factory=dict)
    visit: int = 0
    episodes: int = 1
    seed: int = 0
    base: LaunchConfig | None = None
    """The search's settings where they are not the run's (a suite task's search); None: the run's."""

    @property
    def key(self) -> tuple:  # type: ignore[override]
        """(region, round): what the attempts journal knows the round by (with the checkpoint's name)."""
        return (key_text(self.region), self.visit)

    @property
    def slot_key(self) -> tuple:
        """(region,): an evaluator carries its region's condition, so a slot serves one region's rounds."""
        return (key_text(self.region),)

    @property
    def condition(self) -> Condition:  # type: ignore[override]
        """The searched settings, each drawn per episode within the region."""
        return Condition.parse({name: [lo, hi] for name, (lo, hi) in self.bounds.items()}, where="--search")

    def config(self, cfg: LaunchConfig) -> LaunchConfig:
        """The search's settings with the round's episode count and seed."""
        return dataclasses.replace(self.base or cfg, episodes=self.episodes, seed=self.seed)

    def explicit(self, explicit: set[str]) -> set[str]:
        """The run's explicit settings, and the env where a suite task names it."""
        return explicit | {"env"} if self.base is not None else explicit

    def context(self) -> dict[str, Any]:
        """The round's condition and seed (with the region, which the strategy adds)."""
        return {"condition_settings": self.condition.as_data(), "seed": self.seed}

    def label(self, name: str) -> str:
        """``checkpoint NAME region BOX round V``."""
        return f"checkpoint {name} region {box_text(self.bounds)} round {self.visit}"


def plan_of(cfg: LaunchConfig) -> SearchPlan:
    """The search plan from the run's flags; a one-line ConfigError for a setting the env cannot apply or a budget
    that cannot hold one round."""
    axes = tuple(
        SearchAxis(name, low, high, res) for (name, low, high), res in zip(cfg.searched, cfg.resolutions, strict=True)
    )
    try:
        condition = Condition.parse({a.name: [a.low, a.high] for a in axes}, where="--search")
        check_condition(cfg.env, condition, cfg.env_backend)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if cfg.seed is None:
        raise ConfigError("--search plays each region on seeded episodes: give --seed.")
    every = cfg.look_every or cfg.num_envs
    budget = cfg.max_episodes or cfg.episodes
    if budget < every:
        given = "--max-episodes" if cfg.max_episodes else "--episodes"
        raise ConfigError(f"{given} ({budget}) < --look-every {every}: the search's budget must hold one round.")
    return SearchPlan(
        axes, cfg.fail_below, float(cfg.failure_rate), 1.0 - float(cfg.alpha), every, budget,
        max_region_episodes=max(every, 8 * every),
    )  # fmt: skip


def run_search(session: Session, log: ResultsLog, ck: Checkpoint, cfg: LaunchConfig | None = None) -> int:
    """The search ``cfg`` asks for (default: the run's ``--search``; a suite task's block,
    :mod:`simeval.launch.suite_search`) of ``ck`` into ``log``'s directory, resuming what is there; exit 0."""
    base = cfg
    cfg = cfg or session.cfg
    plan = plan_of(cfg)
    name = checkpoint_name(ck.path, None)

    def cell_for(region: tuple[int, ...], bounds: dict, visit: int, seed: int) -> RegionCell:
        return RegionCell(
            region=region, bounds=dict(bounds), visit=visit, episodes=plan.round_episodes, seed=seed, base=base
        )

    strategy = SearchStrategy(ck, name, plan, cell_for, int(cfg.seed), parallel=len(session.slots))
    records = list(log.records())
    _check_ours(records, plan, ck, log.path)
    try:
        found = strategy.replay({"": records})
    except ValueError as exc:
        raise ConfigError(f"{log.path}: {exc}; give another --out.") from None
    if found.looks:
        print(f"resuming: {found.looks} round(s) already in {log.path}.", flush=True)
    axes = " x ".join(f"{a.name} [{a.low:g}, {a.high:g}] (resolution {a.resolution:g})" for a in plan.axes)
    print(
        f"search {name} over {axes}: failure = {plan.failure}, failure region = P(fail) >= {plan.failure_rate:g}, "
        f"rounds of {plan.round_episodes} episode(s), at most {plan.max_episodes}, alpha {cfg.alpha:g}",
        flush=True,
    )
    code = Scheduler(session, {"": log}, strategy).run()
    if code == 0 and cfg.evidence and strategy.finished and not session.stop.is_set():
        render_evidence(cfg, strategy, log.path, cfg.evidence)
    return code


def render_evidence(cfg: LaunchConfig, strategy: SearchStrategy, results: str, k: int) -> list[dict]:
    """Replay the ``k`` worst failed episodes of the map's failing regions with video (those not replayed with video
    before); their replay lines (``OUT/replays.jsonl``)."""
    from simeval.launch.replay import REPLAYS, replay_episode

    run_dir = os.path.dirname(results)
    worst = strategy.worst_failures(list(numbered_records(results)), k)
    if not worst:
        print("evidence: no failed episode inside a region that fails (or fails at the level's rate) to replay.",
              flush=True)  # fmt: skip
        return []
    replays = os.path.join(run_dir, REPLAYS)
    before = read_records(replays) if os.path.exists(replays) else []
    done = {(r.get("line"), r.get("index")) for r in before if r.get("video")}
    todo = [(number, index) for number, index, _ in worst if (number, index) not in done]
    print(f"evidence: the {len(worst)} worst failed episode(s) of the failing regions, replayed with video "
          f"({len(worst) - len(todo)} replayed before)", flush=True)  # fmt: skip
    return [replay_episode(cfg, run_dir, number, index, video=True) for number, index in todo]


def _check_ours(records: list[dict], plan: SearchPlan, ck: Checkpoint, path: str) -> None:
    """A ConfigError unless every line in ``path`` is a round of this search of ``ck``."""
    for record in records:
        same = record.get("search") == plan.as_data()
        if record.get("status") == "ok":
            same = same and record.get("checkpoint_sha256") == ck.sha256
        if not same:
            raise ConfigError(
                f"{path} holds a line that is not a round of this search of {ck.path} (another checkpoint, "
                "range, resolution or budget): one results directory holds one search; give another --out."
            )
