"""GPU-resident batched MuJoCo envs: gymnasium v5 tasks on MuJoCo Warp, torch tensors on the device.

Every sub-env is one world of a ``mujoco_warp`` Data. Actions, observations,
rewards and flags are torch tensors on the simulation's device that share
memory with Warp's arrays (``wp.to_torch``, DLPack), and the step path is
whole-batch torch ops plus Warp kernels: no host round trip, no Python per
sub-env. On CUDA the ``frame_skip`` physics steps run as one captured CUDA graph, when
the env is built on its process's main thread (see ``cuda_graphs`` of :class:`WarpBatchEnv`).

With ``cameras``, every world's camera images are rendered after each step and reset by
MuJoCo Warp's batch renderer (ray tracing over a BVH of the worlds' geoms, on the same
device: :class:`_WarpEyes`) and handed over as torch tensors there, in LeRobot's keys.

Only a reset touches the host, as :class:`simeval.envs.simulators.mujoco_native.env.MujocoBatchEnv`
does: it reads the ``_reset`` mask, draws each reset sub-env's noise from its
own generator (sub-env ``i`` seeded with ``seed + i``) and copies the new
states to the device at once. Same keys, dtypes, specs, seeding and time limit
as the native env, for the tasks whose observations and rewards read only qpos
and qvel (``simeval.envs.simulators.mujoco_warp.WARP_TASKS``); the physics is MuJoCo's, in float32.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Bounded, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

from simeval.envs.layout import STATE_KEY, image_key
from simeval.envs.simulators.mujoco_native.tasks import (
    HalfCheetah,
    Hopping,
    InvertedPendulum,
    Task,
    get_task,
    load_model,
    sub_env_generators,
)

if TYPE_CHECKING:
    import mujoco


def warp_devices(device: str | torch.device | None) -> tuple[object, torch.device]:
    """The Warp device and the torch device of ``device`` (``None``: ``cuda:0`` when Warp sees a GPU, else CPU)."""
    import warp as wp

    if wp.config.log_level == wp.LOG_INFO:  # Warp's default: a line per compiled module, hundreds at first use
        wp.config.log_level = wp.LOG_WARNING
    name = ("cuda:0" if wp.is_cuda_available() else "cpu") if device is None else str(device)
    try:
        wp_device = wp.get_device(name)
    except (ValueError, RuntimeError):
        found = ", ".join(str(d) for d in wp.get_devices())
        raise ValueError(f"unknown device {name!r} for backend='warp': Warp has {found}.") from None
    return wp_device, torch.device(wp.device_to_torch(wp_device))


class _WarpEyes:
    """MuJoCo Warp's batch renderer: every world's cameras in one launch, on the env's device.

    The step leaves the worlds' geom and camera poses one substep behind the state (they are
    computed at a step's start), so :meth:`render` first recomputes them from the current
    qpos (``fwd_kinematics``, as MuJoCo's ``mj_forward`` before the native env's renderer),
    refits the scene's BVH, and ray-traces each camera's pixels. Nothing here changes what the
    next step computes: every step recomputes the kinematics from qpos and qvel first.
    """

    def __init__(
        self, model: mujoco.MjModel, m: Any, d: Any, cameras: tuple[str, ...], size: tuple[int, int], n: int
    ) -> None:
        import mujoco_warp as mjw
        import warp as wp

        height, width = size
        self.m, self.d, self.cameras = m, d, cameras
        # The model's skybox behind the scene, as MuJoCo's renderer draws it; no shadows (the native
        # env's renderer draws them: one of the differences docs/environments.md lists).
        self.rc = mjw.create_render_context(
            model,
            nworld=n,
            cam_res=(width, height),
            render_rgb=True,
            render_depth=False,
            render_seg=False,
            cam_active=list(cameras),
            render_skybox=True,
        )
        # Packed pixels as bytes (B, G, R, A per pixel, little-endian uint32), one block per camera.
        packed = wp.to_torch(self.rc.rgb_data)
        self.pixels = packed.view(torch.uint8).view(n, len(cameras), height, width, 4)

    def render(self) -> None:
        """Ray-trace every world's cameras in its current state (Warp calls: run under the env's device)."""
        import mujoco_warp as mjw

        mjw.fwd_kinematics(self.m, self.d)
        mjw.refit_bvh(self.m, self.d, self.rc)
        mjw.render(self.m, self.d, self.rc)

    def images(self) -> dict[str, torch.Tensor]:
        """Each camera's ``(N, 3, H, W)`` float32 images in [0, 1] from the last :meth:`render`, new tensors."""
        return {
            image_key(c): self.pixels[:, i, :, :, [2, 1, 0]].permute(0, 3, 1, 2).float().div_(255.0)
            for i, c in enumerate(self.cameras)
        }


def check_cameras(name: str, model: mujoco.MjModel, cameras: tuple[str, ...], size: tuple[int, int]) -> None:
    """A one-line ValueError for a camera ``model`` lacks or an image side outside 1..MAX_IMAGE_SIDE."""
    import mujoco

    from simeval.envs.simulators.mujoco_native.env import MAX_IMAGE_SIDE

    known = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_CAMERA, i) for i in range(model.ncam)]
    unknown = [c for c in cameras if c not in known]
    if unknown:
        raise ValueError(
            f"{name}: no camera {', '.join(map(repr, unknown))} in its model; its cameras: "
            f"{', '.join(map(repr, known)) or 'none'}."
        )
    if len(set(cameras)) != len(cameras):
        raise ValueError(f"cameras must differ, got {list(cameras)!r}.")
    if min(size) < 1 or max(size) > MAX_IMAGE_SIDE:
        raise ValueError(f"image_size must be 1..{MAX_IMAGE_SIDE} pixels a side, got {size!r}.")


class WarpBatchEnv(EnvBase):
    """A batch of ``num_envs`` sub-envs of a gymnasium MuJoCo v5 task on MuJoCo Warp, as one torchrl env.

    Args:
        task: gymnasium id, one of :data:`simeval.envs.simulators.mujoco_warp.WARP_TASKS` (``make_env``
            refuses the others; built directly, another task fails in MuJoCo Warp).
        num_envs: sub-envs, i.e. Warp worlds (batch size ``[num_envs]``).
        device: where the physics runs and the tensors live (``"cuda:0"``, ``"cpu"``, ...);
            ``None``: ``cuda:0`` when Warp sees a GPU, else Warp's CPU device.
        max_episode_steps: truncation step (``None``: gymnasium's registered TimeLimit).
        cuda_graphs: on CUDA, run each step's physics and each masked reset as one captured
            CUDA graph. ``None``: only when the env is built on its process's main thread. A
            capture on another thread fails while the main thread runs kernels on the same GPU
            (a trainer beside a thread-backend worker: CUDA error 906, "operation would make
            the legacy stream depend on a capturing blocking stream", seen on an H200 on
            2026-11-26), so a thread-backend worker steps kernel by kernel; process, Ray and
            Slurm workers build their envs on their main thread and capture.
        cameras: the model's cameras every world observes after each step and reset (e.g.
            ``("track",)``): the observation is then ``observation.state`` (the task's vector) and
            ``observation.images.<camera>``, float32 ``(3, H, W)`` in [0, 1] on ``device``
            (LeRobot's keys and layout, as the native env), ray-traced by MuJoCo Warp's batch
            renderer (``mujoco_warp.render``) for all worlds at once. ``()``: the plain
            ``observation`` vector, nothing rendered and no render context made.
        image_size: (height, width) of the camera images.
    """

    def __init__(
        self,
        task: str = "HalfCheetah-v5",
        num_envs: int = 1,
        *,
        device: str | torch.device | None = None,
        max_episode_steps: int | None = None,
        cuda_graphs: bool | None = None,
        cameras: tuple[str, ...] | list[str] = (),
        image_size: tuple[int, int] = (64, 64),
    ) -> None:
        import mujoco
        import mujoco_warp as mjw
        import warp as wp

        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}.")
        self.task = get_task(task)
        self._wp_device, torch_device = warp_devices(device)
        super().__init__(device=torch_device, batch_size=torch.Size([num_envs]))
        self._n = n = num_envs
        model = load_model(self.task)
        with wp.ScopedDevice(self._wp_device):
            self._m, self._d = mjw.put_model(model), mjw.make_data(model, nworld=n)
        self._dt = model.opt.timestep * self.task.frame_skip
        self._max_steps = max_episode_steps or self.task.max_episode_steps
        with torch.inference_mode(False):  # tensors updated in place at every step, in inference mode or not
            # Torch views of Warp's arrays (same memory): the state the tasks read, and ctrl to write.
            self.state = SimpleNamespace(**{k: wp.to_torch(getattr(self._d, k)) for k in ("qpos", "qvel", "ctrl")})
            self._reset_mask = torch.ones(n, dtype=torch.bool, device=self.device)
            self._elapsed = torch.zeros(n, dtype=torch.int64, device=self.device)
        self._wp_reset_mask = wp.from_torch(self._reset_mask)
        data = mujoco.MjData(model)
        self._init_qpos, self._init_qvel = data.qpos.copy(), data.qvel.copy()
        self._rngs: list[np.random.Generator] | None = None
        self._ahead: Any = None  # a rollout's warp_resets.ResetsAhead: states drawn ahead, until settled
        self._obs_dim = self.task.obs_dim(model)
        self.cameras = tuple(cameras)
        self.image_size = (int(image_size[0]), int(image_size[1]))
        self._eyes: _WarpEyes | None = None
        if self.cameras:
            check_cameras(task, model, self.cameras, self.image_size)
            with wp.ScopedDevice(self._wp_device):
                self._eyes = _WarpEyes(model, self._m, self._d, self.cameras, self.image_size, n)
        self._make_specs(model)
        self._graph = self._reset_graph = None
        warn_if_graphless(self._wp_device.is_cuda, cuda_graphs, self._wp_device)
        if self._wp_device.is_cuda and graphs_wanted(cuda_graphs):  # one graph launch per step, not hundreds
            self._warp(self._step_physics)  # compiles and loads every kernel before the capture
            self._warp(self._reset_masked)
            self._graph = _capture(self._wp_device, self._step_physics)
            self._reset_graph = _capture(self._wp_device, self._reset_masked)
        wp.synchronize_device(self._wp_device)  # Warp's set-up copies are done before torch writes the state

    def _step_physics(self) -> None:
        import mujoco_warp as mjw

        for _ in range(self.task.frame_skip):
            mjw.step(self._m, self._d)

    def _reset_masked(self) -> None:
        import mujoco_warp as mjw

        mjw.reset_data(self._m, self._d, self._wp_reset_mask)

    def _make_specs(self, model: mujoco.MjModel) -> None:
        n, nu, dev = self._n, model.nu, self.device
        bounds = torch.as_tensor(model.actuator_ctrlrange, dtype=torch.float32)  # gymnasium's action space
        state = Unbounded(shape=(n, self._obs_dim), dtype=torch.float32, device=dev)
        if self.cameras:
            height, width = self.image_size
            image = {"low": 0.0, "high": 1.0, "shape": (n, 3, height, width), "dtype": torch.float32, "device": dev}
            keys = {STATE_KEY: state} | {image_key(c): Bounded(**image) for c in self.cameras}
            self.observation_spec = Composite(keys, shape=(n,))
        else:
            self.observation_spec = Composite(observation=state, shape=(n,))
        low, high = bounds[:, 0].expand(n, nu), bounds[:, 1].expand(n, nu)
        self.action_spec = Bounded(low=low, high=high, shape=(n, nu), dtype=torch.float32, device=dev)
        self.reward_spec = Unbounded(shape=(n, 1), dtype=torch.float32, device=dev)
        flag = {"shape": (n, 1), "dtype": torch.bool, "device": dev}
        self.done_spec = Composite(
            done=Categorical(2, **flag), terminated=Categorical(2, **flag), truncated=Categorical(2, **flag), shape=(n,)
        )

    # -- Warp calls, ordered with torch's work on the device ---------------------
    def _warp(self, fn: Callable[..., Any], *args: Any) -> None:
        import warp as wp

        with wp.ScopedDevice(self._wp_device):
            if not self._wp_device.is_cuda:
                fn(*args)
                return
            with wp.ScopedStream(wp.stream_from_torch(self.device)):  # torch's current stream
                fn(*args)

    def _physics(self) -> None:
        import warp as wp

        if self._graph is not None:
            self._warp(wp.capture_launch, self._graph)
        else:
            self._warp(self._step_physics)

    @property
    def reset_captured(self) -> bool:
        """Whether :meth:`reset_masked` is one captured CUDA graph launch (cheap enough to run at every step)."""
        return self._reset_graph is not None

    def reset_masked(self) -> None:
        """MuJoCo's defaults (``mjw.reset_data``) in the worlds where the ``_reset_mask`` tensor is True.

        The mask is read on the device, never on the host; on CUDA this is one captured graph launch.
        """
        import warp as wp

        if self._reset_graph is not None:
            self._warp(wp.capture_launch, self._reset_graph)
        else:
            self._warp(self._reset_masked)

    # -- seeding and resets ---------------------------------------------------
    def _set_seed(self, seed: int | None) -> None:
        """Seed sub-env ``i`` with ``seed + i``, then reset every sub-env (as the native env and GymWrapper)."""
        if seed is not None:
            self._seed(seed)
        self._reset_worlds(None)

    def _seed(self, seed: int) -> None:
        self._rngs = sub_env_generators(seed, self._n)
        self._ahead = None  # states drawn from the generators replaced: nothing to settle

    @property
    def generators(self) -> list[np.random.Generator]:
        """Each sub-env's reset generator (sub-env ``i``'s seeded with ``seed + i``), as a reset would draw next."""
        if self._ahead is not None:
            self._ahead.settle()
            self._ahead = None
        if self._rngs is None:  # unseeded: fresh entropy, as gymnasium's np_random(None)
            self._rngs = sub_env_generators(None, self._n)
        return self._rngs

    def _reset_worlds(self, ids: np.ndarray | None) -> None:
        """gymnasium's reset for sub-envs ``ids`` (None: all): MuJoCo's defaults, then host-drawn noise copied once.

        gymnasium's mj_forward after the noise is left out: it only fills derived quantities,
        which no task here reads and every step recomputes first (and it would run on every world).
        """
        rngs = self.generators
        rows = range(self._n) if ids is None else ids.tolist()
        states = torch.from_numpy(self.initial_states([rngs[i] for i in rows])).to(self.device)
        every = slice(None) if ids is None else torch.from_numpy(ids).to(self.device)
        self._reset_mask.fill_(ids is None)
        self._reset_mask[every] = True
        self.reset_masked()
        nq = self._init_qpos.shape[0]
        self.state.qpos[every], self.state.qvel[every] = states[:, :nq], states[:, nq:]
        self._elapsed[every] = 0

    def initial_states(self, rngs: list[np.random.Generator]) -> np.ndarray:
        """One reset state per generator, drawn in order: float32 rows of (qpos, qvel), as gymnasium's reset."""
        if not rngs:
            return np.empty((0, self._init_qpos.shape[0] + self._init_qvel.shape[0]), dtype=np.float32)
        init = [self.task.initial_state(rng, self._init_qpos, self._init_qvel) for rng in rngs]
        return np.stack([np.concatenate(s) for s in init]).astype(np.float32)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        if kwargs.get("seed") is not None:
            self._seed(kwargs["seed"])
        mask = None if tensordict is None else tensordict.get("_reset", None)
        ids = None
        if mask is not None:
            mask = mask.reshape(-1).cpu().numpy()  # the reset's one device-to-host copy
            ids = None if mask.all() else np.flatnonzero(mask)
        if ids is None or len(ids):
            self._reset_worlds(ids)
        false = torch.zeros((self._n, 1), dtype=torch.bool, device=self.device)
        out = {**self._observations(), "done": false, "terminated": false.clone()}
        out["truncated"] = false.clone()
        return TensorDict._new_unsafe(out, batch_size=self.batch_size, device=self.device)

    # -- stepping ---------------------------------------------------------
    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        reward, terminated, truncated = self.advance(tensordict.get("action"))
        terminated, truncated = terminated.unsqueeze(-1), truncated.unsqueeze(-1)
        out = {
            **self._observations(),
            "reward": reward.unsqueeze(-1),
            "done": terminated | truncated,
            "terminated": terminated,
            "truncated": truncated,
        }
        return TensorDict._new_unsafe(out, batch_size=self.batch_size, device=self.device)

    def advance(self, action: torch.Tensor, max_steps: int | None = None) -> tuple[torch.Tensor, ...]:
        """One step of every sub-env: (reward float32, terminated, truncated), (N,) tensors on the device.

        Sub-envs are not reset. ``max_steps`` truncates earlier than the env's own time limit
        (as a StepCounter's cap does).
        """
        action = action.detach().to(self.device, torch.float32).reshape(self._n, -1)
        before = self.state.qpos[:, 0].clone()  # what the forward velocity is measured from
        self.state.ctrl.copy_(action)
        self._physics()
        reward, terminated = outcome(self.task, self.state, action, before, self._dt)
        self._elapsed += 1
        limit = self._max_steps if max_steps is None else min(self._max_steps, max_steps)
        return reward, terminated, self._elapsed >= limit

    def observe(self) -> torch.Tensor:
        """Every sub-env's (N, obs_dim) float32 observation of its current state."""
        return observe(self.task, self.state)

    def _observations(self) -> dict[str, torch.Tensor]:
        """The step's or reset's observation entries: ``observation``, or the state and every camera's images."""
        if self._eyes is None:
            return {"observation": self.observe()}
        self._warp(self._eyes.render)
        return {STATE_KEY: self.observe()} | self._eyes.images()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(task={self.task.name!r}, num_envs={self._n}, device={self._wp_device})"


def graphs_wanted(cuda_graphs: bool | None) -> bool:
    """Whether a :class:`WarpBatchEnv` built here captures CUDA graphs (``None``: on the main thread only)."""
    if cuda_graphs is None:
        return threading.current_thread() is threading.main_thread()
    return cuda_graphs


# Measured on an H200 (2026-11-26, docs/benchmarks.md): 1024 HalfCheetah worlds, 25k env-steps/s kernel by kernel in a
# thread-backend worker against 462k in the bare loop with graphs; a PPO trainer beside such a worker lost 71% of its
# frames/s (likely the GIL its Python launches hold), beside a process-backend worker 2%.
GRAPHLESS = (
    "MuJoCo Warp on {device} was built off the main thread (a thread-backend worker), so it steps kernel by kernel "
    "without CUDA graphs: 10-18x slower, and it slows a trainer in this process; evaluate with backend='process' "
    "(its worker captures graphs), or build WarpBatchEnv(cuda_graphs=True) when no other thread uses the GPU meanwhile."
)


def warn_if_graphless(is_cuda: bool, cuda_graphs: bool | None, device: object = "cuda") -> None:
    """Warn (RuntimeWarning) when a CUDA env would step without graphs only because it is built off the main thread."""
    if is_cuda and cuda_graphs is None and not graphs_wanted(None):
        warnings.warn(GRAPHLESS.format(device=device), RuntimeWarning, stacklevel=3)


def _capture(wp_device: object, fn: Callable[[], None]) -> object:
    """``fn``'s kernels recorded as a CUDA graph on ``wp_device`` (nothing runs).

    The garbage collector is held off meanwhile: a stale Warp graph finalised during the
    capture would record its destructor into the new graph (mjlab does the same).
    """
    import gc

    import warp as wp

    enabled = gc.isenabled()
    gc.disable()
    try:
        with wp.ScopedDevice(wp_device), wp.ScopedCapture() as capture:
            fn()
    finally:
        if enabled:
            gc.enable()
    return capture.graph


# -- the tasks of simeval.envs.simulators.mujoco_native.tasks, as torch ops on the device (float32) -----------------
def observe(task: Task, s: SimpleNamespace) -> torch.Tensor:
    """The (N, obs_dim) float32 observation, as the task's NumPy ``observe``."""
    if isinstance(task, InvertedPendulum):
        return torch.cat((s.qpos, s.qvel), dim=1)
    return torch.cat((s.qpos[:, 1:], s.qvel.clamp(-10, 10) if isinstance(task, Hopping) else s.qvel), dim=1)


def outcome(
    task: Task, s: SimpleNamespace, action: torch.Tensor, before: torch.Tensor, dt: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(reward (N,), terminated bool (N,)) after a step taken with ``action``, as the task's NumPy ``outcome``."""
    if isinstance(task, InvertedPendulum):
        terminated = ~(s.qpos.isfinite().all(1) & s.qvel.isfinite().all(1)) | (s.qpos[:, 1].abs() > 0.2)
        return (~terminated).float(), terminated
    velocity = (s.qpos[:, 0] - before) / dt
    ctrl_cost = task.ctrl_cost_weight * action.square().sum(1)
    if isinstance(task, HalfCheetah):
        return task.forward_reward_weight * velocity - ctrl_cost, torch.zeros_like(velocity, dtype=torch.bool)
    if not isinstance(task, Hopping):
        raise TypeError(f"no reward for the warp task {type(task).__name__}")
    z, angle = s.qpos[:, 1], s.qpos[:, 2]
    (min_z, max_z), (min_a, max_a) = task.healthy_z_range, task.healthy_angle_range
    healthy = (min_z < z) & (z < max_z) & (min_a < angle) & (angle < max_a)
    if task.healthy_state_range is not None:  # Hopper: state_vector()[2:]
        lo, hi = task.healthy_state_range
        state = torch.cat((s.qpos[:, 2:], s.qvel), dim=1)
        healthy &= ((lo < state) & (state < hi)).all(1)
    return task.forward_reward_weight * velocity + healthy * task.healthy_reward - ctrl_cost, ~healthy
