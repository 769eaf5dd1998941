"""``python -m simeval.export`` (ONNX, TorchScript) and evaluating an exported ONNX file.

The shipped HalfCheetah checkpoint (a TanhNormal Gaussian actor and VecNorm
statistics) is exported by the command line. The files must act as the
evaluator does (VecNorm, then the actor's deterministic sample), and the ONNX
file must score as its checkpoint in the launcher.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import shutil
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from tensordict import TensorDict
from torchrl.envs.utils import ExplorationType, set_exploration_type

from simeval.checkpoints import CheckpointError, file_hash, load_checkpoint, peek_step
from simeval.envs import OBS_NORM_ID, make_env
from simeval.factories import build_policy
from simeval.weights import load_weights, resolve_model

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIPPED = os.path.join(REPO, "simeval", "data", "halfcheetah_ppo", "step_001001472.pt")
ENV, STEP, ACT_DIM = "HalfCheetah-v5", 1001472, 6
pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.filterwarnings("ignore:Support of VecNormV2"),
    pytest.mark.filterwarnings("ignore:Detected pickle protocol"),
]


def _run(module: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": REPO}
    return subprocess.run(
        [sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=300, env=env, cwd=REPO
    )


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The shipped checkpoint, copied, and its ONNX (default path) and TorchScript (--out) exports."""
    root = tmp_path_factory.mktemp("export")
    ckpt = str(root / os.path.basename(SHIPPED))
    shutil.copy(SHIPPED, ckpt)
    to_onnx = _run("simeval.export", ckpt, "--to", "onnx")
    assert to_onnx.returncode == 0, to_onnx.stderr
    onnx_path = str(root / "exported" / "step_001001472.onnx")  # default: <dir>/exported/<stem>.onnx
    assert to_onnx.stdout.startswith(f"wrote {onnx_path}") and "VecNorm folded in" in to_onnx.stdout
    ts_path = str(root / "policy.pt")
    to_ts = _run("simeval.export", ckpt, "--to", "torchscript", "--out", ts_path)
    assert to_ts.returncode == 0, to_ts.stderr
    assert sorted(os.listdir(root / "exported")) == ["step_001001472.onnx"]  # no temporary file left behind
    return {"ckpt": ckpt, "onnx": onnx_path, "ts": ts_path, "root": root}


@pytest.fixture(scope="module")
def reference():
    """Raw observations of a rollout, and the evaluator's actions for them.

    Two envs with the same seed and actions: one raw, one with make_env's
    VecNormV2 holding the checkpoint's statistics (frozen, as an eval worker
    has it); the shipped actor acts on the normalised observations under
    ExplorationType.DETERMINISTIC.
    """
    ck = load_checkpoint(SHIPPED)
    raw_env = make_env(ENV, num_envs=8, seed=3, obs_norm=False)
    norm_env = make_env(ENV, num_envs=8, seed=3, obs_norm=True)
    vecnorm = resolve_model({"env": norm_env}, OBS_NORM_ID)
    load_weights(vecnorm, ck.obs_norm, OBS_NORM_ID)
    vecnorm.freeze()
    policy = build_policy(ck.policy_factory, ck.policy_kwargs, norm_env).eval()
    load_weights(policy, ck.policy, "policy")
    gen = torch.Generator().manual_seed(0)
    raw_td, norm_td = raw_env.reset(), norm_env.reset()
    raw, normed = [], []
    for _ in range(25):
        raw.append(raw_td["observation"].clone())
        normed.append(norm_td["observation"].clone())
        action = torch.rand(8, ACT_DIM, generator=gen) * 2 - 1
        raw_td = raw_env.step(raw_td.set("action", action))["next"]
        norm_td = norm_env.step(norm_td.set("action", action))["next"]
    raw_env.close()
    norm_env.close()
    raw, normed = torch.cat(raw), torch.cat(normed)
    assert (raw - normed).abs().max() > 1.0  # the statistics do normalise
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        actions = policy(TensorDict({"observation": normed}, batch_size=[len(normed)]))["action"]
    assert actions.abs().max() > 0.5  # a trained actor, not a near-zero output
    return raw, actions


def test_exported_files_act_as_the_evaluator(exported, reference):
    raw, expected = reference
    session = ort.InferenceSession(exported["onnx"], providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["obs"] and [o.name for o in session.get_outputs()] == ["actions"]
    for batch in (raw, raw[:1]):  # a dynamic batch dimension
        got = torch.from_numpy(session.run(["actions"], {"obs": batch.numpy()})[0])
        assert (got - expected[: len(batch)]).abs().max() <= 1e-5
    scripted = torch.jit.load(exported["ts"])  # our own file, written by this test
    with torch.no_grad():
        assert (scripted(raw) - expected).abs().max() <= 1e-5
        assert (scripted(raw[:3]) - expected[:3]).abs().max() <= 1e-5

    props = {p.key: p.value for p in onnx.load(exported["onnx"]).metadata_props}
    assert props["simeval.step"] == str(STEP) and props["simeval.env"] == ENV
    assert props["simeval.source_sha256"] == file_hash(SHIPPED) and props["simeval.obs_norm"] == "folded"
    extra = {"simeval.json": ""}
    torch.jit.load(exported["ts"], _extra_files=extra)
    assert json.loads(extra["simeval.json"])["simeval.step"] == str(STEP)

    # simeval reads the ONNX file back: step and env from its metadata, the graph as the policy's weights.
    ck = load_checkpoint(exported["onnx"])
    assert (ck.step, ck.env, ck.obs_norm, ck.meta["format"]) == (STEP, ENV, None, "onnx")
    assert ck.sha256 == file_hash(exported["onnx"]) and peek_step(exported["onnx"]) == STEP
    env = make_env(ENV, num_envs=8, obs_norm=False)
    actor = build_policy(ck.policy_factory, ck.policy_kwargs, env)
    load_weights(actor, ck.policy, "policy")
    got = actor(TensorDict({"observation": raw}, batch_size=[len(raw)]))["action"]
    assert got.dtype == torch.float32 and (got - expected).abs().max() <= 1e-5
    env.close()

    hopper = make_env("Hopper-v5", num_envs=1, obs_norm=False)
    with pytest.raises(ValueError, match="17 observation features to 6 actions, the env has 11 and 3"):
        load_weights(build_policy(ck.policy_factory, ck.policy_kwargs, hopper), ck.policy, "policy")
    hopper.close()


def _returns(out) -> tuple[np.ndarray, dict]:
    with open(os.path.join(out, "results.jsonl")) as f:
        record = [json.loads(line) for line in f][-1]
    assert record["status"] == "ok", record
    return np.array(record["episode_returns"]), record


def test_exported_onnx_scores_as_its_checkpoint(exported, tmp_path):
    """Same seed, envs and episodes: the launcher on the checkpoint and on its ONNX export.

    HalfCheetah's contacts are chaotic: the float32 differences between torch
    and onnxruntime (a few 1e-7 in actions, from summation order) grow about
    tenfold every five steps, so full episodes cannot match one by one. Over
    10 steps they stay below 1e-3 in return (measured: 1e-4), while a wrong
    normaliser or action mapping moves 10-step returns (about 4) by far more
    than 1e-2: each episode must agree to 1e-2. Full 1000-step episodes are
    then two samples of the same policy's returns: their means must agree
    within sampling error.
    """

    def launch(ckpt: str, name: str, steps: int, episodes: int) -> tuple[np.ndarray, dict]:
        out = str(tmp_path / name)
        args = ["--checkpoint", ckpt, "--episodes", str(episodes), "--num-envs", "8", "--max-steps", str(steps)]
        proc = _run("simeval.launch", *args, "--seed", "0", "--out", out)
        assert proc.returncode == 0, proc.stderr
        return _returns(out)

    short_pt, _ = launch(exported["ckpt"], "short_pt", 10, 16)
    short_onnx, record = launch(exported["onnx"], "short_onnx", 10, 16)
    assert record["step"] == STEP and record["env"] == ENV
    assert record["checkpoint_sha256"] == file_hash(exported["onnx"])
    assert len(short_onnx) == 16 and np.abs(short_pt - short_onnx).max() <= 1e-2

    full_pt, _ = launch(exported["ckpt"], "full_pt", 1000, 16)
    full_onnx, _ = launch(exported["onnx"], "full_onnx", 1000, 16)
    assert full_pt.mean() > 3000  # the shipped policy runs
    sigma = math.sqrt(full_pt.var(ddof=1) / len(full_pt) + full_onnx.var(ddof=1) / len(full_onnx))
    assert abs(full_pt.mean() - full_onnx.mean()) <= 4 * sigma + 1.0


def test_onnx_from_another_exporter(exported, tmp_path, reference):
    """A file as rsl_rl's exporter writes it: batch fixed at 1, no simeval metadata (step 0, --env needed)."""
    raw, expected = reference
    model = onnx.load(exported["onnx"])
    for value in (model.graph.input[0], model.graph.output[0]):
        value.type.tensor_type.shape.dim[0].dim_value = 1
    del model.metadata_props[:]
    path = str(tmp_path / "policy.onnx")
    onnx.save(model, path)
    ck = load_checkpoint(path)
    assert (ck.step, ck.env, peek_step(path)) == (0, None, 0)
    env = make_env(ENV, num_envs=8, obs_norm=False)
    actor = build_policy(ck.policy_factory, ck.policy_kwargs, env)
    load_weights(actor, ck.policy, "policy")
    got = actor(TensorDict({"observation": raw}, batch_size=[len(raw)]))["action"]  # one row at a time
    assert (got - expected).abs().max() <= 1e-5
    env.close()
    proc = _run("simeval.launch", "--checkpoint", path, "--out", str(tmp_path / "out"))
    assert proc.returncode == 2 and "does not record its env: name it with --env" in proc.stderr


def _one_line_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("simeval-export: error: "), proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_bad_input_is_one_line_and_exit_2(exported, tmp_path):
    _one_line_error(_run("simeval.export", exported["ckpt"], "--to", "tflite"), "tflite", "onnx", "torchscript")
    missing = str(tmp_path / "nope.pt")
    _one_line_error(_run("simeval.export", missing, "--to", "onnx"), missing, "no such checkpoint file")
    _one_line_error(_run("simeval.export", exported["onnx"], "--to", "onnx"), "already an exported ONNX policy")
    _one_line_error(
        _run("simeval.export", exported["ckpt"], "--to", "onnx", "--env", "Hopper-v5"),
        "trained on HalfCheetah-v5, but --env is Hopper-v5",
    )
    # A checkpoint that records no env needs --env.
    data = torch.load(SHIPPED, weights_only=True)
    data["env"] = None
    no_env = str(tmp_path / "no_env.pt")
    torch.save(data, no_env)
    _one_line_error(_run("simeval.export", no_env, "--to", "torchscript"), no_env, "--env")
    assert not os.path.exists(tmp_path / "exported")  # nothing written for bad input
    # A TorchScript export given to the launcher: said what it is (it was "not a readable checkpoint"), never run.
    proc = _run("simeval.launch", "--checkpoint", exported["ts"], "--out", str(tmp_path / "out"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "a TorchScript export (torch.jit.save), not a checkpoint" in proc.stderr


class _Marker:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_onnx_named_files_that_are_not_onnx_are_refused(exported, tmp_path):
    """A pickle named ``.onnx`` is still refused unread; a truncated ONNX file is a one-line error."""
    marker = str(tmp_path / "marker")
    evil = str(tmp_path / "policy.onnx")
    with open(evil, "wb") as f:
        pickle.dump(_Marker(marker), f)
    with pytest.raises(CheckpointError, match="refused to load"):
        load_checkpoint(evil)
    assert not os.path.exists(marker)
    truncated = str(tmp_path / "truncated.onnx")
    with open(exported["onnx"], "rb") as src, open(truncated, "wb") as dst:
        dst.write(src.read()[:1000])
    with pytest.raises(CheckpointError, match="not a readable ONNX model") as info:
        load_checkpoint(truncated)
    assert str(info.value).startswith(truncated) and "\n" not in str(info.value)
