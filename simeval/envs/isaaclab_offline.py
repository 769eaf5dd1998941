"""Isaac Lab tasks whose assets ship with simeval, for machines without NVIDIA's asset server.

Isaac Lab's task configs load robots and the ground plane from NVIDIA's cloud.
The ids registered here are the real Isaac Lab cartpole tasks (same env
classes, rewards, resets, success metric and training configs) with two
changes: the robot comes from ``simeval/data/isaaclab/cartpole.usda`` (Isaac
Lab's own cartpole robot, extracted from the ``isaaclab`` wheel by
``tools/extract_cartpole_usd.py``) and there is no ground plane (the cart runs
on a rail; nothing touches the floor). Importing this module imports Isaac Lab.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import gymnasium as gym
from isaaclab.utils import configclass
from isaaclab_tasks.core.cartpole import cartpole_direct_env_cfg, cartpole_manager_env_cfg

if TYPE_CHECKING:
    from isaaclab.scene import InteractiveSceneCfg

CARTPOLE_USD = os.path.join(os.path.dirname(__file__), os.pardir, "data", "isaaclab", "cartpole.usda")

# simeval's id -> the Isaac Lab id it mirrors.
OFFLINE_TASKS = {
    "Simeval-Isaac-Cartpole-Direct": "Isaac-Cartpole-Direct",
    "Simeval-Isaac-Cartpole": "Isaac-Cartpole",
}


def _offline(scene: InteractiveSceneCfg, robot: str) -> None:
    """No ground plane, and the scene's ``robot`` asset spawned from the local cartpole USD."""
    scene.ground = None
    asset = getattr(scene, robot)
    spawn = asset.spawn.replace(usd_path=os.path.abspath(CARTPOLE_USD))
    setattr(scene, robot, asset.replace(spawn=spawn))


@configclass
class CartpoleDirectOfflineCfg(cartpole_direct_env_cfg.CartpoleEnvCfg):
    """``Isaac-Cartpole-Direct`` with the robot from a local file and no ground plane."""

    def __post_init__(self):
        super().__post_init__()
        _offline(self.scene, "cartpole")


@configclass
class CartpoleOfflineCfg(cartpole_manager_env_cfg.CartpoleEnvCfg):
    """``Isaac-Cartpole`` (manager-based) with the robot from a local file and no ground plane."""

    def __post_init__(self):
        super().__post_init__()
        _offline(self.scene, "robot")


_CFGS = {
    "Simeval-Isaac-Cartpole-Direct": CartpoleDirectOfflineCfg,
    "Simeval-Isaac-Cartpole": CartpoleOfflineCfg,
}


def register() -> None:
    """Register the offline ids in gymnasium (idempotent), copying the mirrored task's entry points."""
    for task, original in OFFLINE_TASKS.items():
        if task in gym.registry:
            continue
        spec = gym.registry[original]
        kwargs = dict(spec.kwargs)
        kwargs["env_cfg_entry_point"] = f"{__name__}:{_CFGS[task].__name__}"
        gym.register(id=task, entry_point=spec.entry_point, disable_env_checker=True, kwargs=kwargs)
