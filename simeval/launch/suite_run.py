"""``--suite FILE``: every checkpoint x cell evaluated exactly once, restart-safe, over K evaluators.

A suite run is the fixed strategy (:class:`simeval.strategies.FixedStrategy`) on the
launcher's one scheduler (:mod:`simeval.launch.scheduler`) with the suite's cells: this
module checks the suite at start, and adapts its cells (:class:`SuiteCell`) to what the
scheduler asks of a cell. Checkpoints come from the
usual source (``--checkpoint`` or ``--watch``). Each one brings a job per cell of
the suite whose task is the checkpoint's env (a checkpoint that records no env gets
every cell). An evaluator is built for one cell (its env carries the cell's
condition) and one plan (the checkpoint's policy); an idle one takes a job of its
own cell first and is rebuilt for another cell (or a checkpoint of another plan)
only when none is left, so a backlog of checkpoints costs one env build per cell.
``--workers K`` (Ray) runs K cells at once. A task's declared ``bounds`` go on every
line of its cells, and a return outside them fails the cell (a failed line naming the
episode, never clipped). Every outcome is one results.jsonl
line; a restart skips every (checkpoint, task, condition) already there. The
newest line of a cell decides: a failed one is evaluated again when it says
``retry: "resume"`` (a lost worker) or with ``--retry-failed`` (see
:mod:`simeval.launch.results`); so is a checkpoint recorded as unreadable.

A cell's numbers depend only on the checkpoint and the cell (task, condition,
seed, num_envs, episodes, max_steps): not on the order, the worker or K.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from simeval.condition_terms import Prompt
from simeval.conditions import Condition
from simeval.envs import check_env
from simeval.envs.simulators import registered, simulator_for
from simeval.episode_values import checked
from simeval.launch.cells import BoundsError
from simeval.launch.cli import Parsed
from simeval.launch.config import ConfigError, LaunchConfig
from simeval.launch.scheduler import Scheduler, resume
from simeval.launch.suite import SEES, Cell, Suite, SuiteTask, check_conditions, load_suite
from simeval.policy_kinds.remote import REMOTE_FACTORY
from simeval.records import plain
from simeval.strategies import FixedStrategy

if TYPE_CHECKING:
    from simeval.checkpoints import Checkpoint
    from simeval.launch.results import ResultsLog
    from simeval.launch.session import Session
    from simeval.launch.sources import CheckpointSource

# Flags a suite file sets per task: giving them as well is an error, not a silent override.
SUITE_SETTINGS = ("env", "episodes", "num_envs", "max_steps", "seed")


@dataclass(frozen=True)
class SuiteCell:
    """A suite's cell as the scheduler asks of a cell (:class:`simeval.launch.cells.JobCell`)."""

    cell: Cell
    suite: str

    @property
    def key(self) -> tuple[str, str]:
        """(task env id, condition name)."""
        return self.cell.key

    @property
    def condition(self) -> Any:
        """The cell's condition."""
        return self.cell.condition

    def config(self, cfg: LaunchConfig) -> LaunchConfig:
        """The run's settings with the task's env, episodes, num_envs, max_steps and seed, and what the task's
        policy sees where the task sets it: its cameras, image size, frame stack (else the run's flags), and its
        prompt as the policy server's client sends it (``--policy-server``; none where the condition draws its own
        per episode: the client reads those from the env's condition)."""
        t = self.cell.task
        sees: dict[str, Any] = {k: getattr(t, k) for k in ("image_size", "frame_stack") if getattr(t, k) is not None}
        if t.cameras is not None:
            sees["cameras"] = list(t.cameras)
        if self.cell.prompt is not None and cfg.policy == REMOTE_FACTORY:
            sees["policy_kwargs"] = {**cfg.policy_kwargs, "prompt": self.cell.prompt}
        return dataclasses.replace(
            cfg, env=t.env, episodes=t.episodes, num_envs=t.num_envs, max_steps=t.max_steps, seed=t.seed, **sees
        )

    def explicit(self, explicit: set[str]) -> set[str]:
        """The run's explicit settings and the env, which the task names."""
        return explicit | {"env"}

    def context(self) -> dict[str, Any]:
        """The cell's fields: suite, task, condition, its settings, the run settings, the reference."""
        return self.cell.context(self.suite)

    def check(self, result: dict) -> None:
        """A :class:`BoundsError` naming the cell and the episode when a return lies outside the task's bounds."""
        bounds = self.cell.task.bounds
        if bounds is None:
            return
        try:
            checked(plain(result.get("eval/episode_returns", [])), bounds, self.name, 0)
        except ValueError as exc:
            raise BoundsError(str(exc)) from None

    @property
    def name(self) -> str:
        """``TASK / CONDITION``: how messages and the confidence sequences name the cell."""
        return f"{self.cell.task.env} / {self.cell.condition_name}"

    def label(self, name: str) -> str:
        """``NAME TASK / CONDITION``."""
        return f"{name} {self.cell.task.env} / {self.cell.condition_name}"

    def started(self, ck: Checkpoint, name: str, where: str) -> str:
        """``evaluating NAME (step N) on TASK / CONDITION ...``."""
        return f"evaluating {name} (step {ck.step}) on {self.cell.task.env} / {self.cell.condition_name} ..."

    def finished(self, ck: Checkpoint, name: str, result: dict, record: dict) -> str:
        """``NAME TASK / CONDITION: RETURN [LOW, HIGH]``."""
        m = record["metrics"]
        low, high = m.get("reward_ci_low"), m.get("reward_ci_high")
        band = f" [{low:.1f}, {high:.1f}]" if low is not None and high is not None else ""
        return f"{self.label(name)}: {m['reward']:.1f}{band}"


def check_suite(parsed: Parsed) -> Suite:
    """Load ``--suite`` and check it against the run: no per-task flag given, every task's env and conditions."""
    cfg = parsed.cfg
    clash = [f"--{k.replace('_', '-')}" for k in SUITE_SETTINGS if k in parsed.explicit]
    if clash:
        raise ConfigError(f"--suite {cfg.suite} sets {', '.join(clash)} per task: leave them out (or edit the file).")
    suite = load_suite(cfg.suite)
    for i, task in enumerate(suite.tasks):
        try:
            check_env(task.env, cfg.env_backend)
            check_conditions(task, cfg.env_backend, f"tasks[{i}]")
        except ValueError as exc:
            raise ConfigError(f"{cfg.suite}: task {task.env}: {exc}") from None
        _check_sees(task, cfg, f"{cfg.suite}: tasks[{i}].")
        _check_prompts(task, cfg, f"{cfg.suite}: tasks[{i}].")
        if task.search is not None:
            _check_search(cfg, f"{cfg.suite}: tasks[{i}].search")
    return suite


def _check_search(cfg: LaunchConfig, where: str) -> None:
    """A ``search:`` block maps one ``--checkpoint`` in a plain suite run; a ConfigError naming it otherwise."""
    if cfg.mode != "suite":
        raise ConfigError(f"{where}: a search runs in a plain suite run of one --checkpoint: leave --{cfg.mode} out.")
    if cfg.source != "checkpoint":
        given = f" instead of --{cfg.source.replace('_', '-')}" if cfg.source else ""
        raise ConfigError(f"{where}: a search maps one checkpoint: give --checkpoint CK{given}.")


def _check_prompts(task: SuiteTask, cfg: LaunchConfig, prefix: str) -> None:
    """A ConfigError naming the condition where one sets ``prompt`` variants and the policy is not a policy server's
    (a local policy reads no prompt: its episodes would not differ by the variant they claim)."""
    if cfg.policy == REMOTE_FACTORY:
        return
    for name, condition in task.conditions.items():
        if Prompt.name in condition.values:
            raise ConfigError(
                f"{prefix}conditions.{name}.{Prompt.name}: the text sent to a policy server; a local "
                "policy reads none: give --policy-server (or leave the condition out)."
            )


def _check_sees(task: SuiteTask, cfg: LaunchConfig, prefix: str) -> None:
    """What ``task``'s policy sees, the task's settings over the run's flags, as ``--cameras`` and its flags are
    checked (:meth:`LaunchConfig._check_cameras`); a ConfigError naming the file and the task's key otherwise."""
    cameras = task.cameras if task.cameras is not None else tuple(cfg.cameras)
    frame_stack = task.frame_stack if task.frame_stack is not None else cfg.frame_stack
    where = {k: f"{prefix}{k}" if getattr(task, k) is not None else f"--{k.replace('_', '-')}" for k in SEES}
    if not cameras:
        for key in ("image_size", "frame_stack"):
            if getattr(task, key) is not None:
                raise ConfigError(f"{where[key]}: sets the camera images of {task.env}: give the task cameras.")
        for name, condition in task.conditions.items():
            seen = condition.settings_of("camera")
            if seen:
                raise ConfigError(
                    f"{prefix}conditions.{name}: {', '.join(seen)} change the camera images of {task.env}: "
                    "give the task cameras."
                )
        return
    simulator = simulator_for(task.env, cfg.env_backend)
    if not simulator.cameras:
        titles = [s.title for s in registered() if s.cameras]
        able = " and ".join(filter(None, (", ".join(titles[:-1]), titles[-1])))
        raise ConfigError(f"{where['cameras']}: {task.env}: {simulator.title} envs observe no cameras; {able} envs do.")
    if cfg.policy_server and frame_stack > 1:
        raise ConfigError(
            f"{where['frame_stack']}: a policy server is sent each camera's current image and keeps its own history."
        )


def run_suite(session: Session, log: ResultsLog, suite: Suite, source: Callable[[set[str]], CheckpointSource]) -> int:
    """Every cell of ``suite`` for every checkpoint of ``source(seen)``, on the scheduler; exit code 0."""
    cfg = session.cfg
    print(f"suite {suite.name}: {len(suite.tasks)} task(s), {len(suite.cells())} cell(s)", flush=True)
    found = resume(log, cfg.retry_failed, cfg.until_step, suite=suite.name)
    cells = [SuiteCell(c, suite.name) for c in suite.cells()]

    def cells_for(ck: Checkpoint, name: str) -> list[SuiteCell]:
        mine = [c for c in cells if not ck.env or c.cell.task.env == ck.env]
        if not mine:
            tasks = ", ".join(t.env for t in suite.tasks)
            print(f"{name}: trained on {ck.env}, which is no task of suite {suite.name} ({tasks}).")
        return mine

    fixed = FixedStrategy(
        cells_for, found.done, {"suite": suite.name}, "cell evaluation(s)", backlog=True, closing=found.closing
    )
    return Scheduler(session, {"": log}, fixed).run(source(found.seen))


SEARCH_DIR = "search"
"""Where a suite run's searches go: ``OUT/search/<ENV>/``."""
_UNSAFE = re.compile(r"[^A-Za-z0-9_.+-]")


def search_dir(out: str, env: str) -> str:
    """``OUT/search/<ENV>``: a task's search run directory (``env`` made a file name)."""
    return os.path.join(out, SEARCH_DIR, _UNSAFE.sub("_", env))


def run_searches(session: Session, suite: Suite, ck: Checkpoint, out: str) -> int:
    """Each ``search:`` block of ``suite`` for ``ck``, task by task, into :func:`search_dir`; exit 0."""
    from simeval.launch.results import ResultsLog
    from simeval.launch.search import run_search  # the map's statistics: NumPy

    for task in searched_tasks(suite):
        cfg = task.search.config(SuiteCell(Cell(task, SEARCH_DIR, Condition()), suite.name).config(session.cfg))
        log = ResultsLog(search_dir(out, task.env), None)
        print(f"task {task.env}: search into {log.path}", flush=True)
        code = run_search(session, log, ck, cfg)
        if code or session.stop.is_set():
            return code
    return 0


def searched_tasks(suite: Suite) -> list[SuiteTask]:
    """The tasks of ``suite`` with a ``search:`` block, in file order."""
    return [task for task in suite.tasks if task.search is not None]
