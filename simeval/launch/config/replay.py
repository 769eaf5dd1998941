"""The replay section: ``--replay DIR --replay-episode LINE:INDEX``, one recorded episode re-run exactly.

A replay takes everything from the results line (its checkpoint, env, condition and round), so it refuses the
flags that say what to evaluate; ``--video`` (the output section's) records the replayed episode.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from simeval.launch.config.base import ConfigError, Section, opt

_EPISODE = re.compile(r"(\d+):(\d+)")


@dataclass
class ReplaySection(Section):
    """``--replay`` and ``--replay-episode``: which recorded episode to re-run, and the flags a replay refuses."""

    title = "replay"
    reads = ("source", "suite", "until_decided", "until_precise", "select_best", "baseline", "launcher", "out")

    replay: str | None = opt(
        None,
        "re-run one episode of the run directory DIR (an --out, or OUT/a, OUT/b of --until-decided) in the round it "
        "was recorded in, and say whether its return comes back to the bit; with --replay-episode; writes "
        "DIR/replays.jsonl (--video: the episode's MP4 into DIR/videos/)",
        metavar="DIR",
    )
    replay_episode: str | None = opt(
        None,
        "--replay: LINE:INDEX, the line of DIR/results.jsonl (from 1, as an editor numbers them) and the "
        "episode's index in that line's episode lists (from 0)",
        metavar="LINE:INDEX",
    )

    @property
    def replay_line(self) -> int:
        """``--replay-episode``'s line number (from 1)."""
        return self._replay_target()[0]

    @property
    def replay_index(self) -> int:
        """``--replay-episode``'s episode index (from 0)."""
        return self._replay_target()[1]

    def _replay_target(self) -> tuple[int, int]:
        """(line, index) of ``--replay-episode``; ConfigError for anything but LINE:INDEX with LINE >= 1."""
        found = _EPISODE.fullmatch(str(self.replay_episode or "").strip())
        if found is None or int(found[1]) < 1:
            raise ConfigError(
                "--replay-episode must look like LINE:INDEX (e.g. 3:0: line 3 of results.jsonl, its first "
                f"episode; lines count from 1, episodes from 0), got {self.replay_episode!r}."
            )
        return int(found[1]), int(found[2])

    def check(self) -> None:
        """Both flags or neither, LINE:INDEX, and nothing that says what else to evaluate."""
        if self.replay_episode is not None and not self.replay:
            raise ConfigError(
                "--replay-episode needs --replay DIR (the run directory whose results.jsonl has the line)."
            )
        if not self.replay:
            return
        if self.replay_episode is None:
            raise ConfigError(
                "--replay DIR needs --replay-episode LINE:INDEX (the line of DIR/results.jsonl, from 1, and the "
                "episode's index in it, from 0)."
            )
        self._replay_target()
        given = [
            name
            for name, value in (
                (f"--{(self.source or '').replace('_', '-')}", self.source),
                ("--suite", self.suite),
                ("--until-decided", self.until_decided),
                ("--until-precise", self.until_precise is not None),
                ("--select-best", self.select_best),
                ("--baseline", self.baseline),
            )
            if value
        ]
        if given:
            raise ConfigError(
                f"--replay re-runs an episode as its results line recorded it (checkpoint, env, condition, round): "
                f"leave {given[0]} out."
            )
        if self.out:
            raise ConfigError("--replay writes into DIR (replays.jsonl, videos/): leave --out out.")
        if self.launcher == "docker":
            raise ConfigError("--replay runs with --launcher local: the Docker launcher mounts no run directory.")
