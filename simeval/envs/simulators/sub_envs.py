"""Simulators whose batch is a gymnasium vector env of one-env sub-envs, stepped in the worker's process.

ManiSkill3's CPU envs and LeRobot's sim envs are built this way: each sub-env is a plain
gymnasium env under the simulator's own wrapper (:attr:`SubEnvSimulator.marker`), a
``SyncVectorEnv`` with its autoreset off steps them (torchrl resets finished sub-envs
itself), and torchrl's ``GymWrapper`` makes it a torchrl env whose per-step flags
(``success``, ``fail``) come from the sub-envs' ``info``. Light at import: gymnasium and
torchrl are imported when an env is built.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from simeval.envs.simulators.base import Simulator

if TYPE_CHECKING:
    from torchrl.envs import EnvBase, TransformedEnv

    from simeval.conditions import Condition


def vector_env(make_one: Callable[[], Any], num_envs: int, device: str | None, flags: Sequence[str]) -> EnvBase:
    """``num_envs`` sub-envs of ``make_one`` in a SyncVectorEnv (autoreset off) under torchrl's GymWrapper.

    Each of ``flags`` the sub-envs' ``info`` holds at reset becomes a boolean ``("next", <flag>)``
    read at every step.
    """
    import gymnasium as gym
    import torch
    from torchrl.data import Categorical, Composite
    from torchrl.envs.libs.gym import GymWrapper, default_info_dict_reader

    vec = gym.vector.SyncVectorEnv([make_one] * num_envs, autoreset_mode=gym.vector.AutoresetMode.DISABLED)
    try:
        _, info = vec.reset()
        present = [f for f in flags if f in info]
        env = GymWrapper(vec, device=device)
    except BaseException:
        vec.close()
        raise
    if present:
        spec = {f: Categorical(2, shape=(num_envs,), dtype=torch.bool, device=device) for f in present}
        env.set_info_dict_reader(default_info_dict_reader(present, spec=Composite(spec, shape=(num_envs,))))
    return env


def layered(
    base: EnvBase, *, condition: Condition | None, max_steps: int | None, obs_norm: bool, seed: int | None
) -> TransformedEnv:
    """``base`` under the condition's Perturb and simeval's layout, seeded (``None``: a random seed).

    A random seed where none is given: a vector env of sub-envs that seed themselves from one fixed
    seed would otherwise repeat each other's episodes.
    """
    import random

    from torchrl.envs import TransformedEnv

    from simeval.envs.layout import append_layout
    from simeval.envs.perturb import perturbed

    env = TransformedEnv(base if condition is None else perturbed(base, condition), auto_unwrap=False)
    append_layout(env, max_steps, obs_norm)
    env.set_seed(random.SystemRandom().randrange(2**31) if seed is None else seed)
    return env


class SubEnvSimulator(Simulator):
    """A simulator of ``"<prefix>:<task>"`` ids built by :func:`vector_env`, its sub-envs under :attr:`marker`.

    Attributes:
        marker: the name of the wrapper class, in this simulator's ``wrappers`` module, that every
            sub-env it builds runs under: how :meth:`owns` knows its envs without importing anything.
    """

    marker: ClassVar[str]

    def task(self, name: str) -> str:
        """What follows ``"<prefix>:"`` in the env id ``name``."""
        return name.split(":", 1)[1]

    def info_keys(self, env: EnvBase) -> tuple[str, ...]:
        """``("success",)``: the sub-envs report a success flag at every step."""
        return ("success",)

    def owns(self, base: EnvBase) -> bool:
        """Whether ``base`` is a vector env of this simulator's sub-envs; imports nothing."""
        wrappers = sys.modules.get(f"{type(self).__module__}.wrappers")  # loaded with the first env it built
        envs = getattr(base.__dict__.get("_env"), "envs", None)  # the instance dict: a batched env forwards getattr
        return wrappers is not None and bool(envs) and isinstance(envs[0], getattr(wrappers, self.marker))
