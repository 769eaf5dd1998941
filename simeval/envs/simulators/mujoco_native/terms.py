"""Native MuJoCo's physics terms: the effect of each physics setting it applies, before an episode's reset.

Each is the registered declaration (:mod:`simeval.condition_terms`: name, rules) with its
:meth:`apply`, which writes the setting into the sub-envs' own copies of the model fields
(``mujoco.batch.Batch.expand``), relative to the nominal model. NumPy only: the simulator's
light module lists them (``NativeMujoco.terms``); ``values`` arrive as float64 arrays.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simeval import condition_terms as declared
from simeval.condition_terms import PhysicsTerm

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


TERMS: tuple[PhysicsTerm, ...] = (BodyMassScale(), FrictionScale(), Gravity())
