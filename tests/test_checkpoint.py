"""Checkpoints and launcher configuration, without subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from simeval import CheckpointError, load_checkpoint, save_checkpoint
from simeval.envs import make_env
from simeval.launch.config import ConfigError, load_yaml
from simeval.policies import gaussian_actor


@pytest.fixture(scope="module")
def env():
    e = make_env("Hopper-v5", num_envs=2, seed=0)
    e.rollout(10, break_when_any_done=False)
    yield e
    e.close()


def test_round_trip_keeps_weights_statistics_and_factory(env, tmp_path):
    actor = gaussian_actor(env, hidden=[8])
    path = save_checkpoint(tmp_path / "a.pt", actor, 42, obs_norm=env.transform[2], env="Hopper-v5")
    ck = load_checkpoint(path)
    assert (ck.step, ck.env, ck.policy_factory, ck.policy_kwargs) == (
        42,
        "Hopper-v5",
        "simeval.policies:gaussian_actor",
        {"hidden": [8]},
    )
    from tensordict import TensorDict

    assert (ck.policy == TensorDict.from_module(actor).data).all()
    stats = ck.obs_norm["__extra_state__", "."]
    assert torch.equal(stats["loc.-|-.observation"], env.transform[2]._loc["observation"])
    assert int(stats["count.-|-.observation"]) == int(env.transform[2]._count["observation"]) > 0
    assert set(ck.weights_dict) == {"policy", "env.transform[2]"}


def test_writes_are_atomic_and_leave_no_temporary_file(env, tmp_path, monkeypatch):
    actor = gaussian_actor(env)
    save_checkpoint(tmp_path / "a.pt", actor, 1)
    before = (tmp_path / "a.pt").read_bytes()

    def crash_mid_write(obj, f, *args, **kwargs):
        f.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash_mid_write)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(tmp_path / "a.pt", actor, 2)  # overwriting: the old file must survive intact
    assert sorted(os.listdir(tmp_path)) == ["a.pt"] and (tmp_path / "a.pt").read_bytes() == before
    assert oct(os.stat(tmp_path / "a.pt").st_mode & 0o777) == "0o644"
    with pytest.raises(ValueError, match="policy_kwargs must be plain data"):
        save_checkpoint(tmp_path / "b.pt", actor, 2, policy_kwargs={"activation": torch.nn.Tanh})


def test_foreign_files_are_clear_errors(tmp_path):
    torch.save({"weights": torch.ones(2)}, tmp_path / "plain.pt")
    with pytest.raises(CheckpointError, match="plain.pt: not a checkpoint format simeval knows"):
        load_checkpoint(tmp_path / "plain.pt")
    (tmp_path / "text.pt").write_text("hello")
    with pytest.raises(CheckpointError, match="text.pt: not a readable checkpoint"):
        load_checkpoint(tmp_path / "text.pt")


def test_yaml_profiles_load_and_unknown_keys_are_errors(tmp_path):
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for name in ("mujoco-halfcheetah", "ray-gpu", "isaaclab-cartpole"):
        settings = load_yaml(os.path.join(repo, "launchers", f"{name}.yaml"))
        assert settings["env"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("episodes: 4\nepisdoes: 5\n")
    with pytest.raises(ConfigError, match="unknown setting 'episdoes'"):
        load_yaml(str(bad))


def test_console_script_is_installed():
    script = os.path.join(os.path.dirname(sys.executable), "simeval-launch")
    proc = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "--watch" in proc.stdout and "--headless" not in proc.stdout


def test_format_names_the_reader_and_a_wrong_one_says_so(env, tmp_path):
    actor = gaussian_actor(env, hidden=[8])
    path = save_checkpoint(tmp_path / "a.pt", actor, 7, env="Hopper-v5")
    assert load_checkpoint(path, format="simeval").step == 7
    with pytest.raises(CheckpointError, match="a.pt: not an rsl_rl checkpoint"):
        load_checkpoint(path, format="rsl_rl")
    with pytest.raises(CheckpointError, match="unknown checkpoint format 'nope'"):
        load_checkpoint(path, format="nope")
    proc = subprocess.run(
        [sys.executable, "-m", "simeval.launch", "--checkpoint", path, "--format", "nope"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2 and "unknown checkpoint format 'nope': choose one of" in proc.stderr


def test_params_yaml_is_read_as_plain_data_only(tmp_path):
    from simeval.checkpoints.formats.yaml_params import load_params

    marker = tmp_path / "ran"
    path = tmp_path / "agent.yaml"
    lines = [
        "actor: {hidden_dims: !!python/tuple [32, 32]}",
        f"evil: !!python/object/apply:os.system ['touch {marker}']",
    ]
    path.write_text("\n".join(lines) + "\n")
    params = load_params(str(path))
    assert params["actor"]["hidden_dims"] == [32, 32]  # Isaac Lab's tuples, as lists
    assert isinstance(params["evil"], str) and not marker.exists()  # a tag name, never called
