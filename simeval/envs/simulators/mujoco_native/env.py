"""Native batched MuJoCo envs: N copies of a gymnasium v5 task stepped by ``mujoco.batch``.

``mujoco.batch.Batch`` objects (one per group of sub-envs, see
:mod:`simeval.envs.simulators.mujoco_native.groups`) hold the physics state and step it in C on a
thread pool with the GIL released; observations, rewards,
terminations and truncations are computed for the whole batch at once with
NumPy (see :mod:`simeval.envs.simulators.mujoco_native.tasks`). No Python code runs per sub-env
on the step path; only a reset draws each reset sub-env's noise from its own
generator, as gymnasium's sub-envs do.

It mirrors the gymnasium backend of :func:`simeval.envs.make_env` (a
``SyncVectorEnv`` under torchrl's ``GymWrapper``): same XML assets, same
float32 outputs and keys, the TimeLimit of the gymnasium registry, and the same
seeding (sub-env ``i`` is seeded with ``seed + i`` and ``set_seed`` resets every
sub-env, as ``GymWrapper.set_seed`` does), so one seed gives the same initial
states, and the same actions the same episodes, on both backends.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Bounded, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

from simeval.envs.layout import STATE_KEY, image_key
from simeval.envs.simulators.mujoco_native.groups import SimGroup, split
from simeval.envs.simulators.mujoco_native.tasks import get_task, load_model, sub_env_generators

if TYPE_CHECKING:
    import mujoco


MAX_IMAGE_SIDE = 1024
# What render() (the frames of --video) leaves out: software OpenGL spends most of a frame on them.
VIDEO_FLAGS_OFF = ("mjRND_SHADOW", "mjRND_REFLECTION")


class _Eyes:
    """One renderer and one scratch MjData that render every sub-env's cameras, one sub-env after the other.

    Made in the thread that steps the env (an OpenGL context belongs to its thread).
    """

    def __init__(self, model: mujoco.MjModel, cameras: tuple[str, ...], size: tuple[int, int]) -> None:
        import mujoco

        height, width = size
        model.vis.global_.offwidth = max(model.vis.global_.offwidth, width)
        model.vis.global_.offheight = max(model.vis.global_.offheight, height)
        self.model, self.cameras, self.size = model, cameras, size
        self.data = mujoco.MjData(model)
        self.ids = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, c) for c in cameras]
        # The model's 4096-pixel shadow map and 4x multisampling cost 90 ms a frame in software OpenGL:
        # a map four times the image's side (at least 256) and none, for this renderer only.
        quality = model.vis.quality
        kept = quality.shadowsize, quality.offsamples
        quality.shadowsize, quality.offsamples = max(256, 4 * max(height, width)), 0
        try:
            self.renderer = mujoco.Renderer(model, height=height, width=width)
        finally:
            quality.shadowsize, quality.offsamples = kept

    def render(self, groups: list[SimGroup]) -> dict[str, np.ndarray]:
        """Each camera's frames of every sub-env, ``(num_envs, H, W, 3)`` uint8, in sub-env order, under each
        sub-env's camera and light settings (:func:`adjust_scene`)."""
        import mujoco

        n = sum(g.size for g in groups)
        frames = {c: np.empty((n, *self.size, 3), dtype=np.uint8) for c in self.cameras}
        for g in groups:
            view = g.view()
            for local in range(g.size):
                data = g.batch.get_data(local, self.data)
                mujoco.mj_forward(self.model, data)
                for camera, cam_id in zip(self.cameras, self.ids, strict=True):
                    self.renderer.update_scene(data, camera=cam_id)
                    if view is not None:
                        adjust_scene(self.renderer.scene, *view[local].tolist())
                    self.renderer.render(out=frames[camera][g.first + local])
        return frames

    def close(self) -> None:
        """Free the renderer's OpenGL context."""
        self.renderer.close()


def adjust_scene(scene: mujoco.MjvScene, shift: float, tilt: float, intensity: float, direction: float) -> None:
    """One sub-env's camera terms on a scene ``update_scene`` just made (its physics untouched).

    The camera (both eyes) moves ``shift`` metres along its own right axis and turns ``tilt`` degrees about it
    (positive: up), the headlight with it; every light's ambient, diffuse and specular intensity is scaled by
    ``intensity``; the model's lights (not the headlight) turn ``direction`` degrees about the world's y axis.
    Nominal values change nothing.
    """
    if shift or tilt:
        c, s = np.cos(np.radians(tilt)), np.sin(np.radians(tilt))
        for eye in scene.camera:
            forward, up = eye.forward.astype(np.float64), eye.up.astype(np.float64)
            eye.pos[:] = eye.pos + shift * np.cross(forward, up)
            eye.forward[:] = c * forward + s * up
            eye.up[:] = c * up - s * forward
        for light in scene.lights[: scene.nlight]:
            if light.headlight:
                light.pos[:] = np.mean([eye.pos for eye in scene.camera], axis=0)
                light.dir[:] = np.mean([eye.forward for eye in scene.camera], axis=0)
    if intensity != 1.0:
        for light in scene.lights[: scene.nlight]:
            light.ambient[:] = light.ambient * intensity
            light.diffuse[:] = light.diffuse * intensity
            light.specular[:] = light.specular * intensity
    if direction:
        c, s = np.cos(np.radians(direction)), np.sin(np.radians(direction))
        for light in scene.lights[: scene.nlight]:
            if not light.headlight:
                x, y, z = light.dir.astype(np.float64)
                light.dir[:] = (c * x + s * z, y, c * z - s * x)


def _available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def action_rows(action: torch.Tensor, rows: int) -> np.ndarray:
    """An action tensor (any device) as the float32 (rows, nu) array the controls are set from."""
    action = action.detach()
    if action.device.type != "cpu":
        action = action.cpu()
    a = action.numpy().reshape(rows, -1)
    return a if a.dtype == np.float32 else a.astype(np.float32)


class MujocoBatchEnv(EnvBase):
    """A batch of ``num_envs`` sub-envs of a gymnasium MuJoCo v5 task, as one torchrl env.

    Args:
        task: gymnasium id, one of :data:`simeval.envs.simulators.mujoco_native.tasks.TASKS`.
        num_envs: sub-envs (batch size ``[num_envs]``).
        device: where the output tensors go (the physics runs on CPU); ``None``: CPU.
        num_threads: threads that step the batch (``None``: one per available
            CPU, at most ``num_envs``).
        max_episode_steps: truncation step (``None``: gymnasium's registered
            TimeLimit, 1000 for every task here).
        exact_contact_forces: Ant and Humanoid only (their observed contact
            forces, ``cfrc_ext``, and contact cost). gymnasium calls
            ``mj_rnePostConstraint`` after ``mj_step``, so with these tasks'
            RK4 integrator it reads the forces of the last RK4 stage, an
            intermediate state that ``mujoco.batch`` cannot reach without a
            call per sub-env. By default (``False``, no Python per sub-env) the
            forces are those of the forward pass at the start of the last
            physics substep, one RK4 stage earlier; everything else is
            unchanged. ``True`` reproduces gymnasium's values exactly with a
            Python loop over the sub-envs in contact (``get_data`` and
            ``mj_rnePostConstraint``, ~15 us each): a few percent on 2 cores,
            but serial, so its share grows with the batch's thread count.
        render_size: (height, width) of :meth:`render` frames.
        render_mode: ``"rgb_array"`` says the env is meant to render (as
            gymnasium's attribute of that name: frame recorders look at it);
            :meth:`render` works either way when an OpenGL backend is set.
        cameras: the model's cameras every sub-env observes at every step (e.g. ``("track",)``):
            the observation is then ``observation.state`` (the task's vector) and
            ``observation.images.<camera>``, float32 ``(3, H, W)`` in [0, 1] (LeRobot's
            keys and layout), rendered by MuJoCo's renderer on the CPU (an OpenGL
            context: ``MUJOCO_GL=egl`` or ``osmesa`` headless) in the stepping thread.
            ``()``: the plain ``observation`` vector, nothing rendered.
        image_size: (height, width) of the camera observations.
        groups: the sub-envs are kept in this many contiguous groups (1 or 2), each
            its own ``mujoco.batch.Batch`` (``None``: 1). A torchrl step steps them
            one after the other (same numbers either way); simeval's rollout steps
            one group's physics while the policy runs on the other's observations.
            That pays where the physics leaves cores idle (a GPU policy, more cores
            than batch threads); on a 2-core machine whose batch threads already use
            both cores, two groups measured 3-10% slower than one, hence the default.
    """

    action_rows = staticmethod(action_rows)  # what the direct round engine sets a group's controls from

    def __init__(
        self,
        task: str = "HalfCheetah-v5",
        num_envs: int = 1,
        *,
        device: str | torch.device | None = None,
        num_threads: int | None = None,
        max_episode_steps: int | None = None,
        exact_contact_forces: bool = False,
        render_size: tuple[int, int] = (240, 240),
        render_mode: str | None = None,
        groups: int | None = None,
        cameras: tuple[str, ...] | list[str] = (),
        image_size: tuple[int, int] = (64, 64),
    ) -> None:
        import mujoco

        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}.")
        if groups is not None and groups not in (1, 2):
            raise ValueError(f"groups must be 1 or 2 (None: 1), got {groups}.")
        self.task = get_task(task)
        super().__init__(device=device, batch_size=torch.Size([num_envs]))
        exact = bool(exact_contact_forces and self.task.contact_forces)
        self._model = load_model(self.task, contact_sensor=self.task.contact_forces and not exact)
        threads = num_threads if num_threads is not None else min(_available_cpus(), num_envs)
        groups = min(groups or 1, num_envs)
        self.elapsed = np.zeros(num_envs, dtype=np.int64)
        self.groups = [
            SimGroup(self._model, self.task, first, size, min(threads, size), exact, self.elapsed[first : first + size])
            for first, size in split(num_envs, groups)
        ]
        self.num_threads = max(1, threads)
        self._n = num_envs
        self.dt = self._model.opt.timestep * self.task.frame_skip  # as gymnasium's MujocoEnv.dt
        self.max_episode_steps = max_episode_steps or self.task.max_episode_steps
        data = mujoco.MjData(self._model)
        self._init = (data.qpos.copy(), data.qvel.copy())
        self.obs_dim = self.task.obs_dim(self._model)
        self._rngs: list[np.random.Generator] | None = None
        self._render_size = render_size
        self.render_mode = render_mode
        self._renderer = None
        self.cameras = tuple(cameras)
        self.image_size = (int(image_size[0]), int(image_size[1]))
        self._eyes: _Eyes | None = None
        if self.cameras:
            known = [mujoco.mj_id2name(self._model, mujoco.mjtObj.mjOBJ_CAMERA, i) for i in range(self._model.ncam)]
            unknown = [c for c in self.cameras if c not in known]
            if unknown:
                raise ValueError(
                    f"{task}: no camera {', '.join(map(repr, unknown))} in its model; its cameras: "
                    f"{', '.join(map(repr, known)) or 'none'}."
                )
            if min(self.image_size) < 1 or max(self.image_size) > MAX_IMAGE_SIDE:
                raise ValueError(f"image_size must be 1..{MAX_IMAGE_SIDE} pixels a side, got {image_size!r}.")
        self._make_specs()
        self.is_closed = False

    # -- specs ------------------------------------------------------------
    def _make_specs(self) -> None:
        n, nu = self._n, self._model.nu
        bounds = self._model.actuator_ctrlrange.astype(np.float32)  # gymnasium's action space
        state = Unbounded(shape=(n, self.obs_dim), dtype=torch.float32, device=self.device)
        if self.cameras:
            height, width = self.image_size
            image = {"low": 0.0, "high": 1.0, "shape": (n, 3, height, width), "dtype": torch.float32}
            keys = {STATE_KEY: state} | {image_key(c): Bounded(**image, device=self.device) for c in self.cameras}
            self.observation_spec = Composite(keys, shape=(n,))
        else:
            self.observation_spec = Composite(observation=state, shape=(n,))
        self.action_spec = Bounded(
            low=torch.as_tensor(bounds[:, 0]).expand(n, nu),
            high=torch.as_tensor(bounds[:, 1]).expand(n, nu),
            shape=(n, nu),
            dtype=torch.float32,
            device=self.device,
        )
        self.reward_spec = Unbounded(shape=(n, 1), dtype=torch.float32, device=self.device)
        flag = {"shape": (n, 1), "dtype": torch.bool, "device": self.device}
        self.done_spec = Composite(
            done=Categorical(2, **flag), terminated=Categorical(2, **flag), truncated=Categorical(2, **flag), shape=(n,)
        )

    # -- seeding and resets ---------------------------------------------------
    def _set_seed(self, seed: int | None) -> None:
        """Seed sub-env ``i`` with ``seed + i``, then reset every sub-env (as GymWrapper.set_seed does)."""
        if seed is not None:
            self._seed(seed)
        self.reset_sims(None)

    def _seed(self, seed: int) -> None:
        self._rngs = sub_env_generators(seed, self._n)

    def reset_sims(self, ids: np.ndarray | None, group: SimGroup | None = None) -> None:
        """gymnasium's reset of the sub-envs ``ids`` (None: all), each from its own generator.

        With ``group``, ``ids`` are local to it (the direct rollout resets one group at a time).
        """
        if self._rngs is None:  # unseeded: fresh entropy, as gymnasium's np_random(None)
            self._rngs = sub_env_generators(None, self._n)
        for g in self.groups if group is None else (group,):
            local = ids
            if group is None and ids is not None:
                local = ids[(ids >= g.first) & (ids < g.first + g.size)] - g.first
                if not len(local):
                    continue
            g.reset(local, self._rngs[g.rows], self._init)
            self.elapsed[g.rows][slice(None) if local is None else local] = 0

    def set_terms(self, ids: np.ndarray, values: dict[str, np.ndarray]) -> None:
        """Give the sub-envs ``ids`` their own settings before their next reset (see ``SimGroup.set_terms``).

        ``values`` maps a term native MuJoCo applies (``NativeMujoco.terms``: ``body_mass_scale``,
        ``push``, ``init_noise_scale``, ``camera_shift``, ...) to one value per id
        (:class:`simeval.envs.perturb.Perturb` draws them per episode). A sub-env keeps a value until it
        is set again: the push acts at its step, the camera settings at every render.
        """
        ids = np.asarray(ids, dtype=np.int64)
        for g in self.groups:
            inside = (ids >= g.first) & (ids < g.first + g.size)
            if inside.any():
                g.set_terms(ids[inside] - g.first, {k: np.asarray(v)[inside] for k, v in values.items()})

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        seed = kwargs.get("seed")
        if seed is not None:
            self._seed(seed)
        mask = None if tensordict is None else tensordict.get("_reset", None)
        ids = None
        if mask is not None:
            mask = mask.reshape(-1).cpu().numpy()
            ids = None if mask.all() else np.flatnonzero(mask).astype(np.int32)
        if ids is None or len(ids):
            self.reset_sims(ids)
        obs = np.empty((self._n, self.obs_dim), dtype=np.float32)
        for g in self.groups:
            g.observe(obs[g.rows])
        false = torch.zeros((self._n, 1), dtype=torch.bool)
        out = {
            **self._observations(obs),
            "done": false,
            "terminated": false.clone(),
            "truncated": false.clone(),
        }
        return self._wrap(out)

    # -- stepping ---------------------------------------------------------
    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        a = action_rows(tensordict.get("action"), self._n)
        obs = np.empty((self._n, self.obs_dim), dtype=np.float32)
        reward = np.empty(self._n, dtype=np.float64)
        terminated = np.empty(self._n, dtype=bool)
        truncated = np.empty(self._n, dtype=bool)
        for g in self.groups:
            g.begin(a[g.rows])
            g.physics()
            reward[g.rows], terminated[g.rows], truncated[g.rows] = self.finish_group(g, obs[g.rows])
        terminated = torch.from_numpy(terminated).unsqueeze(-1)
        truncated = torch.from_numpy(truncated).unsqueeze(-1)
        out = {
            **self._observations(obs),
            "reward": torch.from_numpy(reward.astype(np.float32)).unsqueeze(-1),
            "done": terminated | truncated,
            "terminated": terminated,
            "truncated": truncated,
        }
        return self._wrap(out)

    def finish_group(self, g: SimGroup, obs_out: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """After group ``g``'s physics: observations into ``obs_out``; (reward float64, terminated, truncated).

        Truncation is the task's time limit, counted per sub-env; ``_step`` and the rollout share it.
        """
        reward, terminated = g.finish(obs_out, self.dt)
        elapsed = self.elapsed[g.rows]
        elapsed += 1
        return reward, terminated, elapsed >= self.max_episode_steps

    def _observations(self, obs: np.ndarray) -> dict[str, torch.Tensor]:
        """The step's observation entries: ``observation``, or the state and every camera's images."""
        if not self.cameras:
            return {"observation": torch.from_numpy(obs)}
        if self._eyes is None:
            self._eyes = _Eyes(self._model, self.cameras, self.image_size)
        frames = self._eyes.render(self.groups)
        return {STATE_KEY: torch.from_numpy(obs)} | {
            image_key(c): torch.from_numpy(f).permute(0, 3, 1, 2).float().div_(255.0) for c, f in frames.items()
        }

    def _wrap(self, out: dict) -> TensorDictBase:
        device = self.device
        if device is not None and device.type != "cpu":
            out = {k: v.to(device, non_blocking=True) for k, v in out.items()}
        return TensorDict._new_unsafe(out, batch_size=self.batch_size, device=device)

    # -- rendering --------------------------------------------------------
    def render(self, index: int = 0) -> np.ndarray:
        """Sub-env ``index`` (0 by default) as an (H, W, 3) uint8 RGB frame, from the task's tracking camera.

        The renderer (an OpenGL context: ``MUJOCO_GL=egl`` or ``osmesa`` when
        headless) is created on the first call, in the calling thread. It draws no
        shadows or reflections (:data:`VIDEO_FLAGS_OFF`): with Mesa's software
        OpenGL they cost 33 of a 240x240 frame's 37 ms. The ``cameras`` a policy
        observes keep MuJoCo's defaults.
        """
        import mujoco

        if not 0 <= index < self._n:
            raise ValueError(f"sub-env {index} is not one of this env's {self._n}.")
        model = self._model
        if self._renderer is None:
            height, width = self._render_size
            model.vis.global_.offwidth = max(model.vis.global_.offwidth, width)
            model.vis.global_.offheight = max(model.vis.global_.offheight, height)
            self._render_data = mujoco.MjData(model)
        group = next(g for g in self.groups if g.first <= index < g.first + g.size)
        data = group.batch.get_data(index - group.first, self._render_data)
        mujoco.mj_forward(model, data)
        if self._renderer is None:
            self._camera = self._make_camera(data)
            self._renderer = mujoco.Renderer(model, height=self._render_size[0], width=self._render_size[1])
            for flag in VIDEO_FLAGS_OFF:
                self._renderer.scene.flags[getattr(mujoco.mjtRndFlag, flag)] = False
        self._renderer.update_scene(data, camera=self._camera)
        return self._renderer.render()

    def _make_camera(self, data: mujoco.MjData) -> int | mujoco.MjvCamera:
        """The model's "track" camera where it has one (as make_env's gymnasium backend renders),
        else gymnasium's default: a free camera on the scene, then the task's DEFAULT_CAMERA_CONFIG."""
        import mujoco

        cam_id = mujoco.mj_name2id(self._model, mujoco.mjtObj.mjOBJ_CAMERA, "track")
        if cam_id >= 0:
            return cam_id
        cam = mujoco.MjvCamera()
        cam.type = mujoco.mjtCamera.mjCAMERA_FREE
        cam.fixedcamid = -1
        cam.lookat[:] = np.median(data.geom_xpos, axis=0)
        cam.distance = self._model.stat.extent
        for key, value in self.task.camera.items():
            if isinstance(value, tuple):
                getattr(cam, key)[:] = value
            else:
                setattr(cam, key, value)
        return cam

    def close(self, *, raise_if_closed: bool = True) -> None:
        """Close the renderer (if one was made) and the env."""
        renderer, self._renderer = self._renderer, None
        if renderer is not None:
            renderer.close()
        eyes, self._eyes = self._eyes, None
        if eyes is not None:
            eyes.close()
        super().close(raise_if_closed=raise_if_closed)

    def __repr__(self) -> str:
        name, groups = type(self).__name__, len(self.groups)
        return f"{name}(task={self.task.name!r}, num_envs={self._n}, groups={groups}, threads={self.num_threads})"
