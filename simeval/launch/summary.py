"""The table a launcher run ends with: one row per evaluation, the failures and how to retry them.

:class:`RunSummary` is filled by the pipeline as outcomes are recorded (an ok
line, a failed line, a checkpoint that could not be read, a watched file still
being written when the run ended: ``unsettled``) and printed once at
the end of the run (also after a stop by signal). Plain text, so that a Slurm
log shows the same table a terminal does. With ``--video`` it names each
evaluation's MP4 (``<out>/videos/step_<step>.mp4``) under the table.
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Row:
    """One evaluation's outcome."""

    label: str
    status: str
    mean: float | None = None
    low: float | None = None
    high: float | None = None
    episodes: int | None = None
    wall_s: float | None = None
    reason: str = ""
    video: str | None = None


@dataclass
class RunSummary:
    """The outcomes of a run, in the order they were recorded; ``video_dir``: where ``--video`` writes its MP4s."""

    rows: list[Row] = field(default_factory=list)
    video_dir: str | None = None

    def ok(self, label: str, record: dict[str, Any]) -> None:
        """Add the ok results line ``record`` of the evaluation ``label``."""
        m = record.get("metrics", {})
        episodes = m.get("num_episodes")
        self.rows.append(
            Row(
                label,
                "ok",
                m.get("reward"),
                m.get("reward_ci_low"),
                m.get("reward_ci_high"),
                int(episodes) if episodes is not None else len(record.get("episode_returns", [])),
                record.get("wall_time"),
                video=self._video(record.get("step")),
            )
        )

    def _video(self, step: int | None) -> str | None:
        """The MP4 ``--video`` wrote for ``step``, if it did."""
        if self.video_dir is None:
            return None
        path = os.path.join(self.video_dir, f"step_{int(step or 0):09d}.mp4")
        return path if os.path.exists(path) else None

    def failed(self, label: str, reason: str, wall_s: float | None = None) -> None:
        """Add the failed evaluation ``label`` and its one-line ``reason``."""
        self.rows.append(Row(label, "failed", wall_s=wall_s, reason=reason))

    def unsettled(self, label: str, reason: str) -> None:
        """Add ``label``, a watched file still being written when the run ended (the next run reads it)."""
        self.rows.append(Row(label, "unsettled", reason=reason))

    def render(self, retry: bool = True) -> str:
        """The table, then each failure's reason and (``retry``) the command that evaluates them again, then each
        unsettled file."""
        if not self.rows:
            return "summary: nothing evaluated in this run"
        width = max(len("evaluation"), *(len(r.label) for r in self.rows))
        unsettled = [r for r in self.rows if r.status == "unsettled"]
        failed = [r for r in self.rows if r.status == "failed"]
        head = f"summary: {len(self.rows)} evaluation(s), {len(failed)} failed"
        lines = [head + (f", {len(unsettled)} unsettled" if unsettled else "")]
        status = max(6, *(len(r.status) for r in self.rows))
        lines.append(
            f"{'evaluation':<{width}}  {'status':<{status}}  {'mean':>10}  {'95% CI':>21}  {'episodes':>8}  {'wall':>8}"
        )
        for r in self.rows:
            ci = f"[{_num(r.low)}, {_num(r.high)}]" if r.low is not None and r.high is not None else "-"
            episodes = str(r.episodes) if r.episodes is not None else "-"
            row = f"{r.label:<{width}}  {r.status:<{status}}  {_num(r.mean):>10}  {ci:>21}  {episodes:>8}"
            lines.append(f"{row}  {_wall(r.wall_s):>8}")
        videos = [r for r in self.rows if r.video]
        if videos:
            lines.append("videos:")
            lines += [f"  {r.label}: {r.video}" for r in videos]
        if failed:
            lines.append("failed:")
            lines += [f"  {r.label}: {r.reason}" for r in failed]
            if retry:
                lines.append(f"retry them with: {retry_command()}")
        if unsettled:
            lines.append("unsettled (the same command again reads them):")
            lines += [f"  {r.label}: {r.reason}" for r in unsettled]
        return "\n".join(lines)


def retry_command(argv: list[str] | None = None) -> str:
    """The launcher's command line (``argv``: its arguments, default this process's) with ``--retry-failed``."""
    if argv is None:
        launched = sys.argv[0].endswith(os.path.join("launch", "__main__.py"))
        launched = launched or os.path.basename(sys.argv[0]) == "simeval-launch"
        argv = sys.argv[1:] if launched else None
    if argv is None:
        return "the same command with --retry-failed"
    args = list(argv) + ([] if "--retry-failed" in argv else ["--retry-failed"])
    return shlex.join(["python", "-m", "simeval.launch", *args])


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}"


def _wall(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
