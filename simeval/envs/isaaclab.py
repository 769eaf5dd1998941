"""Isaac Lab tasks as torchrl envs (``--env isaaclab:<task>``).

The real code path: Isaac Lab cannot run on CPU machines, so the tests cover
the init hook with a stand-in and this module only on machines that have it.
The simulation app must already run (``--init-fn simeval.launch.hooks:isaaclab_app_launcher``).
"""

from __future__ import annotations


def make_env(task: str, *, num_envs: int = 64, device: str | None = None):
    """Build an Isaac Lab task from its registry and wrap it for torchrl."""
    import gymnasium as gym
    import isaaclab_tasks  # noqa: F401  (registers the tasks)
    from isaaclab_tasks.utils import parse_env_cfg
    from torchrl.envs import RewardSum, StepCounter, TransformedEnv
    from torchrl.envs.libs.isaac_lab import IsaacLabWrapper

    cfg = parse_env_cfg(task, device=device or "cuda:0", num_envs=num_envs)
    env = IsaacLabWrapper(gym.make(task, cfg=cfg))
    return TransformedEnv(env, RewardSum()).append_transform(StepCounter())
