"""simeval.launch end to end, in subprocesses: checkpoint, watch, serve, init order, bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from launch_helpers import REPO, TESTS, cli, in_process, popen_cli, write_checkpoints

SMALL = ("--episodes", "2", "--num-envs", "2", "--max-steps", "30")


def _records(out):
    path = os.path.join(out, "results.jsonl")
    if not os.path.exists(path):
        return []
    return [json.loads(line) for line in open(path) if line.strip()]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    directory = tmp_path_factory.mktemp("ckpts")
    return write_checkpoints(str(directory))


def test_checkpoint_mode_writes_a_durable_result(checkpoints, tmp_path):
    from simeval.checkpoints import file_hash

    out = tmp_path / "out"
    proc = cli("--checkpoint", checkpoints[1], "--out", str(out), *SMALL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (record,) = _records(out)
    assert record["status"] == "ok" and record["step"] == 2000
    assert record["checkpoint_sha256"] == file_hash(checkpoints[1])
    assert record["backend"] == "thread" and record["host"] and record["wall_time"] > 0
    assert len(record["episode_returns"]) == len(record["episode_lengths"]) == 2
    assert record["metrics"]["reward"] == pytest.approx(sum(record["episode_returns"]) / 2)
    assert record["metrics"]["reward_ci_low"] <= record["metrics"]["reward"] <= record["metrics"]["reward_ci_high"]
    assert "reward" in proc.stdout  # the table
    assert list((out / "logs").rglob("*.csv")), "the CSV logger wrote nothing"


@pytest.mark.parametrize("backend", ["process", "ray"], indirect=True)
def test_process_and_ray_backends_give_the_thread_numbers(backend, checkpoints, tmp_path):
    import ray

    extra_env = {"RAY_ADDRESS": ray.get_runtime_context().gcs_address} if backend == "ray" else {}
    results = {}
    for b in ("thread", backend):
        out = tmp_path / b
        proc = cli("--checkpoint", checkpoints[0], "--out", str(out), "--backend", b, *SMALL, env=extra_env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        (results[b],) = _records(out)
    assert results[backend]["episode_returns"] == pytest.approx(results["thread"]["episode_returns"], rel=1e-6)
    assert results[backend]["backend"] == backend


def test_malicious_pickle_is_refused_without_running_its_code(tmp_path):
    import torch

    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    evil = tmp_path / "evil.pt"
    torch.save({"format": "simeval-checkpoint/1", "policy": Evil()}, evil)
    proc = cli("--checkpoint", str(evil), "--out", str(tmp_path / "out"), *SMALL)
    assert proc.returncode == 2
    assert "refused to load" in proc.stderr and "evil.pt" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not marker.exists()


def _watch(directory, out, *extra):
    return popen_cli("--watch", str(directory), "--out", str(out), "--poll-interval", "0.2", *extra)


def test_watch_survives_sigterm_and_restart_with_every_checkpoint_exactly_once(tmp_path):
    ckpt = tmp_path / "ckpt"
    out = tmp_path / "out"
    paths = write_checkpoints(str(ckpt), steps=(3000, 1000, 2000))
    long_rounds = ("--episodes", "2", "--num-envs", "1", "--max-steps", "1000")
    proc = _watch(ckpt, out, *long_rounds)
    deadline = time.time() + 180
    while not _records(out) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert _records(out), proc.stderr.read()[-2000:] if proc.poll() is not None else "no result in time"
    proc.send_signal(signal.SIGTERM)  # mid-way through the second checkpoint
    assert proc.wait(60) == 0
    after_stop = _records(out)
    assert [r["step"] for r in after_stop] == [1000]  # step order; nothing partial written

    (ckpt / "DONE").write_text("")
    proc = _watch(ckpt, out, *long_rounds)
    assert proc.wait(240) == 0, proc.stderr.read()[-2000:]
    final = _records(out)
    assert [r["step"] for r in final] == [1000, 2000, 3000]
    assert sorted(r["checkpoint_name"] for r in final) == sorted(os.path.basename(p) for p in paths)


def test_watch_records_a_bad_checkpoint_and_goes_on_until_step(tmp_path):
    ckpt = tmp_path / "ckpt"
    out = tmp_path / "out"
    write_checkpoints(str(ckpt), steps=(1000, 2000))
    (ckpt / "step_0001500.pt").write_bytes(b"this is not a checkpoint")
    old = time.time() - 60  # written a minute ago: not a file training is still writing (see watch.SETTLE_SECONDS)
    os.utime(ckpt / "step_0001500.pt", (old, old))
    write_checkpoints(str(ckpt / "other"), steps=(1700,), hidden=(8, 8))
    os.replace(ckpt / "other" / "step_0001700.pt", ckpt / "step_0001700.pt")  # a different policy layout
    proc = _watch(ckpt, out, *SMALL, "--until-step", "2000", "--policy-kwargs", '{"hidden": [16]}')
    assert proc.wait(240) == 0, proc.stderr.read()[-2000:]
    records = _records(out)
    by_name = {r["checkpoint_name"]: r for r in records}
    assert by_name["step_0001500.pt"]["status"] == "failed"
    assert "not a readable checkpoint" in by_name["step_0001500.pt"]["error"]
    assert by_name["step_0001700.pt"]["status"] == "failed"
    assert "do not fit" in by_name["step_0001700.pt"]["error"]
    assert [r["step"] for r in records if r["status"] == "ok"] == [1000, 2000]


def test_init_fn_runs_in_the_launcher_before_torch_and_gets_apploauncher_flags(checkpoints, tmp_path):
    record = tmp_path / "app.jsonl"
    env = {
        "PYTHONPATH": os.pathsep.join([REPO, TESTS, os.path.join(TESTS, "standin")]),
        "ISAACLAB_STANDIN_RECORD": str(record),
    }
    proc = cli(
        "--init-fn",
        "simeval.envs.simulators.isaaclab.app:app_launcher",
        "--headless",
        "--livestream",
        "0",
        "--device",
        "cpu",
        "--checkpoint",
        checkpoints[0],
        "--out",
        str(tmp_path / "out"),
        *SMALL,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (app,) = [json.loads(line) for line in record.read_text().splitlines()]
    assert app["torch_loaded"] is False
    assert app["headless"] is True and app["livestream"] == 0
    assert app["device"] == "cpu" and app["enable_cameras"] is False


def test_isaaclab_env_without_isaac_lab_names_the_fix(checkpoints, tmp_path):
    # This suite's Python (3.11) has no Isaac Lab; the real package is tested in tests/isaac_lab (3.12 venv).
    proc = cli(
        "--env", "isaaclab:Simeval-Isaac-Cartpole-Direct", "--checkpoint", checkpoints[0], "--out", str(tmp_path)
    )
    assert proc.returncode == 2
    line = proc.stderr.strip().splitlines()[-1]
    assert "Isaac Lab 3.0 needs Python 3.12" in line and "make isaaclab" in line


def test_unknown_flags_without_init_fn_are_an_error(checkpoints, tmp_path):
    proc = cli("--checkpoint", checkpoints[0], "--headless", "--out", str(tmp_path))
    assert proc.returncode == 2
    assert "unrecognized arguments: --headless" in proc.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (("--env", "Hopper-v5", "--checkpoint", "CKPT"), "do not fit the eval module: shape mismatch"),
        (("--env", "NoSuchEnv-v0", "--watch", "DIR"), "unknown env 'NoSuchEnv-v0'"),
        (("--backend", "gpu", "--checkpoint", "CKPT"), "unknown backend 'gpu'"),
        (("--checkpoint", "CKPT", "--watch", "DIR"), "give one source of weights, not --checkpoint and --watch"),
        (("--config", "launchers/mujoco-halfcheetah.yaml"), "no source of weights"),
        (("--checkpoint", "/nonexistent/ckpt.pt"), "no such checkpoint file"),
        (("--checkpoint", "CKPT", "--policy", "launch_helpers:raising_policy"), "policy factory broke on purpose"),
        (("--checkpoint", "CKPT", "--policy-kwargs", '{"hidden": [32, 32]}'), "do not fit the eval module"),
        (("--episodes", "0", "--checkpoint", "CKPT"), "--episodes must be >= 1"),
        (("--episodes", "many", "--checkpoint", "CKPT"), "invalid int value: 'many'"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(args, message, checkpoints, tmp_path):
    args = [a.replace("CKPT", checkpoints[0]).replace("DIR", str(tmp_path)) for a in args]
    proc = cli(*args, "--out", str(tmp_path / "out"), *SMALL[2:])
    assert proc.returncode == 2, proc.stdout[-1000:] + proc.stderr[-1000:]
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("simeval-launch: error:") and message in lines[-1], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


def test_another_task_of_the_same_shapes_is_evaluated_with_a_warning_naming_both(checkpoints, tmp_path):
    """A HalfCheetah policy on --env Walker2d-v5 (17 observations, 6 actions both) ran without a word."""
    from simeval.launch.plan import same_task

    proc = cli("--checkpoint", checkpoints[0], "--env", "Walker2d-v5", "--out", str(tmp_path / "w"), *SMALL[2:])
    assert proc.returncode == 0, proc.stderr[-2000:]
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        f"warning: {checkpoints[0]} was trained on HalfCheetah-v5; evaluating it on --env Walker2d-v5 as asked "
        "(its numbers are about another task)."
    ]
    assert same_task("isaaclab:Isaac-Velocity-Flat-Anymal-D-v0", "isaaclab:Isaac-Velocity-Flat-Anymal-D-Play-v0")
    assert not same_task("HalfCheetah-v5", "Walker2d-v5")


def test_a_python_without_simevals_dependencies_is_told_which_python_to_use(tmp_path):
    """The system Python after `make demo` said only "No module named 'torchrl'"."""
    bare = subprocess.run(  # -S: no site-packages, as a Python that simeval was never installed into
        [sys.executable, "-S", "-m", "simeval.launch", "--checkpoint", "x.pt", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert bare.returncode == 2
    (line,) = bare.stderr.strip().splitlines()
    assert line.startswith("simeval-launch: error: No module named") and ".venv/bin/python -m simeval.launch" in line


def test_debug_shows_the_traceback(tmp_path):
    proc = cli("--checkpoint", "/nonexistent/ckpt.pt", "--out", str(tmp_path), "--debug")
    assert proc.returncode == 2 and "Traceback" in proc.stderr


@pytest.mark.parametrize("named_by", ["file", "env"])
def test_a_ray_cluster_that_is_gone_is_one_line_not_minutes_of_retries(named_by, checkpoints, tmp_path):
    # Ray joins the cluster of the last `ray start` (ray_current_cluster under its temp dir) even when it was killed
    # without `ray stop`; left to itself ray.init retries such an address for minutes.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"  # nothing listens there once closed
    ray_tmp = tmp_path / "r"
    (ray_tmp / "ray").mkdir(parents=True)
    (ray_tmp / "ray" / "ray_current_cluster").write_text(dead)
    env = {"RAY_TMPDIR": str(ray_tmp), "RAY_ADDRESS": dead if named_by == "env" else ""}
    proc = cli("--checkpoint", checkpoints[0], "--backend", "ray", "--out", str(tmp_path / "out"), *SMALL, env=env)
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("simeval-launch: error:") and dead in line and "RAY_ADDRESS=local" in line, line
    assert ("ray_current_cluster" in line) == (named_by == "file")


def test_more_gpus_than_the_ray_cluster_has_fails_clearly(ray_cluster, checkpoints, tmp_path):
    env = {"RAY_ADDRESS": ray_cluster.get_runtime_context().gcs_address}
    proc = cli(
        "--checkpoint",
        checkpoints[0],
        "--backend",
        "ray",
        "--num-gpus",
        "8",
        "--start-timeout",
        "3",
        "--out",
        str(tmp_path),
        *SMALL,
        env=env,
    )
    assert proc.returncode == 2
    (line,) = [x for x in proc.stderr.strip().splitlines() if x.startswith("simeval")][-1:]
    assert "num_gpus=8 ask for 8 GPUs but the Ray cluster has 1" in line, proc.stderr[-2000:]


def test_device_cuda_n_pins_the_process_worker_to_that_gpu(checkpoints, tmp_path):
    from simeval.launch.build import placement

    assert placement("cuda:3", "process") == ("3", "cuda:0")
    assert placement("cuda:3", "thread") == (None, "cuda:3")
    assert placement("cpu", "process") == (None, "cpu")
    # In the worker the variable is set before torch loads (checked on CPU: the policy
    # factory records it; the device itself stays CPU here).
    import functools

    from simeval import Evaluator
    from simeval.hooks import worker_init

    record = tmp_path / "visible"
    os.environ["SIMEVAL_TEST_RECORD"] = str(record)
    try:
        from helpers import count_env

        ev = Evaluator(
            count_env,
            policy_factory=_record_visible,
            num_trajectories=1,
            backend="process",
            init_fn=functools.partial(worker_init, cuda_visible="3"),
        )
        try:
            ev.evaluate()
        finally:
            ev.shutdown()
    finally:
        del os.environ["SIMEVAL_TEST_RECORD"]
    assert record.read_text() == "3"


def _record_visible(env):
    from helpers import const_policy

    with open(os.environ["SIMEVAL_TEST_RECORD"], "w") as f:
        f.write(os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"))
    return const_policy()


def test_report_plots_the_eval_curve_of_several_runs(checkpoints, tmp_path):
    runs = []
    for name, ckpts in (("a", checkpoints[:2]), ("b", checkpoints[1:])):
        out = tmp_path / name
        for ck in ckpts:
            assert in_process("--checkpoint", ck, "--out", str(out), *SMALL).returncode == 0
        runs.append(str(out))
    png = tmp_path / "curve.png"
    proc = subprocess.run(
        [sys.executable, "-m", "simeval.launch.report", *runs, "--output", str(png)],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=REPO),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # One row per evaluation, each run's by step: (run, step, mean return, CI low, CI high, episodes) as its
    # results.jsonl line has them (rounded as the table prints them).
    rows = [line.split() for line in proc.stdout.splitlines() if line.split()[:1] in (["a"], ["b"])]
    expected = []
    for name in ("a", "b"):
        for record in sorted(_records(tmp_path / name), key=lambda r: r["step"]):
            m = record["metrics"]
            numbers = (m["reward"], m["reward_ci_low"], m["reward_ci_high"])
            expected.append([name, f"{record['step']:,}", *(f"{x:.1f}" for x in numbers), str(m["num_episodes"])])
    assert rows == expected
    assert [(row[0], row[1]) for row in rows] == [("a", "1,000"), ("a", "2,000"), ("b", "2,000"), ("b", "3,000")]


def test_video_records_the_first_episode_of_each_round_only_when_asked(checkpoints, tmp_path):
    """Headless by default: no display and no MUJOCO_GL, the launcher picks EGL before MuJoCo is imported."""
    import imageio.v2 as imageio

    out = tmp_path / "out"
    headless = {"MUJOCO_GL": "", "DISPLAY": ""}
    proc = cli("--checkpoint", checkpoints[0], "--out", str(out), "--video", *SMALL, env=headless)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (video,) = list((out / "videos").iterdir())
    assert video.name == "step_000001000.mp4"
    reader = imageio.get_reader(str(video), format="FFMPEG")
    assert reader.count_frames() == 31  # the reset frame and the 30 steps of sub-env 0's first episode
    last = reader.get_data(30)
    assert last.shape == (240, 240, 3) and last.std() > 0
    quiet = tmp_path / "quiet"
    assert cli("--checkpoint", checkpoints[0], "--out", str(quiet), *SMALL).returncode == 0
    assert not (quiet / "videos").exists()


def test_video_without_a_headless_opengl_is_one_line_saying_what_to_install(monkeypatch):
    import ctypes.util

    from simeval.envs.simulators.mujoco_native.gl import headless_gl

    monkeypatch.delenv("MUJOCO_GL", raising=False)
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)  # a machine with neither library
    with pytest.raises(ValueError, match=r"^MuJoCo cannot render headless here: neither libEGL nor .*libegl1"):
        headless_gl()
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: "libOSMesa.so.8" if name == "OSMesa" else None)
    assert headless_gl() == {"MUJOCO_GL": "osmesa"}
    monkeypatch.setenv("MUJOCO_GL", "egl")
    assert headless_gl() == {"MUJOCO_GL": "egl"}  # the user's choice stands


def test_a_reader_that_closes_the_pipe_early_ends_the_launcher_and_export_quietly(tmp_path):
    """``simeval.launch ... | head`` and ``simeval.export ... | head``: exit 141 (or 0), as SIGPIPE would, no
    BrokenPipeError traceback and no error line."""
    import shlex

    from simeval.checkpoints.shipped import shipped_checkpoint

    py, ck = shlex.quote(sys.executable), shlex.quote(shipped_checkpoint())
    for cmd in (
        f"{py} -m simeval.launch --checkpoint {ck} --episodes 2 --max-steps 20 --num-envs 2 --out {tmp_path / 'o'}",
        f"{py} -m simeval.export {ck} --to onnx --out {tmp_path / 'a.onnx'}",
    ):
        proc = subprocess.run(["bash", "-c", f"set -o pipefail; {cmd} | head -c 1 >/dev/null"], capture_output=True,
                              text=True, timeout=240, cwd=REPO)  # fmt: skip
        assert "Traceback" not in proc.stderr and "Broken" not in proc.stderr and "error" not in proc.stderr, cmd
        assert proc.returncode in (0, 141), (cmd, proc.returncode, proc.stderr)


# -- the first hour (issue 45, item 8) -------------------------------------------------------------------------------


def test_a_mistyped_flag_is_told_the_nearest_flag_and_not_about_init_fn():
    """``--episode 4`` said "unrecognized arguments: --episode 4 (flags simeval does not know go to --init-fn; none
    is set)": nothing about --episodes."""
    from simeval.launch.cli import parse
    from simeval.launch.config import ConfigError

    with pytest.raises(ConfigError) as info:
        parse(["--checkpoint", "ckpt.pt", "--episode", "4"])
    (line,) = str(info.value).splitlines()
    assert "unrecognized arguments: --episode 4" in line and "did you mean --episodes?" in line, line
    assert "--init-fn" not in line
    with pytest.raises(ConfigError) as info:
        parse(["--checkpoint", "ckpt.pt", "--headless"])
    assert "did you mean" not in str(info.value) and "--init-fn" not in str(info.value)


def _stop_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("stopped by signal"))


def test_ctrl_c_before_any_result_names_no_results_file(tmp_path):
    """Ctrl-C on a watch that had evaluated nothing said "results so far are in OUT/results.jsonl": no such file."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    out = tmp_path / "out"
    proc = popen_cli("--watch", str(ckpt), "--out", str(out), "--poll-interval", "0.1")
    try:
        text = ""
        deadline = time.time() + 60
        while "waiting for checkpoints" not in text and time.time() < deadline:
            text += proc.stdout.readline()
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    line = _stop_line(text + rest)
    assert not (out / "results.jsonl").exists()
    assert "results.jsonl" not in line and "no results written" in line, line


def test_a_finished_checkpoint_run_again_into_its_out_says_so_and_again_evaluates_it_again(checkpoints, tmp_path):
    """Running the same --checkpoint into the same --out evaluated it again, silently, and appended a second line."""
    out = tmp_path / "out"
    first = in_process("--checkpoint", checkpoints[0], "--out", str(out), *SMALL)
    assert first.returncode == 0, first.stderr[-2000:]
    again = in_process("--checkpoint", checkpoints[0], "--out", str(out), *SMALL)
    assert again.returncode == 0, again.stderr[-2000:]
    assert len(_records(out)) == 1, again.stdout[-2000:]
    assert "already evaluated" in again.stdout and "--again" in again.stdout, again.stdout[-2000:]
    assert "evaluating" not in again.stdout
    forced = in_process("--checkpoint", checkpoints[0], "--out", str(out), *SMALL, "--again")
    assert forced.returncode == 0, forced.stderr[-2000:]
    assert [r["status"] for r in _records(out)] == ["ok", "ok"]
    other = in_process("--checkpoint", checkpoints[1], "--out", str(out), *SMALL)  # another checkpoint: evaluated
    assert other.returncode == 0 and len(_records(out)) == 3, other.stderr[-2000:]


def test_a_watch_with_checkpoints_left_never_says_it_waits(tmp_path):
    """After each evaluation a --watch run said "waiting for checkpoints" while the next ones lay in the directory."""
    ckpt = tmp_path / "ckpt"
    write_checkpoints(str(ckpt), steps=(1000, 2000, 3000))
    (ckpt / "DONE").write_text("")
    proc = in_process("--watch", str(ckpt), "--out", str(tmp_path / "out"), *SMALL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(_records(tmp_path / "out")) == 3
    assert "waiting for checkpoints" not in proc.stdout, proc.stdout
