"""slurm/eval.sh and slurm/ray-cluster.sh against a real Slurm controller and node daemon on 127.0.0.1."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest
from launch_helpers import REPO, TESTS, write_checkpoints
from root_services import started_or_skip
from slurm_cluster import job_state, slurm_cluster, wait_for

SMALL = ("--episodes", "2", "--num-envs", "2", "--max-steps", "30")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    with started_or_skip(slurm_cluster, "a real Slurm") as env:
        yield {**os.environ, **env}, tmp_path_factory.mktemp("slurm-jobs")


def submit(slurm, script: str, *args: str, env: dict | None = None, cpus: int = 1, mem: int = 1000) -> str:
    """sbatch ``script`` with ``args`` (and ``env`` on top of the cluster's); returns the job id."""
    base, logs = slurm
    out = subprocess.run(
        [
            "sbatch",
            "--parsable",
            f"--cpus-per-task={cpus}",
            f"--mem={mem}",
            f"--output={logs}/%j.out",
            f"--error={logs}/%j.err",
            script,
            *args,
        ],
        env={**base, **(env or {})},
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip().split(";")[0]


def sbatch(slurm, *args: str, env: dict | None = None) -> tuple[str, str]:
    return submit(slurm, "slurm/eval.sh", *args, env=env), str(slurm[1])


def finished(job: str, env: dict, timeout: float) -> dict:
    """wait_for, but a job still running at the deadline is cancelled (no job outlives the test)."""
    try:
        return wait_for(job, env, timeout=timeout)
    except TimeoutError:
        subprocess.run(["scancel", job], env=env, check=False)
        raise


def logs_of(slurm, job: str) -> tuple[str, str]:
    """The job's stdout and stderr files."""
    logs = slurm[1]
    return open(f"{logs}/{job}.out").read(), open(f"{logs}/{job}.err").read()


def _records(out):
    path = os.path.join(out, "results.jsonl")
    return [json.loads(x) for x in open(path) if x.strip()] if os.path.exists(path) else []


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return write_checkpoints(str(tmp_path_factory.mktemp("ckpt")))


def test_eval_job_runs_on_the_gpu_slurm_gave_it(slurm, checkpoints, tmp_path):
    job, logs = sbatch(slurm, "--checkpoint", checkpoints[0], "--out", str(tmp_path), *SMALL)
    info = wait_for(job, slurm[0])
    stdout = open(f"{logs}/{job}.out").read()
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", stdout + open(f"{logs}/{job}.err").read()
    assert "CUDA_VISIBLE_DEVICES=0" in stdout
    (record,) = _records(tmp_path)
    assert record["step"] == 1000 and record["status"] == "ok"


def test_a_bad_argument_fails_the_job_with_the_message_in_its_err_file(slurm, checkpoints, tmp_path):
    job, logs = sbatch(slurm, "--checkpoint", checkpoints[0], "--out", str(tmp_path), "--episodes", "0")
    info = wait_for(job, slurm[0])
    assert info["JobState"] == "FAILED" and info["ExitCode"] == "2:0"
    err = open(f"{logs}/{job}.err").read()
    assert "simeval-launch: error: --episodes must be >= 1" in err and "Traceback" not in err


def report_device(device: str | None = None) -> None:
    """``--init-fn`` hook of the device tests: print the device the launcher resolved, then end the run.

    The job stops before anything is built on that device, so ``cuda:N`` needs no GPU here.
    """
    print(f"launcher device: {device}", flush=True)
    sys.exit(0)


def _fake_nvidia_smi(directory, works: bool) -> str:
    """A directory holding an ``nvidia-smi`` that answers like a driver with one GPU, or fails."""
    os.makedirs(directory)
    script = os.path.join(directory, "nvidia-smi")
    with open(script, "w") as f:
        if works:
            f.write('#!/bin/sh\necho "GPU 0: Stand-in GPU (UUID: GPU-00000000-0000-0000-0000-000000000000)"\n')
        else:
            f.write('#!/bin/sh\necho "NVIDIA-SMI has failed: no driver" >&2\nexit 9\n')
    os.chmod(script, 0o755)
    return directory


def test_eval_job_defaults_to_its_gpu_and_keeps_a_device_from_a_flag_or_the_profile(slurm, checkpoints, tmp_path):
    """What device the launcher resolved in the job, through sbatch, for each way of naming one."""
    gpu = _fake_nvidia_smi(str(tmp_path / "gpu-bin"), works=True)
    no_driver = _fake_nvidia_smi(str(tmp_path / "no-driver-bin"), works=False)
    profile = tmp_path / "cpu-profile.yaml"
    profile.write_text("device: cpu\n")
    hook = ("--init-fn", "test_slurm:report_device", "--checkpoint", checkpoints[0])

    def env(smi_dir: str, **extra: str) -> dict:
        path = f"{smi_dir}{os.pathsep}{os.environ['PATH']}"
        return {"PATH": path, "PYTHONPATH": os.pathsep.join([REPO, TESTS]), "SIMEVAL_DEFAULT_DEVICE": "", **extra}

    cases = {  # expected device -> (arguments, environment)
        "cuda:0": (hook, env(gpu)),  # no device named: the GPU Slurm gave the job
        "cuda:1": ((*hook, "--device=cuda:1"), env(gpu)),
        "cpu": (("--config", str(profile), *hook), env(gpu)),
        "cuda:2": (("--config", str(profile), *hook, "--device", "cuda:2"), env(gpu)),  # the flag beats the profile
        "cuda:3": (hook, env(gpu, SIMEVAL_DEFAULT_DEVICE="cuda:3")),  # a site default already set is kept
        "None": (hook, env(no_driver)),  # nvidia-smi fails: no GPU default
    }
    jobs = {expected: sbatch(slurm, *args, env=extra)[0] for expected, (args, extra) in cases.items()}
    resolved = {}
    for expected, job in jobs.items():
        info = finished(job, slurm[0], timeout=240)
        stdout, stderr = logs_of(slurm, job)
        assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", stdout + stderr
        (line,) = [x for x in stdout.splitlines() if x.startswith("launcher device: ")]
        resolved[expected] = line.removeprefix("launcher device: ")
    assert resolved == {expected: expected for expected in cases}


def test_preempted_watch_job_requeues_and_resumes_without_loss_or_repeat(slurm, tmp_path):
    env = slurm[0]
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    write_checkpoints(str(ckpt), steps=(1000, 2000, 3000))
    job, logs = sbatch(
        slurm,
        "--watch",
        str(ckpt),
        "--out",
        str(out),
        "--poll-interval",
        "0.2",
        "--episodes",
        "2",
        "--num-envs",
        "1",
        "--max-steps",
        "1000",
    )
    deadline = time.time() + 240
    while not _records(out) and time.time() < deadline:
        assert job_state(job, env).get("JobState") in ("PENDING", "RUNNING"), open(f"{logs}/{job}.err").read()
        time.sleep(0.3)
    assert _records(out), "the watcher wrote no result in time"
    # Preemption / time-out warning: SIGTERM to the batch shell, as --signal=B:TERM does.
    subprocess.run(["scancel", "--signal=TERM", "--batch", job], env=env, check=True)
    deadline = time.time() + 120
    while int(job_state(job, env).get("Restarts", "0")) < 1 and time.time() < deadline:
        time.sleep(0.3)
    assert int(job_state(job, env).get("Restarts", "0")) >= 1, "the job did not requeue itself"
    (ckpt / "DONE").write_text("")
    info = wait_for(job, env, timeout=400)
    stdout = open(f"{logs}/{job}.out").read()
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", stdout
    assert "requeueing" in stdout and "(restart 1)" in stdout
    records = _records(out)
    assert [r["step"] for r in records] == [1000, 2000, 3000]
    assert len({r["checkpoint_name"] for r in records}) == 3


def submit_ray(slurm, *args: str, env: dict | None = None, cpus: int = 2, mem: int = 2000) -> str:
    env = {"SIMEVAL_RAY_HEAD_IP": "127.0.0.1", **(env or {})}
    return submit(slurm, "slurm/ray-cluster.sh", *args, env=env, cpus=cpus, mem=mem)


def test_ray_cluster_script_starts_ray_on_the_allocation_and_evaluates(slurm, checkpoints, tmp_path):
    job = submit_ray(slurm, "--num-gpus", "1", "--checkpoint", checkpoints[1], "--out", str(tmp_path), *SMALL)
    info = wait_for(job, slurm[0], timeout=300)
    stdout, stderr = logs_of(slurm, job)
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", stdout + stderr[-3000:]
    assert "1 GPUs per node" in stdout and "Ray head answered" in stdout
    (record,) = _records(tmp_path)
    assert record["backend"] == "ray" and record["step"] == 2000


@pytest.mark.parametrize("failure", ["head exits", "head never answers"])
def test_ray_cluster_job_fails_at_once_with_one_line_when_the_head_does_not_come_up(
    slurm, checkpoints, tmp_path, failure
):
    env = {"SIMEVAL_RAY_HEAD_TIMEOUT": "10"}
    with socket.socket() as taken:
        if failure == "head exits":
            # A temp dir Ray cannot create (under a regular file): `ray start --head` fails within a second.
            (tmp_path / "a-file").write_text("")
            env["SIMEVAL_RAY_TMPDIR"] = str(tmp_path / "a-file" / "ray")
            expected = "exited (status 1) before it answered"
        else:
            # Something else listens on the head's port: the GCS cannot start and `ray start` would wait
            # 40 s for it; the job gives up after SIMEVAL_RAY_HEAD_TIMEOUT.
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            env["SIMEVAL_RAY_BASE_PORT"] = str(port)
            expected = f"did not answer at 127.0.0.1:{port} within 10 s (SIMEVAL_RAY_HEAD_TIMEOUT)"
        start = time.monotonic()
        job = submit_ray(slurm, "--checkpoint", checkpoints[1], "--out", str(tmp_path / "out"), env=env, cpus=1)
        info = finished(job, slurm[0], timeout=120)
        took = time.monotonic() - start
    stdout, stderr = logs_of(slurm, job)
    assert info["JobState"] == "FAILED" and info["ExitCode"] == "1:0", stdout + stderr[-3000:]
    (line,) = [x for x in stderr.splitlines() if x.startswith(f"simeval ray job {job}:")]
    assert expected in line and stderr.splitlines()[-1] == line, stderr[-3000:]
    assert "results:" not in stdout and not _records(tmp_path / "out")  # the launcher never started
    assert took < 60, f"the job took {took:.0f} s to fail"


# -- settings read by the scripts: checked as text before any use (no Slurm needed) -------------------------------
INJECTED = "HOME[$(touch {marker})]"  # bash arithmetic evaluates this, running touch


def run_ray_script(tmp_path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """slurm/ray-cluster.sh run directly with bash, as its batch step would, with ``env`` set.

    The Slurm config names a controller nobody runs (port 1): a script that got past its
    checks would fail at its first srun, never reach a real cluster.
    """
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=none\nSlurmctldHost=localhost\nSlurmctldPort=1\nNodeName=localhost CPUs=1\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SIMEVAL_", "RAY_"))}
    full = {**base, "SIMEVAL_HOME": REPO, "SLURM_CONF": str(conf), "SLURM_JOB_NODELIST": "localhost",
            "SIMEVAL_RAY_HEAD_IP": "127.0.0.1", "RAY_AUTH_TOKEN": "t", **env}  # fmt: skip
    return subprocess.run(
        ["bash", os.path.join(REPO, "slurm", "ray-cluster.sh"), "--checkpoint", "x.pt"],
        env=full, cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("name", "value", "must_be"),
    [
        ("SIMEVAL_RAY_BASE_PORT", INJECTED, "a whole number from 1024 to 65436"),
        ("SIMEVAL_RAY_BASE_PORT", "70000", "a whole number from 1024 to 65436"),
        ("SIMEVAL_RAY_BASE_PORT", "20000+1", "a whole number from 1024 to 65436"),
        ("SIMEVAL_RAY_HEAD_TIMEOUT", INJECTED, "a whole number from 1 to"),
        ("SLURM_JOB_ID", INJECTED, "a whole number from 0 to"),
        ("SLURM_CPUS_PER_TASK", "two", "a whole number from 0 to"),
        ("SIMEVAL_RAY_GPUS_PER_NODE", "1.5", "a whole number from 0 to"),
    ],
)
def test_a_bad_numeric_setting_of_the_ray_script_is_one_line_and_exit_2_before_any_use(tmp_path, name, value, must_be):
    marker = tmp_path / "marker"
    proc = run_ray_script(tmp_path, {name: value.format(marker=marker)})
    assert not marker.exists(), f"{name} was evaluated as an expression: it ran a command"
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"simeval: {name} must be {must_be}") and value.format(marker=marker) in line, line
    assert proc.stdout == ""  # refused before anything started


def test_serve_eval_serves_the_policy_in_its_own_step_and_evaluates_it_through_the_loopback(slurm, tmp_path):
    """slurm/serve-eval.sh: serve_policy in an srun step on 127.0.0.1, the launcher in the batch step with
    --policy-server (the env from the server); the returns of a local --checkpoint run; the token nowhere."""
    from simeval.checkpoints.shipped import shipped_checkpoint

    out, local = tmp_path / "out", tmp_path / "local"
    job = submit(slurm, "slurm/serve-eval.sh", shipped_checkpoint(), "--", "--out", str(out), *SMALL, cpus=2)
    info = finished(job, slurm[0], timeout=300)
    stdout, stderr = logs_of(slurm, job)
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", stdout + stderr[-3000:]
    assert "policy server for HalfCheetah-v5 on ws://127.0.0.1:" in stdout
    assert "simeval.serve_policy: served " in stderr  # stopped after the launcher, with its summary
    (record,) = _records(out)
    assert record["status"] == "ok" and record["checkpoint_format"] == "remote"
    assert "token" not in json.dumps(record)
    proc = subprocess.run(
        [sys.executable, "-m", "simeval.launch", "--checkpoint", shipped_checkpoint(), "--out", str(local), *SMALL],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert record["episode_returns"] == pytest.approx(_records(local)[0]["episode_returns"], rel=1e-4)


@pytest.mark.parametrize(
    "args, env, words",
    [
        (["ckpt.pt"], {}, "slurm/serve-eval.sh takes CHECKPOINT [serve_policy flags] -- [launcher flags]."),
        (["--", "--episodes", "2"], {}, "slurm/serve-eval.sh takes CHECKPOINT"),
        (["ckpt.pt", "--"], {"SIMEVAL_SERVER_TIMEOUT": "a[$(touch {marker})]"}, "SIMEVAL_SERVER_TIMEOUT must be"),
    ],
)
def test_serve_eval_refuses_its_arguments_in_one_line_before_starting_anything(tmp_path, args, env, words):
    env = {k: v.format(marker=tmp_path / "marker") for k, v in env.items()}
    proc = subprocess.run(
        ["bash", os.path.join(REPO, "slurm", "serve-eval.sh"), *args], cwd=tmp_path, capture_output=True, text=True,
        env={**os.environ, "SIMEVAL_HOME": REPO, **env}, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == "" and not (tmp_path / "marker").exists()
    (line,) = proc.stderr.strip().splitlines()
    assert words in line, line
