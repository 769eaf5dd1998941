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
from simeval.envs.simulators.mujoco_native.terms import TERMS

if TYPE_CHECKING:
    import mujoco

    from simeval.envs.simulators.mujoco_native.tasks import Task


class SimGroup:
    """Sub-envs ``[first, first + size)`` of a native env: physics, outputs and resets, in NumPy."""

    def __init__(
        self, model: mujoco.MjModel, task: Task, first: int, size: int, threads: int, exact_contacts: bool
    ) -> None:
        from mujoco.batch import Batch

        self.task, self.model = task, model
        self.first, self.size = first, size
        self.rows = slice(first, first + size)
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
        """Set the controls from a float32 (size, nu) action and remember what the reward needs."""
        self._before = self.task.position(self.sim)
        self._action = action
        self.sim.ctrl[:] = action

    def physics(self) -> None:
        """Step every simulation of the group ``frame_skip`` times (one C call, GIL released)."""
        self.batch.step(nstep=self.task.frame_skip)

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
        for i in range(self.size) if ids is None else ids.tolist():
            sim.qpos[i], sim.qvel[i] = self.task.initial_state(rngs[i], *init)
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
