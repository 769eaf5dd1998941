"""The transform layout every simeval env ends in, whatever simulator is below it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchrl.envs import EnvBase, TransformedEnv

    from simeval.conditions import Condition


def perturbed(base: EnvBase, condition: Condition) -> EnvBase:
    """``base`` itself for a nominal condition, else ``base`` under a :class:`~simeval.envs.perturb.Perturb`.

    The Perturb sits directly around the base env, below the layout, so ``OBS_NORM_ID``
    still names the VecNormV2.
    """
    if not condition.values:
        return base
    from torchrl.envs import TransformedEnv

    from simeval.envs.perturb import Perturb

    return TransformedEnv(base, Perturb(condition), auto_unwrap=False)


def append_layout(env: TransformedEnv, max_steps: int | None, obs_norm: bool) -> None:
    """Append the layout every env shares: DoubleToFloat, StepCounter, VecNormV2 (with ``obs_norm``), RewardSum.

    VecNormV2 is then ``env.transform[2]`` (``OBS_NORM_ID``), on every backend and simulator.

    Args:
        env: the TransformedEnv to append to (its base env observes ``observation``).
        max_steps: the StepCounter's cap (``None``: the task's own time limit only).
        obs_norm: append the VecNormV2 (statistics shared across sub-envs).
    """
    from torchrl.envs import DoubleToFloat, RewardSum, StepCounter
    from torchrl.envs.transforms import VecNormV2

    env.append_transform(DoubleToFloat())
    env.append_transform(StepCounter(max_steps))
    if obs_norm:
        import warnings

        with warnings.catch_warnings():  # batched containers are what reduce_batch_dims is for
            warnings.filterwarnings("ignore", message="Support of VecNormV2 for containers")
            env.append_transform(VecNormV2(in_keys=["observation"], reduce_batch_dims=True))
    env.append_transform(RewardSum())
