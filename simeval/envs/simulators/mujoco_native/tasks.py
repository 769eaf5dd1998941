"""Gymnasium's MuJoCo v5 tasks as vectorised NumPy functions over a batch of simulations.

Each :class:`Task` restates one ``gymnasium/envs/mujoco/*_v5.py`` with its
defaults: the XML asset (loaded from gymnasium's own package), frame_skip,
observation layout, reward terms and weights, healthy ranges, termination and
reset noise. The functions take ``(N, ...)`` arrays (one row per simulation)
and keep gymnasium's floating-point operations and their order, so that the
same physics gives bit-identical observations and rewards: for instance the
control cost is computed in float32 from the float32 action, as gymnasium does.

Only the reset noise is drawn per simulation (one ``np.random.Generator``
each, qpos noise then qvel noise, as each gymnasium sub-env does); everything
on the step path works on whole batches.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import mujoco

# The fields of a batch a task can read: live (N, ...) arrays.
Sim = SimpleNamespace  # model, qpos, qvel, ctrl, cfrc_ext and the task's ``outputs`` (xpos, ...)


def assets_dir() -> str:
    """gymnasium's MuJoCo asset folder (the XML files the gymnasium backend loads)."""
    import gymnasium.envs.mujoco as gym_mujoco

    return os.path.join(os.path.dirname(gym_mujoco.__file__), "assets")


def _ctrl_cost(weight: float, action: np.ndarray) -> np.ndarray:
    """``weight * sum(action**2)`` per row, in the action's float32 as gymnasium computes it."""
    return np.float32(weight) * np.sum(np.square(action), axis=1)


def sub_env_generators(seed: int | None, n: int) -> list[np.random.Generator]:
    """One reset-noise generator per sub-env: gymnasium's ``np_random(seed + i)`` (PCG64), or fresh entropy."""
    if seed is None:
        return [np.random.Generator(np.random.PCG64()) for _ in range(n)]
    return [np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed + i))) for i in range(n)]


@dataclass(frozen=True)
class Task:
    """One gymnasium MuJoCo v5 task (its defaults), batched."""

    name: str
    xml: str
    frame_skip: int
    reset_noise_scale: float
    qvel_noise: str = "uniform"  # "uniform" (+-scale) or "normal" (scale * N(0, 1))
    outputs: tuple[str, ...] = ()  # derived MjData fields the task reads (bound on the batch)
    contact_forces: bool = False  # reads cfrc_ext, which needs mj_rnePostConstraint
    camera: dict = field(default_factory=dict)  # gymnasium's DEFAULT_CAMERA_CONFIG
    max_episode_steps: int = 1000  # gymnasium's registered TimeLimit

    def obs_dim(self, model: mujoco.MjModel) -> int:
        """The length of one observation row for ``model``."""
        raise NotImplementedError

    def position(self, sim: Sim) -> np.ndarray:
        """What the forward velocity is measured from, read before a step (a copy)."""
        return sim.qpos[:, 0].copy()

    def observe(self, sim: Sim, out: np.ndarray) -> np.ndarray:
        """Write the (N, obs_dim) observation into ``out`` (float32) and return it."""
        raise NotImplementedError

    def outcome(self, sim: Sim, action: np.ndarray, before: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
        """(reward float64 (N,), terminated bool (N,)) after a step taken with float32 ``action``."""
        raise NotImplementedError

    def initial_state(
        self, rng: np.random.Generator, init_qpos: np.ndarray, init_qvel: np.ndarray, noise_scale: float = 1.0
    ) -> tuple[np.ndarray, np.ndarray]:
        """One simulation's reset state: qpos noise, then qvel noise, from its own generator, times ``noise_scale``
        (``init_noise_scale``: the generator moves on as in a nominal reset, and 1.0 changes no bit)."""
        scale = self.reset_noise_scale
        qpos_noise = rng.uniform(low=-scale, high=scale, size=init_qpos.shape[0])
        if self.qvel_noise == "normal":
            qvel_noise = scale * rng.standard_normal(init_qvel.shape[0])
        else:
            qvel_noise = rng.uniform(low=-scale, high=scale, size=init_qvel.shape[0])
        return init_qpos + noise_scale * qpos_noise, init_qvel + noise_scale * qvel_noise


@dataclass(frozen=True)
class HalfCheetah(Task):
    """HalfCheetah: rewarded for forward velocity, never terminates."""

    forward_reward_weight: float = 1.0
    ctrl_cost_weight: float = 0.1

    def obs_dim(self, model: mujoco.MjModel) -> int:
        """The observation size for ``model``."""
        return model.nq - 1 + model.nv

    def observe(self, sim: Sim, out: np.ndarray) -> np.ndarray:
        """Write qpos (without x) and qvel into ``out`` and return it."""
        nq1 = sim.qpos.shape[1] - 1
        out[:, :nq1] = sim.qpos[:, 1:]
        out[:, nq1:] = sim.qvel
        return out

    def outcome(self, sim: Sim, action: np.ndarray, before: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
        """(forward reward minus control cost, never terminated) per simulation."""
        x_velocity = (sim.qpos[:, 0] - before) / dt
        reward = self.forward_reward_weight * x_velocity - _ctrl_cost(self.ctrl_cost_weight, action)
        return reward, np.zeros(reward.shape[0], dtype=bool)


@dataclass(frozen=True)
class Hopping(Task):
    """Hopper and Walker2d: planar, healthy while z and the torso angle stay in range."""

    forward_reward_weight: float = 1.0
    ctrl_cost_weight: float = 0.001
    healthy_reward: float = 1.0
    healthy_z_range: tuple[float, float] = (0.7, float("inf"))
    healthy_angle_range: tuple[float, float] = (-0.2, 0.2)
    healthy_state_range: tuple[float, float] | None = None

    def obs_dim(self, model: mujoco.MjModel) -> int:
        """The observation size for ``model``."""
        return model.nq - 1 + model.nv

    def observe(self, sim: Sim, out: np.ndarray) -> np.ndarray:
        """Write qpos (without x) and qvel clipped to [-10, 10] into ``out`` and return it."""
        nq1 = sim.qpos.shape[1] - 1
        out[:, :nq1] = sim.qpos[:, 1:]
        out[:, nq1:] = np.clip(sim.qvel, -10, 10)
        return out

    def healthy(self, sim: Sim) -> np.ndarray:
        """Bool (N,): z, torso angle (and for Hopper the state) within the healthy ranges."""
        z, angle = sim.qpos[:, 1], sim.qpos[:, 2]
        (min_z, max_z), (min_a, max_a) = self.healthy_z_range, self.healthy_angle_range
        ok = (min_z < z) & (z < max_z) & (min_a < angle) & (angle < max_a)
        if self.healthy_state_range is not None:  # Hopper: state_vector()[2:]
            lo, hi = self.healthy_state_range
            state = np.concatenate((sim.qpos[:, 2:], sim.qvel), axis=1)
            ok &= np.all((lo < state) & (state < hi), axis=1)
        return ok

    def outcome(self, sim: Sim, action: np.ndarray, before: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
        """(forward + healthy reward minus control cost, terminated when unhealthy) per simulation."""
        x_velocity = (sim.qpos[:, 0] - before) / dt
        healthy = self.healthy(sim)
        rewards = self.forward_reward_weight * x_velocity + healthy * self.healthy_reward
        reward = rewards - _ctrl_cost(self.ctrl_cost_weight, action)
        return reward, ~healthy


@dataclass(frozen=True)
class Ant(Task):
    """Ant: rewarded for forward velocity and staying healthy, charged for control and contact forces."""

    forward_reward_weight: float = 1
    ctrl_cost_weight: float = 0.5
    contact_cost_weight: float = 5e-4
    healthy_reward: float = 1.0
    main_body: int = 1
    healthy_z_range: tuple[float, float] = (0.2, 1.0)
    contact_force_range: tuple[float, float] = (-1.0, 1.0)

    def obs_dim(self, model: mujoco.MjModel) -> int:
        """The observation size for ``model``."""
        return model.nq - 2 + model.nv + (model.nbody - 1) * 6

    def position(self, sim: Sim) -> np.ndarray:
        """The main body's (x, y) position, (N, 2) (a copy)."""
        return sim.xpos[:, self.main_body, :2].copy()

    def observe(self, sim: Sim, out: np.ndarray) -> np.ndarray:
        """Write qpos (without x, y), qvel and the clipped contact forces into ``out`` and return it."""
        nq2, nv = sim.qpos.shape[1] - 2, sim.qvel.shape[1]
        out[:, :nq2] = sim.qpos[:, 2:]
        out[:, nq2 : nq2 + nv] = sim.qvel
        lo, hi = self.contact_force_range
        out[:, nq2 + nv :] = np.clip(sim.cfrc_ext[:, 1:], lo, hi).reshape(out.shape[0], -1)
        return out

    def outcome(self, sim: Sim, action: np.ndarray, before: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
        """(reward, terminated when unhealthy or not finite) per simulation."""
        xy_velocity = (sim.xpos[:, self.main_body, :2] - before) / dt
        z = sim.qpos[:, 2]
        finite = np.isfinite(sim.qpos).all(axis=1) & np.isfinite(sim.qvel).all(axis=1)
        min_z, max_z = self.healthy_z_range
        healthy = finite & (min_z <= z) & (z <= max_z)
        rewards = xy_velocity[:, 0] * self.forward_reward_weight + healthy * self.healthy_reward
        lo, hi = self.contact_force_range
        forces = np.clip(sim.cfrc_ext, lo, hi).reshape(z.shape[0], -1)
        contact_cost = self.contact_cost_weight * np.sum(np.square(forces), axis=1)
        reward = rewards - (_ctrl_cost(self.ctrl_cost_weight, action) + contact_cost)
        return reward, ~healthy


@dataclass(frozen=True)
class InvertedPendulum(Task):
    """InvertedPendulum: reward 1 per step until the pole leaves +-0.2 rad."""

    def obs_dim(self, model: mujoco.MjModel) -> int:
        """The observation size for ``model``."""
        return model.nq + model.nv

    def observe(self, sim: Sim, out: np.ndarray) -> np.ndarray:
        """Write qpos and qvel into ``out`` and return it."""
        nq = sim.qpos.shape[1]
        out[:, :nq] = sim.qpos
        out[:, nq:] = sim.qvel
        return out

    def outcome(self, sim: Sim, action: np.ndarray, before: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
        """(1.0 while upright else 0.0, terminated when the pole falls or the state is not finite)."""
        obs = np.concatenate((sim.qpos, sim.qvel), axis=1)
        terminated = ~np.isfinite(obs).all(axis=1) | (np.abs(obs[:, 1]) > 0.2)
        return (~terminated).astype(np.float64), terminated


@dataclass(frozen=True)
class Humanoid(Task):
    """Humanoid: rewarded for the mass centre's forward velocity and staying up."""

    forward_reward_weight: float = 1.25
    ctrl_cost_weight: float = 0.1
    contact_cost_weight: float = 5e-7
    contact_cost_range: tuple[float, float] = (-np.inf, 10.0)
    healthy_reward: float = 5.0
    healthy_z_range: tuple[float, float] = (1.0, 2.0)

    def obs_dim(self, model: mujoco.MjModel) -> int:
        """The observation size for ``model``."""
        nb = model.nbody - 1
        return model.nq - 2 + model.nv + nb * 10 + nb * 6 + (model.nv - 6) + nb * 6

    def position(self, sim: Sim) -> np.ndarray:
        """The mass centre's (x, y) position, (N, 2)."""
        return self._mass_center(sim)

    def _mass_center(self, sim: Sim) -> np.ndarray:
        mass = sim.model.body_mass
        return (np.einsum("b,nbj->nj", mass, sim.xipos) / mass.sum())[:, 0:2]

    def observe(self, sim: Sim, out: np.ndarray) -> np.ndarray:
        """Write qpos, qvel, cinert, cvel, actuator and contact forces into ``out`` and return it."""
        n = out.shape[0]
        parts = (
            sim.qpos[:, 2:],
            sim.qvel,
            sim.cinert[:, 1:].reshape(n, -1),
            sim.cvel[:, 1:].reshape(n, -1),
            sim.qfrc_actuator[:, 6:],
            sim.cfrc_ext[:, 1:].reshape(n, -1),
        )
        start = 0
        for part in parts:
            out[:, start : start + part.shape[1]] = part
            start += part.shape[1]
        return out

    def outcome(self, sim: Sim, action: np.ndarray, before: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
        """(reward, terminated when the torso height leaves the healthy range) per simulation."""
        xy_velocity = (self._mass_center(sim) - before) / dt
        z = sim.qpos[:, 2]
        min_z, max_z = self.healthy_z_range
        healthy = (min_z < z) & (z < max_z)
        rewards = self.forward_reward_weight * xy_velocity[:, 0] + healthy * self.healthy_reward
        ctrl_cost = self.ctrl_cost_weight * np.sum(np.square(sim.ctrl), axis=1)  # data.ctrl: float64
        n = z.shape[0]
        contact_cost = self.contact_cost_weight * np.sum(np.square(sim.cfrc_ext.reshape(n, -1)), axis=1)
        contact_cost = np.clip(contact_cost, *self.contact_cost_range)
        return rewards - (ctrl_cost + contact_cost), ~healthy


TASKS: dict[str, Task] = {
    "HalfCheetah-v5": HalfCheetah(
        "HalfCheetah-v5",
        "half_cheetah.xml",
        frame_skip=5,
        reset_noise_scale=0.1,
        qvel_noise="normal",
        camera={"distance": 4.0},
    ),
    "Hopper-v5": Hopping(
        "Hopper-v5",
        "hopper.xml",
        frame_skip=4,
        reset_noise_scale=5e-3,
        camera={"trackbodyid": 2, "distance": 3.0, "lookat": (0.0, 0.0, 1.15), "elevation": -20.0},
        healthy_state_range=(-100.0, 100.0),
    ),
    "Walker2d-v5": Hopping(
        "Walker2d-v5",
        "walker2d_v5.xml",
        frame_skip=4,
        reset_noise_scale=5e-3,
        camera={"trackbodyid": 2, "distance": 4.0, "lookat": (0.0, 0.0, 1.15), "elevation": -20.0},
        healthy_z_range=(0.8, 2.0),
        healthy_angle_range=(-1.0, 1.0),
    ),
    "Ant-v5": Ant(
        "Ant-v5",
        "ant.xml",
        frame_skip=5,
        reset_noise_scale=0.1,
        qvel_noise="normal",
        outputs=("xpos",),
        contact_forces=True,
        camera={"distance": 4.0},
    ),
    "InvertedPendulum-v5": InvertedPendulum(
        "InvertedPendulum-v5",
        "inverted_pendulum.xml",
        frame_skip=2,
        reset_noise_scale=0.01,
        camera={"trackbodyid": 0, "distance": 2.04},
    ),
    "Humanoid-v5": Humanoid(
        "Humanoid-v5",
        "humanoid.xml",
        frame_skip=5,
        reset_noise_scale=1e-2,
        outputs=("xipos", "cinert", "cvel", "qfrc_actuator"),
        contact_forces=True,
        camera={"trackbodyid": 1, "distance": 4.0, "lookat": (0.0, 0.0, 2.0), "elevation": -20.0},
    ),
}


def get_task(name: str) -> Task:
    """The task called ``name`` (a gymnasium id), or a ValueError naming the supported ones."""
    try:
        return TASKS[name]
    except KeyError:
        raise ValueError(f"no native MuJoCo env for {name!r}; native tasks: {', '.join(TASKS)}.") from None


_RNEPOST_SENSOR = "simeval_rnepost"


def load_model(task: Task, contact_sensor: bool = False) -> mujoco.MjModel:
    """The task's MjModel, from the XML file gymnasium loads.

    ``contact_sensor`` adds a frame-acceleration sensor, which changes no
    dynamics: a sensor that needs accelerations makes the forward pass of
    every ``mj_step`` run ``mj_rnePostConstraint``, which fills ``cfrc_ext``
    (the contact forces Ant and Humanoid observe). It runs at the start of the
    physics substep (RK4's intermediate stages skip sensors); see
    ``MujocoBatchEnv(exact_contact_forces=...)``.
    """
    import mujoco

    with open(os.path.join(assets_dir(), task.xml)) as f:
        xml, total_mass = _without_settotalmass(f.read())
    spec = mujoco.MjSpec.from_string(xml)
    if contact_sensor:
        spec.add_sensor(
            name=_RNEPOST_SENSOR,
            type=mujoco.mjtSensor.mjSENS_FRAMELINACC,
            objtype=mujoco.mjtObj.mjOBJ_BODY,
            objname=spec.worldbody.first_body().name,
        )
    model = spec.compile()
    if total_mass is not None:
        # What the deprecated compiler attribute did, done as MuJoCo's deprecation notice says:
        # the same model, field for field (tests/test_native_envs.py checks it against the XML).
        mujoco.mj_setTotalmass(model, total_mass)
        mujoco.mj_setConst(model, mujoco.MjData(model))
    return model


def _without_settotalmass(xml: str) -> tuple[str, float | None]:
    """The XML without ``<compiler settotalmass=...>`` (deprecated in MuJoCo 4, and warned
    about at every load), and the total mass it asked for."""
    found = re.search(r'\s+settotalmass="([^"]+)"', xml)
    if found is None:
        return xml, None
    return xml[: found.start()] + xml[found.end() :], float(found.group(1))
