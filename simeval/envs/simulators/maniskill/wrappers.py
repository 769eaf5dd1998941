"""The gymnasium wrapper each ManiSkill3 sub-env runs under (imports gymnasium: loaded when an env is built)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym


class FreshSceneOnSeed(gym.Wrapper):
    """A seeded reset rebuilds the SAPIEN scene (ManiSkill3's ``reconfigure``); unseeded resets do not.

    A scene kept from earlier episodes carries solver state into the next ones, so a seeded
    reset of a used env would not replay the episodes of a fresh one. Rounds start with a
    seeded reset, so every round of a seed runs the same episodes (common random numbers).
    """

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        """ManiSkill3's reset, with ``reconfigure`` where ``seed`` is given."""
        if seed is not None:
            options = {**(options or {}), "reconfigure": True}
        return self.env.reset(seed=seed, options=options)
