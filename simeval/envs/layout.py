"""The transform layout every simeval env ends in, whatever simulator is below it, and how to read it back.

:func:`append_layout` builds it (above a condition's :func:`~simeval.envs.perturb.perturbed`);
:func:`unwrap` and :func:`plain_transforms` read it back for the simulators' own round
loops (:meth:`simeval.envs.simulators.Simulator.round_source`), which run only where they
reproduce it exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchrl.envs import EnvBase, TransformedEnv


@dataclass
class PlainTransforms:
    """The transforms of make_env's layout that a loop without the Collector reproduces."""

    counters: list  # StepCounters (their max_steps caps are read at each round's start)
    vecnorm: object | None  # a VecNormV2 on "observation", frozen during rounds


def as_key(key: str | tuple[str, ...]) -> tuple:
    """A key as a tuple."""
    return (key,) if isinstance(key, str) else tuple(key)


def innermost(env: EnvBase) -> EnvBase:
    """The base env under every TransformedEnv layer."""
    from torchrl.envs import TransformedEnv

    while isinstance(env, TransformedEnv):
        env = env.base_env
    return env


def unwrap(env: EnvBase) -> tuple[EnvBase, list]:
    """The base env under every TransformedEnv layer, and every transform, innermost first."""
    from torchrl.envs import Compose, TransformedEnv

    layers = []
    while isinstance(env, TransformedEnv):
        layers.append(env.transform)
        env = env.base_env
    flat = [t for layer in reversed(layers) for t in (layer if isinstance(layer, Compose) else [layer])]
    return env, flat


def resets_itself(env: EnvBase) -> bool:
    """Whether ``env`` resets finished sub-envs inside ``step`` (torchrl's native auto-reset: Isaac Lab's, mjlab's).

    Such an env has no "next" RewardSum or StepCounter values at an episode's last step. Read
    from the instance dict, as torchrl does: getattr on a batched env forwards to its sub-envs,
    and every TransformedEnv copies the flag of the env it wraps.
    """
    return bool(env.__dict__.get("_torchrl_native_autoreset", False))


def plain_transforms(transforms: list) -> PlainTransforms | None:
    """make_env's transforms (DoubleToFloat, StepCounters, a frozen VecNormV2 on "observation", RewardSum).

    None if any other transform, or any of these with other keys or settings, is among ``transforms``.
    DoubleToFloat is taken for a no-op: the base env must have no float64 outputs.
    """
    from torchrl.envs import DoubleToFloat, RewardSum, StepCounter
    from torchrl.envs.transforms import VecNormV2

    found = PlainTransforms([], None)
    for t in transforms:
        if isinstance(t, DoubleToFloat):
            continue
        if isinstance(t, StepCounter):
            if t.step_count_key != "step_count" or not t.update_done:
                return None
            found.counters.append(t)
        elif isinstance(t, RewardSum):
            if [as_key(k) for k in t.in_keys] != [("reward",)] or t.reset_keys not in (None, ["_reset"]):
                return None
        elif type(t) is VecNormV2:
            if found.vecnorm is not None or not t.stateful or [as_key(k) for k in t.in_keys] != [("observation",)]:
                return None
            if [as_key(k) for k in t.out_keys] != [("observation",)]:
                return None
            found.vecnorm = t
        else:
            return None
    return found


def step_cap(transforms: PlainTransforms) -> int | None:
    """The smallest ``max_steps`` of the StepCounters (read at a round's start: the worker sets it), or None."""
    caps = [c.max_steps for c in transforms.counters if c.max_steps is not None]
    return min(caps) if caps else None


def quiet_vecnorm() -> None:
    """Silence torchrl's "Support of VecNormV2 for containers ... is experimental" in this process.

    torchrl warns each time a VecNormV2 is attached to a batched env (at build, and again
    whenever the transform is re-parented, e.g. on a worker's env), though batched
    containers are what ``reduce_batch_dims`` is for: a launcher run printed it 14 times.
    The filter is narrow (that message, from torchrl) and installed where envs are built,
    so Ray actors and child processes get it too; ``python -W default`` shows it again.
    """
    import sys
    import warnings

    if any(opt.startswith("default") or opt.startswith("always") for opt in sys.warnoptions):
        return
    warnings.filterwarnings(
        "ignore", message=r"Support of VecNormV2 for (containers|unbatched container)", category=UserWarning
    )


STATE_KEY = "observation.state"  # where an env with cameras keeps the vector VecNorm normalises (LeRobot's key)
IMAGE_PREFIX = "observation.images."


def image_key(camera: str) -> str:
    """The observation key of ``camera``'s images (LeRobot's ``observation.images.<camera>``)."""
    return IMAGE_PREFIX + camera


def append_layout(
    env: TransformedEnv,
    max_steps: int | None,
    obs_norm: bool,
    cameras: tuple[str, ...] = (),
    frame_stack: int = 1,
) -> None:
    """Append the layout every env shares: DoubleToFloat, StepCounter, VecNormV2 (with ``obs_norm``), RewardSum;
    with ``frame_stack > 1``, a CatFrames of the camera images last.

    VecNormV2 is then ``env.transform[2]`` (``OBS_NORM_ID``), on every backend and simulator.

    Args:
        env: the TransformedEnv to append to (its base env observes ``observation``, or with
            ``cameras`` ``observation.state`` and ``observation.images.<camera>``).
        max_steps: the StepCounter's cap (``None``: the task's own time limit only).
        obs_norm: append the VecNormV2 (statistics shared across sub-envs), on the state only.
        cameras: the cameras the base env observes.
        frame_stack: each camera's last ``frame_stack`` images, stacked along the channels
            (``3 * frame_stack``; the first image of an episode repeated before it has more).
    """
    from torchrl.envs import DoubleToFloat, RewardSum, StepCounter
    from torchrl.envs.transforms import VecNormV2

    if frame_stack < 1 or (frame_stack > 1 and not cameras):
        raise ValueError(f"frame_stack stacks camera images: give cameras and frame_stack >= 1, got {frame_stack}.")
    env.append_transform(DoubleToFloat())
    env.append_transform(StepCounter(max_steps))
    if obs_norm:
        quiet_vecnorm()
        env.append_transform(VecNormV2(in_keys=[STATE_KEY if cameras else "observation"], reduce_batch_dims=True))
    env.append_transform(RewardSum())
    if frame_stack > 1:
        from simeval.envs.frame_stack import StackFrames

        env.append_transform(StackFrames([image_key(c) for c in cameras], frame_stack))
