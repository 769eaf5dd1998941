"""Checkpoints and profiles written before modules moved keep loading under their old names.

The shipped run's checkpoints record ``simeval.launch.policies:gaussian_actor``
(where the factory lived when they were written); profiles name init hooks as
``simeval.init:`` or ``simeval.launch.hooks:``. All of them resolve to today's modules.
"""

from __future__ import annotations

import json

import pytest
import torch
from launch_helpers import cli

from simeval import load_checkpoint, save_checkpoint
from simeval.checkpoints.shipped import shipped_checkpoint
from simeval.refs import canonical_ref, resolve_callable


def test_the_shipped_checkpoints_name_the_old_factory_and_load_with_the_current_one():
    raw = torch.load(shipped_checkpoint(), weights_only=True)
    assert raw["policy_factory"] == "simeval.launch.policies:gaussian_actor"  # the data is as it shipped
    ck = load_checkpoint(shipped_checkpoint())
    assert ck.policy_factory == "simeval.policies:gaussian_actor"


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("simeval.launch.policies:gaussian_actor", "simeval.policies:gaussian_actor"),
        ("simeval.policies:mlp_policy", "simeval.policies:mlp_policy"),
        ("simeval.init:isaaclab_app_launcher", "simeval.envs.simulators.isaaclab.app:app_launcher"),
        ("simeval.hooks:isaaclab_app_launcher", "simeval.envs.simulators.isaaclab.app:app_launcher"),
        ("simeval.launch.hooks:worker_init", "simeval.hooks:worker_init"),
        ("simeval.launch.formats.rsl_rl:actor", "simeval.checkpoints.formats.rsl_rl:actor"),
    ],
)
def test_old_references_resolve_to_the_functions_that_moved(old, new):
    assert canonical_ref(old) == new
    module, attr = new.split(":")
    assert resolve_callable(old, "--policy") is getattr(__import__(module, fromlist=[attr]), attr)


def test_a_checkpoint_saved_under_the_old_factory_name_evaluates_like_the_new_one(tmp_path):
    ck = load_checkpoint(shipped_checkpoint())
    for name, factory in (
        ("old", "simeval.launch.policies:gaussian_actor"),
        ("new", "simeval.policies:gaussian_actor"),
    ):
        save_checkpoint(
            tmp_path / f"{name}.pt",
            ck.policy,
            ck.step,
            obs_norm=ck.obs_norm,
            env=ck.env,
            policy_factory=factory,
            policy_kwargs=ck.policy_kwargs,
        )
    returns = {}
    for name in ("old", "new"):
        proc = cli(
            "--checkpoint",
            str(tmp_path / f"{name}.pt"),
            "--episodes",
            "2",
            "--num-envs",
            "2",
            "--max-steps",
            "50",
            "--seed",
            "3",
            "--out",
            str(tmp_path / name),
            "--init-fn",
            "simeval.launch.hooks:worker_init",  # a profile's old hook name, through the launcher
        )
        assert proc.returncode == 0, proc.stderr
        (record,) = [json.loads(line) for line in open(tmp_path / name / "results.jsonl")]
        returns[name] = record["episode_returns"]
    assert returns["old"] == returns["new"]
