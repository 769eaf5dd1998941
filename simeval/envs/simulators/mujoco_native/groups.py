"""A contiguous group of a native env's sub-envs: one ``mujoco.batch.Batch`` and its task arrays.

:class:`~simeval.envs.simulators.mujoco_native.env.MujocoBatchEnv` keeps its sub-envs in one or two
groups. Stepping a group is one C call with the GIL released, so while one
group's physics runs on the batch's threads, Python can run the policy on the
other group's observations (:mod:`simeval.worker.direct_rollout`). Each simulation is
independent, so the grouping changes no number: a sub-env's physics, noise and
outputs are the same in a group of any size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from simeval.envs.simulators.mujoco_native.tasks import Sim
from simeval.envs.simulators.mujoco_native.terms import TERMS, VIEW

if TYPE_CHECKING:
    import mujoco

    from simeval.envs.simulators.mujoco_native.tasks import Task


class SimGroup:
    """Sub-envs ``[first, first + size)`` of a native env: physics, outputs and resets, in NumPy."""

    def __init__(
        self,
        model: mujoco.MjModel,
        task: Task,
        first: int,
        size: int,
        threads: int,
        exact_contacts: bool,
        elapsed: np.ndarray | None = None,
    ) -> None:
        from mujoco.batch import Batch

        self.task, self.model = task, model
        self.first, self.size = first, size
        self.rows = slice(first, first + size)
        # each sub-env's steps in its episode: a view of the env's counter (finish_group counts, reset_sims zeroes)
        self.elapsed = np.zeros(size, dtype=np.int64) if elapsed is None else elapsed
        self.settings: dict[str, np.ndarray] = {}  # the terms' values kept per sub-env (terms.py's _Kept)
        self._push: tuple[np.ndarray, np.ndarray] | None = None  # this step's pushed sub-envs and their forces
        self._xfrc: np.ndarray | None = None
        self._root = 1 + int(np.flatnonzero(model.body_parentid[1:] == 0)[0])  # the first body under the world
        self.batch = Batch(model, size, max(1, threads), persistent=exact_contacts)
        self.exact_contacts = exact_contacts
        self.sim = Sim(
            model=model,
            qpos=self.batch.bind("qpos"),
            qvel=self.batch.bind("qvel"),
            ctrl=self.batch.bind("ctrl"),
            cfrc_ext=np.zeros((size, model.nbody, 6)),
            **{name: self.batch.bind(name) for name in task.outputs},
        )
        if task.contact_forces:
            self._ncon = self.batch.bind("ncon") if exact_contacts else None
            self._cfrc_bound = None if exact_contacts else self.batch.bind("cfrc_ext")
        self._scratch_data = None
        self._before: np.ndarray | None = None
        self._action: np.ndarray | None = None
        self.batch.reset()

    # -- a step in three parts: begin (Python), physics (C, no GIL), finish (NumPy) --
    def begin(self, action: np.ndarray) -> None:
        """Set the controls from a float32 (size, nu) action, remember what the reward needs, and find the sub-envs
        whose push acts in this step (their force for :meth:`physics`)."""
        self._before = self.task.position(self.sim)
        self._action = action
        self.sim.ctrl[:] = action
        push = self.settings.get("push")
        if push is not None:
            due = np.flatnonzero((push != 0.0) & (self.elapsed == self.settings["push_step"]))
            self._push = (due, self._push_force(due)) if len(due) else None

    def physics(self) -> None:
        """Step every simulation of the group ``frame_skip`` times (one C call, GIL released); a step with pushes
        due is two calls, the pushes' force on for the first substep only (the others' numbers are the same)."""
        push, self._push = self._push, None
        if push is None:
            self.batch.step(nstep=self.task.frame_skip)
            return
        due, force = push
        applied = self._applied_forces()
        applied[due, self._root, :3] = force
        self.batch.step(nstep=1)
        applied[due, self._root, :3] = 0.0
        if self.task.frame_skip > 1:
            self.batch.step(nstep=self.task.frame_skip - 1)

    def _applied_forces(self) -> np.ndarray:
        """The simulations' ``xfrc_applied``, bound on first use (a group without pushes never binds it)."""
        if self._xfrc is None:
            self._xfrc = self.batch.bind("xfrc_applied")
        return self._xfrc

    def _push_force(self, ids: np.ndarray) -> np.ndarray:
        """The force (len(ids), 3) whose impulse over one substep changes the robot's momentum by its mass times
        ``push`` m/s along ``push_direction``, in the sub-envs ``ids`` (each with its own mass: body_mass_scale)."""
        masses = self.batch.expanded("body_mass")
        robot = self.model.body_rootid == self._root
        mass = self.model.body_mass[robot].sum() if masses is None else masses[ids][:, robot].sum(axis=1)
        impulse = self.settings["push"][ids] * mass
        angle = np.radians(self.settings["push_direction"][ids])
        force = np.zeros((len(ids), 3))
        force[:, 0] = impulse * np.cos(angle)
        force[:, 1] = impulse * np.sin(angle)
        return force / self.model.opt.timestep

    def finish(self, obs_out: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
        """Write the observations into ``obs_out`` (float32); return (reward float64, terminated bool)."""
        if self.task.contact_forces:
            self._read_contact_forces()
        self.task.observe(self.sim, obs_out)
        return self.task.outcome(self.sim, self._action, self._before, dt)

    # -- resets ---------------------------------------------------------
    def reset(
        self, ids: np.ndarray | None, rngs: list[np.random.Generator], init: tuple[np.ndarray, np.ndarray]
    ) -> None:
        """gymnasium's reset of the local sub-envs ``ids`` (None: all): defaults, noise, then mj_forward.

        ``rngs`` are this group's generators (local index), ``init`` the model's qpos0 and qvel0.
        """
        import mujoco

        sim = self.sim
        self.batch.reset(ids, stage=mujoco.mjtStage.mjSTAGE_NONE)
        scale = self.settings.get("init_noise_scale")
        for i in range(self.size) if ids is None else ids.tolist():
            k = 1.0 if scale is None else float(scale[i])
            sim.qpos[i], sim.qvel[i] = self.task.initial_state(rngs[i], *init, noise_scale=k)
        self.batch.forward(ids)
        sim.cfrc_ext[slice(None) if ids is None else ids] = 0.0  # mj_resetData clears it, mj_forward does not fill it

    def set_terms(self, ids: np.ndarray, values: dict[str, np.ndarray]) -> None:
        """Per-simulation settings for the local sub-envs ``ids``, relative to the nominal model: each setting by its
        term (:mod:`simeval.envs.simulators.mujoco_native.terms`), then the derived constants where a term needs
        them (``mj_setConst`` per simulation)."""
        by_name = {t.name: t for t in TERMS}
        constants = False
        for name in by_name:  # the terms' own order, whatever order the condition named them in
            if name in values:
                constants = by_name[name].apply(self, ids, values[name]) or constants
        if constants:
            self.batch.set_const()

    def setting(self, name: str, default: float) -> np.ndarray:
        """The group's per-sub-env values of the term ``name`` (float64, ``default`` for those no condition set)."""
        found = self.settings.get(name)
        if found is None:
            found = self.settings[name] = np.full(self.size, default, dtype=np.float64)
        return found

    def view(self) -> np.ndarray | None:
        """Each sub-env's camera and light settings, (size, 4) in the order of ``terms.VIEW``; None: all nominal."""
        if not any(name in self.settings for name in VIEW):
            return None
        defaults = {t.name: getattr(t, "default", None) for t in TERMS}
        return np.stack([self.setting(name, defaults[name]) for name in VIEW], axis=1)

    def observe(self, obs_out: np.ndarray) -> np.ndarray:
        """Write the group's current observations into ``obs_out`` (size, obs_dim) and return it."""
        return self.task.observe(self.sim, obs_out)

    def _read_contact_forces(self) -> None:
        cfrc = self.sim.cfrc_ext
        if not self.exact_contacts:
            np.copyto(cfrc, self._cfrc_bound)
            return
        # gymnasium: mj_rnePostConstraint on the data mj_step leaves behind. Without
        # contacts (and no perturbations or equality constraints, true of these tasks) it is 0.
        import mujoco

        data = self._scratch_data
        if data is None:
            data = self._scratch_data = mujoco.MjData(self.model)
        cfrc[:] = 0.0
        for i in np.flatnonzero(self._ncon).tolist():
            self.batch.get_data(i, data)
            mujoco.mj_rnePostConstraint(self.model, data)
            cfrc[i] = data.cfrc_ext


def split(num_envs: int, groups: int) -> list[tuple[int, int]]:
    """(first, size) of ``groups`` contiguous groups covering ``num_envs`` sub-envs, sizes within one."""
    groups = max(1, min(groups, num_envs))
    base, extra = divmod(num_envs, groups)
    out, first = [], 0
    for g in range(groups):
        size = base + (g < extra)
        out.append((first, size))
        first += size
    return out
