"""Native MuJoCo's own terms: the effect of each setting only it applies, written before an episode's reset.

Each is the registered declaration (:mod:`simeval.condition_terms`: name, rules) with its
:meth:`apply`. The physics terms write the setting into the sub-envs' own copies of the model
fields (``mujoco.batch.Batch.expand``), relative to the nominal model. The others keep one value
per sub-env in the group (:meth:`SimGroup.setting
<simeval.envs.simulators.mujoco_native.groups.SimGroup.setting>`), read where they act: the push
at its step (``SimGroup.begin``), the reset noise at the reset, the camera and light settings
where the env renders each sub-env's images. NumPy only: the simulator's light module lists them
(``NativeMujoco.terms``); ``values`` arrive as float64 arrays.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from simeval import condition_terms as declared
from simeval.condition_terms import PUSH_STEP, SimulatorTerm

if TYPE_CHECKING:
    import numpy as np


class BodyMassScale(declared.BodyMassScale):
    """``body_mass_scale`` on native MuJoCo: a uniformly denser robot."""

    def apply(self, group: Any, ids: np.ndarray, values: np.ndarray) -> bool:
        """Scale the masses and inertias of the simulations ``ids`` of ``group``; derived constants must follow."""
        group.batch.expand("body_mass")[ids] = group.model.body_mass * values[:, None]
        group.batch.expand("body_inertia")[ids] = group.model.body_inertia * values[:, None, None]
        return True


class FrictionScale(declared.FrictionScale):
    """``friction_scale`` on native MuJoCo: every geom's sliding, torsional and rolling friction."""

    def apply(self, group: Any, ids: np.ndarray, values: np.ndarray) -> bool:
        """Scale the friction coefficients of the simulations ``ids`` of ``group``."""
        group.batch.expand("geom_friction")[ids] = group.model.geom_friction * values[:, None, None]
        return False


class Gravity(declared.Gravity):
    """``gravity`` on native MuJoCo: ``opt.gravity``'s vertical component."""

    def apply(self, group: Any, ids: np.ndarray, values: np.ndarray) -> bool:
        """Set the vertical gravity of the simulations ``ids`` of ``group``; derived constants must follow."""
        group.batch.expand("opt.gravity")[ids, 2] = values
        return True


class _Kept:
    """A term whose value the group keeps per sub-env (``default`` until a condition sets it) for where it acts."""

    name: ClassVar[str]
    default: ClassVar[float]

    def apply(self, group: Any, ids: np.ndarray, values: np.ndarray) -> bool:
        """Keep ``values`` for the sub-envs ``ids`` of ``group``; no derived constant changes."""
        group.setting(self.name, self.default)[ids] = values
        return False


class Push(_Kept, declared.Push):
    """``push`` on native MuJoCo: ``SimGroup.begin`` finds the sub-envs at their push step, ``SimGroup.physics``
    applies the force ``mass * value / timestep`` (``xfrc_applied`` at the root body's centre of mass) for one
    substep."""

    default = 0.0

    def apply(self, group: Any, ids: np.ndarray, values: np.ndarray) -> bool:
        """Keep the push of the sub-envs ``ids`` and give them the default step and direction, which
        ``push_step`` and ``push_direction`` (applied after it) replace when the condition sets them."""
        group.setting(PushStep.name, PushStep.default)[ids] = PushStep.default
        group.setting(PushDirection.name, PushDirection.default)[ids] = PushDirection.default
        return super().apply(group, ids, values)


class PushStep(_Kept, declared.PushStep):
    """``push_step`` on native MuJoCo (compared with the env's per-sub-env step count, ``elapsed``)."""

    default = float(PUSH_STEP)


class PushDirection(_Kept, declared.PushDirection):
    """``push_direction`` on native MuJoCo (a task whose root moves along x only refuses it:
    ``NativeMujoco.condition_problem``)."""

    default = 0.0


class InitNoiseScale(_Kept, declared.InitNoiseScale):
    """``init_noise_scale`` on native MuJoCo: ``Task.initial_state``'s noise times it."""

    default = 1.0


class CameraShift(_Kept, declared.CameraShift):
    """``camera_shift`` on native MuJoCo: the rendered scene's camera moved (``env.adjust_scene``)."""

    default = 0.0


class CameraTilt(_Kept, declared.CameraTilt):
    """``camera_tilt`` on native MuJoCo: the rendered scene's camera turned (``env.adjust_scene``)."""

    default = 0.0


class LightIntensity(_Kept, declared.LightIntensity):
    """``light_intensity`` on native MuJoCo: the rendered scene's lights scaled (``env.adjust_scene``)."""

    default = 1.0


class LightDirection(_Kept, declared.LightDirection):
    """``light_direction`` on native MuJoCo: the rendered scene's model lights turned (``env.adjust_scene``)."""

    default = 0.0


TERMS: tuple[SimulatorTerm, ...] = (
    BodyMassScale(), FrictionScale(), Gravity(), Push(), PushStep(), PushDirection(), InitNoiseScale(),
    CameraShift(), CameraTilt(), LightIntensity(), LightDirection(),
)  # fmt: skip
"""Applied in this order (``SimGroup.set_terms``): ``push`` before ``push_step`` and ``push_direction``."""
VIEW = (CameraShift.name, CameraTilt.name, LightIntensity.name, LightDirection.name)
"""The camera terms, in the order ``env.adjust_scene`` takes them."""
