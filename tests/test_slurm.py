"""slurm/eval.sh against a real Slurm controller and node daemon on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from launch_helpers import REPO, write_checkpoints
from root_services import started_or_skip
from slurm_cluster import job_state, slurm_cluster, wait_for

SMALL = ("--episodes", "2", "--num-envs", "2", "--max-steps", "30")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    with started_or_skip(slurm_cluster, "a real Slurm") as env:
        yield {**os.environ, **env}, tmp_path_factory.mktemp("slurm-jobs")


def sbatch(slurm, *args: str) -> tuple[str, str]:
    env, logs = slurm
    out = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--cpus-per-task=1",
            "--mem=1000",
            f"--output={logs}/%j.out",
            f"--error={logs}/%j.err",
            "slurm/eval.sh",
            *args,
        ],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    job = out.stdout.strip().split(";")[0]
    return job, str(logs)


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


def test_ray_cluster_script_starts_ray_on_the_allocation_and_evaluates(slurm, checkpoints, tmp_path):
    env, logs = slurm
    out = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--cpus-per-task=2",
            "--mem=2000",
            f"--output={logs}/%j.out",
            f"--error={logs}/%j.err",
            "slurm/ray-cluster.sh",
            "--num-gpus",
            "1",
            "--checkpoint",
            checkpoints[1],
            "--out",
            str(tmp_path),
            *SMALL,
        ],
        env={**env, "SIMEVAL_RAY_HEAD_IP": "127.0.0.1"},
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    job = out.stdout.strip().split(";")[0]
    info = wait_for(job, env, timeout=300)
    stdout, stderr = open(f"{logs}/{job}.out").read(), open(f"{logs}/{job}.err").read()
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", stdout + stderr[-3000:]
    assert "1 GPUs per node" in stdout
    (record,) = _records(tmp_path)
    assert record["backend"] == "ray" and record["step"] == 2000
