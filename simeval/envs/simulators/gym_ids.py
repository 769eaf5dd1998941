"""What the simulators of gymnasium ids share: the id check, and one way to wrap their base env.

Native MuJoCo, gymnasium's vector env and MuJoCo Warp build the same tasks (gymnasium's
MuJoCo v5 ids) with the same keys, specs, seeding and transform layout, so a checkpoint
fits them all; ``make_env(backend=...)`` and ``--env-backend`` choose among them.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING

from simeval.envs.simulators.base import EnvRequest, Simulator

if TYPE_CHECKING:
    from torchrl.envs import EnvBase, TransformedEnv


class GymIdSimulator(Simulator):
    """A simulator of gymnasium ids: it builds the base env, simeval wraps it the same way for all."""

    def check(self, name: str) -> None:
        """``name`` registered in gymnasium; a one-line ValueError otherwise."""
        import gymnasium

        if name not in gymnasium.registry:
            from simeval.envs.simulators import env_id_forms

            forms = env_id_forms().replace("a gymnasium id", "a gymnasium id (e.g. HalfCheetah-v5, Hopper-v5)", 1)
            raise ValueError(f"unknown env {name!r}: not {forms}.")

    @abstractmethod
    def base_env(self, request: EnvRequest) -> EnvBase:
        """The untransformed batched env of ``request`` (``request.name`` one :meth:`runs`)."""

    def make(self, request: EnvRequest) -> TransformedEnv:
        """:meth:`base_env`, under the condition's Perturb, with the transform layout; seeded when asked."""
        from torchrl.envs import TransformedEnv  # loaded before the base env is built, as always

        from simeval.envs.layout import append_layout
        from simeval.envs.perturb import perturbed

        base = self.base_env(request)
        env = TransformedEnv(perturbed(base, request.condition, self.term_setter(base)), auto_unwrap=False)
        append_layout(
            env,
            request.max_steps,
            request.obs_norm,
            cameras=tuple(request.options.get("cameras") or ()),
            frame_stack=int(request.options.get("frame_stack") or 1),
        )
        if request.seed is not None:
            env.set_seed(request.seed)
        return env
