"""Batched gymnasium MuJoCo tasks as torchrl envs (float32, VecNormV2, RewardSum, StepCounter).

Sub-envs run in one process through gymnasium's SyncVectorEnv with
autoreset disabled, so torchrl drives partial resets itself (``_reset``
masks) and no spawned worker processes are needed.
"""

from __future__ import annotations

# The model id of make_env's VecNormV2, for weights_dict={OBS_NORM_ID: train_env.transform[2]}.
OBS_NORM_ID = "env.transform[2]"

MUJOCO_TASKS = (
    "HalfCheetah-v5",
    "Hopper-v5",
    "Walker2d-v5",
    "Ant-v5",
    "InvertedPendulum-v5",
    "Humanoid-v5",
    "Swimmer-v5",
    "Reacher-v5",
)


def make_env(
    name: str = "HalfCheetah-v5",
    *,
    num_envs: int = 1,
    max_steps: int | None = None,
    seed: int | None = None,
    device: str | None = None,
    obs_norm: bool = True,
    render: bool = False,
):
    """A batched torchrl env for a gymnasium task.

    Args:
        name: gymnasium id (the MuJoCo v5 tasks are tested; others may work).
        num_envs: sub-envs stepped together (batch size ``[num_envs]``).
        max_steps: episode cap enforced by a StepCounter (truncation);
            ``None`` keeps only the task's own time limit.
        seed: seeds the sub-envs (sub-env ``i`` gets ``seed + i``).
        device: where the tensors go; the simulation itself runs on CPU.
        obs_norm: append a VecNormV2 on ``observation`` with statistics shared
            across sub-envs (so they do not depend on ``num_envs``). An eval
            worker freezes it and needs the training statistics (``weights_dict``).
        render: build the sub-envs with ``render_mode="rgb_array"``.
    """
    import gymnasium as gym
    from torchrl.envs import DoubleToFloat, RewardSum, StepCounter, TransformedEnv
    from torchrl.envs.libs.gym import GymWrapper
    from torchrl.envs.transforms import VecNormV2

    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}.")
    if name not in gym.registry:
        raise ValueError(
            f"unknown env {name!r}: not a registered gymnasium id (MuJoCo tasks: {', '.join(MUJOCO_TASKS)})."
        )
    vec = gym.make_vec(
        name,
        num_envs=num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.DISABLED},
        **({"render_mode": "rgb_array", "width": 240, "height": 240, "camera_name": "track"} if render else {}),
    )
    base = GymWrapper(vec, device=device)
    env = TransformedEnv(base)
    env.append_transform(DoubleToFloat())
    env.append_transform(StepCounter(max_steps))
    if obs_norm:
        import warnings

        with warnings.catch_warnings():  # batched containers are what reduce_batch_dims is for
            warnings.filterwarnings("ignore", message="Support of VecNormV2 for containers")
            env.append_transform(VecNormV2(in_keys=["observation"], reduce_batch_dims=True))
    env.append_transform(RewardSum())
    if seed is not None:
        env.set_seed(seed)
    return env
