"""The real Isaac Lab 3.0 (kit-less, Newton physics) through simeval: env, every backend, the launcher.

Runs in the Python 3.12 venv that ``make isaaclab`` builds (``make test-isaaclab``);
every test is required, so CI fails if Isaac Lab cannot run. The task is Isaac
Lab's own ``Isaac-Cartpole-Direct`` with its robot read from a file in this
repo (``Simeval-Isaac-Cartpole-Direct``): no asset server, no stand-in. Each
Isaac Lab env gets its own process (Isaac Lab keeps one simulation per
process). Parametrised by device: ``cuda:0`` joins ``cpu`` where torch sees a GPU.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import traceback

import pytest
from isaac_script import probe_of

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PROBE = os.path.join(HERE, "isaac_probe.py")
TASK = "isaaclab:Simeval-Isaac-Cartpole-Direct"
DATA = os.path.join(REPO, "simeval", "data")
# A short rsl_rl run (examples/train_rsl_rl.py, Isaac Lab's cartpole PPO config): model_0 is untrained,
# model_149 balances the pole. Isaac Lab's run layout: params/agent.yaml beside model_<iteration>.pt.
RUN = os.path.join(DATA, "isaaclab_cartpole_rsl_rl")
# A simeval checkpoint (examples/train_ppo.py) carrying VecNorm statistics from training.
VECNORM_CKPT = os.path.join(DATA, "isaaclab_cartpole_ppo", "step_000245760.pt")

pytestmark = [pytest.mark.required, pytest.mark.timeout(1200)]


def _devices() -> list[str]:
    import torch

    return ["cpu", "cuda:0"] if torch.cuda.is_available() else ["cpu"]


DEVICES = _devices()
BACKENDS = ("thread", "process", "ray")


def _env() -> dict:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([REPO, HERE]),
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "RAY_USAGE_STATS_ENABLED": "0",
    }


def _run(*args: str, timeout: float = 420) -> subprocess.CompletedProcess:
    cmd = [sys.executable, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env(), cwd=REPO)


def _plan(device: str) -> dict[str, list[str]]:
    """Every isaac_probe.py probe the tests below read, by name, on ``device`` (the CPU-only tests' on cpu's)."""
    on, four = ["--device", device], ["--num-envs", "4", "--episodes", "4"]
    plan = {
        "layout": ["layout", *on, "--num-envs", "3", "--max-steps", "20"],
        "bare": ["bare", VECNORM_CKPT, *on, *four],
        **{backend: ["evaluate", backend, VECNORM_CKPT, *on, *four] for backend in BACKENDS},
    }
    if device == "cpu":
        untrained, trained = checkpoints()[0], checkpoints()[-1]
        plan["uneven"] = ["evaluate", "process", untrained, "--num-envs", "4", "--episodes", "10", "--max-steps", "120"]
        n = ["--num-envs", "16", "--max-steps", "300", "--seed", "5"]
        plan["rsl_rl_play"] = ["rsl_rl", trained, *n]
        plan["rsl_rl_simeval"] = ["evaluate", "thread", trained, *n, "--episodes", "16"]
    return plan


@pytest.fixture(scope="module")
def probed(tmp_path_factory, isaac_scripts):
    """``probed(device)``: what each probe of ``_plan(device)`` wrote, by name. The cpu plan runs in the session's
    shared Isaac Lab process (``_probe``, isaac_script.py); a GPU's in one process of its own (``isaac_probe.py
    batch``): Isaac Lab starts once for a plan, not once per probe."""
    done: dict[str, dict] = {"cpu": probe_of(isaac_scripts, __name__)}

    def of(device: str) -> dict:
        if device not in done:
            tmp = tmp_path_factory.mktemp("probes-" + device.replace(":", ""))
            outs = {name: tmp / f"{name}.json" for name in _plan(device)}
            plan = [[*argv, str(outs[name])] for name, argv in _plan(device).items()]
            (tmp / "plan.json").write_text(json.dumps(plan))
            proc = _run(PROBE, "batch", str(tmp / "plan.json"), timeout=1100)
            assert proc.returncode == 0, proc.stderr[-3000:]
            done[device] = {name: json.loads(out.read_text()) for name, out in outs.items()}
        return done[device]

    return of


def probe(probed, device: str, name: str):
    """What probe ``name`` of ``_plan(device)`` wrote; its traceback as the failure if it raised."""
    result = probed(device)[name]
    assert not (isinstance(result, dict) and "probe_error" in result), result["probe_error"][-3000:]
    return result


def launch(*args: str, timeout: float = 420) -> subprocess.CompletedProcess:
    return _run("-m", "simeval.launch", *args, timeout=timeout)


def iteration(path: str) -> int:
    return int(os.path.basename(path)[len("model_") : -len(".pt")])


def checkpoints() -> list[str]:
    return sorted((os.path.join(RUN, n) for n in os.listdir(RUN) if n.endswith(".pt")), key=iteration)


def read_results(out) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("device", DEVICES)
def test_make_env_builds_the_real_isaac_lab_task_with_simevals_transform_layout(probed, device):
    info = probe(probed, device, "layout")  # 3 sub-envs, max_steps 20
    assert info["transforms"] == ["DoubleToFloat", "StepCounter", "VecNormV2", "RewardSum"]  # as on MuJoCo
    assert info["wrapper_transforms"] == ["VecGymEnvTransform"]  # IsaacLabWrapper's own, inside
    assert info["obs_norm_id"] == "VecNormV2"  # OBS_NORM_ID fits Isaac Lab envs too
    assert info["batch_size"] == [3] and info["obs_shape"][-1] == 4
    assert info["device"] == device
    assert info["native_autoreset"] is True
    assert "Metrics/success_rate" in info["log_keys"]
    # max_steps became Isaac Lab's own episode length: every sub-env times out after exactly 20 steps
    assert sorted(set(info["done_steps"])) == [19]


@pytest.mark.parametrize("device", DEVICES)
def test_every_backend_gives_the_same_numbers_as_a_bare_loop(probed, device):
    # VECNORM_CKPT: VecNorm statistics from training, applied frozen on every backend; 4 sub-envs, 4 episodes
    bare = probe(probed, device, "bare")
    by_backend = {}
    for backend in BACKENDS:
        results = probe(probed, device, backend)
        for r in results:
            assert r["eval/num_episodes"] == 4
            assert r["eval/episode_returns"] == pytest.approx(bare["returns"], rel=1e-6, abs=1e-9)
        assert results[0]["eval/episode_returns"] == results[1]["eval/episode_returns"]  # same seed, same round
        by_backend[backend] = results[0]
    ref = by_backend["thread"]
    for backend, r in by_backend.items():
        assert r["eval/episode_returns"] == ref["eval/episode_returns"], backend
        assert r["eval/success_rate"] == ref["eval/success_rate"], backend


def test_exactly_n_episodes_with_uneven_quotas_and_isaac_lab_metrics(probed):
    # checkpoints()[0], untrained: some carts leave the rail (terminated), others time out; 4 sub-envs, 10 episodes
    (r, _) = probe(probed, "cpu", "uneven")
    assert r["eval/num_episodes"] == 10 and len(r["eval/episode_returns"]) == 10
    term, trunc = r["eval/terminated_fraction"], r["eval/truncated_fraction"]
    assert term + trunc == pytest.approx(1.0)
    # Isaac-Cartpole-Direct's success is surviving to the time limit: the same episodes, counted two ways
    assert r["eval/success_rate"] == pytest.approx(trunc, abs=0.2)
    assert 0.0 <= r["eval/log/Metrics/success_rate"] <= 1.0
    assert all(length <= 120 for length in r["eval/episode_lengths"])


def test_launcher_evaluates_a_checkpoint_and_records_isaac_metrics(tmp_path):
    out = tmp_path / "out"
    ckpt = checkpoints()[-1]
    proc = launch(
        "--env", TASK, "--checkpoint", ckpt, "--episodes", "8", "--num-envs", "4", "--max-steps", "100",
        "--device", "cpu", "--backend", "process",
        "--init-fn", "simeval.envs.simulators.isaaclab.app:app_launcher", "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (rec,) = read_results(out)
    assert rec["status"] == "ok" and rec["env"] == TASK and rec["env_backend"] == "isaaclab"
    m = rec["metrics"]
    assert m["num_episodes"] == 8
    for key in ("success_rate", "terminated_fraction", "truncated_fraction", "log/Metrics/success_rate"):
        assert key in m, key


def test_launcher_watch_evaluates_every_checkpoint_of_an_isaac_lab_run(tmp_path):
    out = tmp_path / "out"
    proc = launch(
        "--config", os.path.join(REPO, "launchers", "isaaclab-cartpole.yaml"), "--watch", RUN,
        "--episodes", "8", "--num-envs", "8", "--backend", "thread", "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = sorted(read_results(out), key=lambda r: r["step"])
    assert [r["step"] for r in records] == [iteration(p) for p in checkpoints()]  # rsl_rl's iterations, in order
    for r in records:
        assert r["status"] == "ok" and r["metrics"]["num_episodes"] == 8
        assert 0.0 <= r["metrics"]["success_rate"] <= 1.0
    untrained, trained = records[0]["metrics"], records[-1]["metrics"]
    assert trained["reward"] > untrained["reward"] + 3.0  # rsl_rl's training shows through simeval
    assert trained["success_rate"] >= 0.9 and untrained["success_rate"] <= 0.1


def test_rsl_rl_checkpoint_acts_and_scores_as_rsl_rls_own_play_loop(probed):
    # checkpoints()[-1] on 16 sub-envs, seed 5: rsl_rl's play loop, then simeval's thread backend (16 episodes)
    theirs = probe(probed, "cpu", "rsl_rl_play")
    assert theirs["max_action_diff"] <= 1e-5  # simeval's actor is rsl_rl's inference policy
    assert theirs["architecture"] == os.path.join("params", "agent.yaml")
    (ours,) = probe(probed, "cpu", "rsl_rl_simeval")[:1]
    assert len(theirs["returns"]) == len(ours["eval/episode_returns"]) == 16
    a, b = theirs["returns"], ours["eval/episode_returns"]
    se = (statistics.pvariance(a) / len(a) + statistics.pvariance(b) / len(b)) ** 0.5
    assert abs(statistics.fmean(a) - statistics.fmean(b)) <= 4 * se + 0.05


@pytest.mark.parametrize("backend", ["process", "ray"])
def test_isaac_lab_hook_runs_in_the_worker_before_torch(tmp_path, backend):
    record = tmp_path / "hook.jsonl"
    out = tmp_path / "out"
    env = {"SIMEVAL_HOOK_RECORD": str(record)}
    os.environ.update(env)
    try:
        proc = launch(
            "--env", TASK, "--checkpoint", checkpoints()[-1], "--episodes", "2", "--num-envs", "2",
            "--max-steps", "30", "--backend", backend, "--device", "cpu", "--num-gpus", "0",
            "--init-fn", "isaac_hooks:recording_isaaclab_hook", "--out", str(out),
        )  # fmt: skip
    finally:
        for k in env:
            os.environ.pop(k)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (hook,) = [json.loads(line) for line in record.read_text().splitlines()]
    assert hook["torch_loaded_before"] is False  # the worker called the hook before anything imported torch
    assert hook["pid"] != os.getpid()
    assert hook["launcher_args"]["device"] == "cpu"  # simeval's --device reached Isaac Lab's launcher flags
    assert read_results(out)[0]["status"] == "ok"


def test_bad_isaac_input_is_one_line_and_exit_2(tmp_path):
    proc = launch("--env", "isaaclab:Isaac-No-Such-Task", "--checkpoint", checkpoints()[-1], timeout=180)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()[-1:]
    assert "unknown Isaac Lab task 'Isaac-No-Such-Task'" in line and "Simeval-Isaac-Cartpole-Direct" in line

    # An rsl_rl checkpoint does not say which task it was trained on: the launcher asks for --env.
    proc = launch("--checkpoint", checkpoints()[-1], timeout=180)
    assert proc.returncode == 2
    assert "does not record its env: name it with --env" in proc.stderr.strip().splitlines()[-1]

    # A shipped task whose assets are not on this machine: Isaac Lab is pointed at an empty local
    # asset root (no network), and the error names the offline task and ISAACSIM_ASSET_ROOT.
    os.environ["ISAACSIM_ASSET_ROOT"] = str(tmp_path)
    try:
        proc = launch(
            "--env", "isaaclab:Isaac-Cartpole-Direct", "--checkpoint", checkpoints()[-1], "--num-envs", "2",
            "--episodes", "2", "--device", "cpu", "--out", str(tmp_path / "o"),
        )  # fmt: skip
    finally:
        os.environ.pop("ISAACSIM_ASSET_ROOT")
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "needs an asset this machine cannot load" in last and "ISAACSIM_ASSET_ROOT" in last


# ---- the session's shared Isaac Lab process (isaac_script.py) ----


def _probe(out: str) -> None:
    """The cpu plan's probes, one after the other in this process; each one's result (or traceback) by name."""
    import isaac_probe

    results = {}
    for name, argv in _plan("cpu").items():
        path = f"{out}.{name}"
        step = isaac_probe._args([*argv, path])
        try:
            isaac_probe.PROBES[step.what](step)
            with open(path) as f:
                results[name] = json.load(f)
        except Exception:  # noqa: BLE001  (the test that reads this probe fails with it; the next one still runs)
            results[name] = {"probe_error": traceback.format_exc()}
    with open(out, "w") as f:
        json.dump(results, f)


def test_a_replayed_episode_comes_back_in_its_whole_round_on_the_cpu(tmp_path):
    """``--replay``: sub-env 3's second episode, recorded by a process worker. Isaac Lab's sub-envs share one reset
    generator, so the replay re-runs the whole round; it promises nothing to the bit, and on the CPU the offline
    cartpole comes back equal."""
    out, init = tmp_path / "out", "simeval.envs.simulators.isaaclab.app:app_launcher"
    proc = launch(
        "--env", TASK, "--checkpoint", checkpoints()[-1], "--episodes", "6", "--num-envs", "4", "--max-steps", "100",
        "--seed", "3", "--device", "cpu", "--backend", "process", "--init-fn", init, "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (rec,) = read_results(out)
    assert (rec["episode_sub_envs"][5], rec["episode_ordinals"][5]) == (3, 1)
    proc = launch("--replay", str(out), "--replay-episode", "1:5", "--init-fn", init)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "promise: Isaac Lab: the whole round re-run" in proc.stdout
    assert f"replayed return {rec['episode_returns'][5]!r}" in proc.stdout and "equal to the bit: yes" in proc.stdout
