"""Isaac Lab tasks whose assets ship with simeval, for machines without NVIDIA's asset server.

Isaac Lab's task configs load robots and the ground plane from NVIDIA's cloud.
The ids registered here are the real Isaac Lab cartpole tasks (same env
classes, rewards, resets, success metric and training configs) with two
changes: the robot comes from ``simeval/data/isaaclab/cartpole.usda`` (Isaac
Lab's own cartpole robot, extracted from the ``isaaclab`` wheel by
``tools/extract_cartpole_usd.py``) and there is no ground plane (the cart runs
on a rail; nothing touches the floor). Importing this module imports Isaac Lab.

The manager-based ``Simeval-Isaac-Cartpole`` also carries an event term that
Isaac Lab's cartpole lacks, ``events.add_pole_mass``: Isaac Lab's
``randomize_rigid_body_mass`` on the pole at every reset, off by default (scale
range ``(1.0, 1.0)``: the term returns at once, so it draws no random numbers
and the nominal task is exactly Isaac Lab's). A suite condition turns it on with
a config override, e.g. ``events.add_pole_mass.params.mass_distribution_params:
[0.5, 2.0]`` (each reset scales the pole's default mass, 1 kg, and inertia by a
uniform draw from that range).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import gymnasium as gym
from isaaclab.envs import mdp
from isaaclab.managers import EventTermCfg, SceneEntityCfg
from isaaclab.utils import configclass
from isaaclab_tasks.core.cartpole import cartpole_direct_env_cfg, cartpole_manager_env_cfg

if TYPE_CHECKING:
    import torch
    from isaaclab.envs import ManagerBasedEnv
    from isaaclab.scene import InteractiveSceneCfg

CARTPOLE_USD = os.path.join(os.path.dirname(__file__), *[os.pardir] * 3, "data", "isaaclab", "cartpole.usda")

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


class randomize_rigid_body_mass_unless_identity(mdp.randomize_rigid_body_mass):  # noqa: N801  (Isaac Lab's naming)
    """Isaac Lab's ``randomize_rigid_body_mass``, except that a scale range of ``(1.0, 1.0)`` does nothing.

    At the identity scale the term neither draws random numbers (so the other
    reset events see the same generator as without it) nor writes the masses
    (so Newton's model is not marked changed), unless an earlier call changed
    them: then it runs, and restores the default masses.
    """

    def __call__(
        self,
        env: ManagerBasedEnv,
        env_ids: torch.Tensor | slice | None,
        asset_cfg: SceneEntityCfg,
        mass_distribution_params: tuple[float, float],
        operation: str,
        distribution: str = "uniform",
        recompute_inertia: bool = True,
        min_mass: float = 1e-6,
    ) -> None:
        """Scale, add or set ``asset_cfg``'s body masses for ``env_ids``, unless the range is the identity scale."""
        identity = operation == "scale" and distribution != "gaussian" and tuple(mass_distribution_params) == (1.0, 1.0)
        if identity and self.default_mass is None:  # never scaled: nothing to restore either
            return
        super().__call__(
            env, env_ids, asset_cfg, mass_distribution_params, operation, distribution, recompute_inertia, min_mass
        )


def pole_mass_event() -> EventTermCfg:
    """The pole-mass event (``events.add_pole_mass``): every reset, scale the pole's mass; off by default."""
    return EventTermCfg(
        func=randomize_rigid_body_mass_unless_identity,
        mode="reset",
        params={
            "asset_cfg": SceneEntityCfg("robot", body_names=["pole"]),
            "mass_distribution_params": (1.0, 1.0),
            "operation": "scale",
            "distribution": "uniform",
            "recompute_inertia": True,
            "min_mass": 1e-6,
        },
    )


@configclass
class CartpoleOfflineEventCfg(cartpole_manager_env_cfg.EventCfg):
    """Isaac Lab's cartpole events, and ``add_pole_mass`` (:func:`pole_mass_event`, off by default)."""

    add_pole_mass: EventTermCfg = pole_mass_event()


@configclass
class CartpoleDirectOfflineCfg(cartpole_direct_env_cfg.CartpoleEnvCfg):
    """``Isaac-Cartpole-Direct`` with the robot from a local file and no ground plane."""

    def __post_init__(self):
        super().__post_init__()
        _offline(self.scene, "cartpole")


@configclass
class CartpoleOfflineCfg(cartpole_manager_env_cfg.CartpoleEnvCfg):
    """``Isaac-Cartpole`` (manager-based) with the robot from a local file, no ground plane, and a pole-mass event.

    ``events.add_pole_mass`` (:func:`pole_mass_event`) is off until an override sets its scale range.
    """

    events: CartpoleOfflineEventCfg = CartpoleOfflineEventCfg()

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
