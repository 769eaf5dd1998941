"""The directory the docs' shell commands run in (tests/test_docs_snippets.py): ``python tests/docs_workspace.py DEST``.

The commands in README.md and docs/*.md name paths a user would have after training (``runs/exp1/ckpt/...``) or
after an earlier evaluation (``eval/a``, ``runs/baseline``, ``OUT/a``). This script makes each of them, small: the
shipped training run's checkpoints (simeval/data/halfcheetah_ppo) under the names the docs use, checkpoints saved at
the steps the docs name, and results directories made by the launcher with 2 episodes of 20 steps per evaluation.
The repository's own folders that commands name (.venv, simeval, suites, launchers, examples) are symlinks.
It runs in one process (the launcher called in-process), so torch is imported once for all of it.
"""

from __future__ import annotations

import os
import shutil
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIPPED = os.path.join(REPO, "simeval", "data", "halfcheetah_ppo")
FIRST = os.path.join(SHIPPED, "step_000126976.pt")
FINAL = os.path.join(SHIPPED, "step_001001472.pt")
SUITE = os.path.join(REPO, "suites", "halfcheetah-robustness.yaml")
# The shipped suite with 2 episodes of 20 steps per cell on 2 sub-envs (its tasks and conditions unchanged): the
# docs' suite commands are shrunk to it by their markers (a suite file sets episodes and steps; flags may not).
TINY_SUITE = "halfcheetah-robustness-tiny.yaml"
# Every evaluation made here: 2 episodes of 20 steps (the docs' commands are shrunk alike, by their markers).
TINY = ["--episodes", "2", "--max-steps", "20"]
LINKED = (".venv", "simeval", "suites", "launchers", "examples")


def _launch(*argv: str, tiny: bool = True) -> None:
    from simeval.launch import main

    code = main([*argv, *(TINY if tiny else [])])
    if code != 0:
        raise SystemExit(f"docs workspace: the launcher failed ({code}) on {' '.join(argv)}")


def _skrl_run(directory: str) -> None:
    """``checkpoints/agent_400.pt`` as skrl's agent writes it for HalfCheetah-v5 (17 observations, 6 actions)."""
    import gymnasium as gym
    import numpy as np
    import torch
    from skrl.resources.preprocessors.torch import RunningStandardScaler
    from skrl.utils.model_instantiators.torch import gaussian_model

    torch.manual_seed(0)
    obs = gym.spaces.Box(-np.inf, np.inf, (17,), np.float32)
    act = gym.spaces.Box(-1.0, 1.0, (6,), np.float32)
    net = [{"name": "net", "input": "OBSERVATIONS", "layers": [32], "activations": "elu"}]
    policy = gaussian_model(observation_space=obs, action_space=act, device="cpu", network=net, output="ACTIONS")
    policy.init_state_dict(role="policy")
    scaler = RunningStandardScaler(size=obs, device="cpu")
    os.makedirs(os.path.join(directory, "checkpoints"))
    data = {"policy": policy.state_dict(), "observation_preprocessor": scaler.state_dict()}
    torch.save(data, os.path.join(directory, "checkpoints", "agent_400.pt"))


def build(dest: str) -> None:
    from simeval import load_checkpoint, save_checkpoint

    os.makedirs(dest, exist_ok=True)
    os.chdir(dest)
    for name in LINKED:
        os.symlink(os.path.join(REPO, name), name)
    # runs/exp1/ckpt: the shipped run (8 checkpoints and its DONE), plus the steps the docs name
    shutil.copytree(SHIPPED, "runs/exp1/ckpt")
    # runs/a and runs/b: two training runs' final checkpoints (suites.md, launcher.md's adaptive runs)
    for run, ckpt in (("runs/a", FIRST), ("runs/b", FINAL)):
        os.makedirs(f"{run}/ckpt")
        shutil.copy(ckpt, f"{run}/ckpt/final.pt")
    final = load_checkpoint(FINAL)
    for step, path in [
        (1000, "runs/exp1/ckpt/step_1000.pt"),
        (500_000, "runs/exp1/ckpt/step_000500000.pt"),
        (100_000, "ppo-ckpt/step_000100000.pt"),
        (500_000, "ppo-ckpt/step_000500000.pt"),
    ]:
        save_checkpoint(path, final.policy, step=step, obs_norm=final.obs_norm, env=final.env)
    # curves of two runs (report), and two runs to compare (report compare)
    for out, seed in [("runs/exp1-eval", "0"), ("runs/exp2-eval", "1")]:
        for ckpt in (FIRST, FINAL):
            _launch("--checkpoint", ckpt, "--out", out, "--seed", seed)
    _launch("--checkpoint", FIRST, "--out", "runs/baseline")
    _launch("--checkpoint", FINAL, "--out", "runs/candidate")
    for ckpt in ("ppo-ckpt/step_000100000.pt", "ppo-ckpt/step_000500000.pt"):
        _launch("--checkpoint", ckpt, "--out", "runs/ppo")
    import yaml

    with open(SUITE) as f:
        suite = yaml.safe_load(f)
    suite.update(episodes=2, max_steps=20, num_envs=2)
    with open(TINY_SUITE, "w") as f:
        yaml.safe_dump(suite, f, sort_keys=False)
    # a suite run (eval/a) and an adaptive one (OUT/a, OUT/b; the demo's runs/demo-*/suite too)
    _launch("--suite", TINY_SUITE, "--checkpoint", FIRST, "--out", "eval/a", tiny=False)
    _launch(
        "--suite",
        TINY_SUITE,
        "--until-decided",
        "--checkpoint",
        FINAL,
        "--baseline",
        FIRST,
        "--out",
        "OUT",
        "--look-every",
        "2",
        "--max-episodes",
        "4",
        tiny=False,
    )
    os.makedirs("runs/demo-0")
    shutil.copytree("OUT", "runs/demo-0/suite")
    _skrl_run("logs/skrl/cheetah/run1")


if __name__ == "__main__":
    build(os.path.abspath(sys.argv[1]))
