"""A reused --out, bad inputs and third-party noise (issue 34): through the launcher's command line.

- A run into an ``--out`` whose lines were evaluated with other settings is refused in one line naming the
  directory, each setting (then and now) and what to do; ``--append`` means it. Resumes (the same settings) work
  as before, also on results files written before lines carried their ``settings``.
- A bad input creates nothing: no ``--out``, no ``runs/<timestamp>``, no logger tree.
- Quiet by default: Ray's start-up lines and torchrl's VecNormV2 warning only with ``--verbose``; nothing stays
  hidden for code outside the launcher.
"""

from __future__ import annotations

import json
import os
import time

import pytest
from launch_helpers import cli, in_process, read_records, small_suite, write_checkpoints

SMALL = ("--num-envs", "2", "--max-steps", "30")


def suite_of(name: str, noise: float) -> str:
    """The module's suite: a nominal cell and one of action noise `noise`."""
    return small_suite(name, f"noisy: {{action_noise: {noise}}}")


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    """A watched directory of two checkpoints and an unreadable file, training done."""
    directory = tmp_path_factory.mktemp("ckpt")
    write_checkpoints(str(directory), steps=(1000, 2000))
    bad = directory / "step_0001500.pt"
    bad.write_bytes(b"not a checkpoint")
    old = time.time() - 60  # not a file training is still writing
    os.utime(bad, (old, old))
    (directory / "DONE").write_text("")
    return directory


def _refusal(proc, out) -> str:
    """The run's one-line refusal of a reused --out."""
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert line.startswith(f"simeval-launch: error: --out {out} holds results evaluated with other settings: "), line
    assert line.endswith("give another --out, or add --append to write this run's lines beside them."), line
    return line


def test_a_checkpoint_run_into_an_out_of_other_settings_is_refused_and_append_means_it(ckpt, tmp_path):
    out, one = tmp_path / "out", str(ckpt / "step_0001000.pt")
    assert in_process("--checkpoint", one, "--episodes", "4", *SMALL, "--out", str(out)).returncode == 0
    before = (out / "results.jsonl").read_bytes()
    assert json.loads(before)["settings"] == {
        "episodes": 4, "time_budget": None, "num_envs": 2, "max_steps": 30, "seed": 0, "obs_norm": True,
        "policy": None, "policy_kwargs": {},
    }  # fmt: skip

    line = _refusal(in_process("--checkpoint", one, "--episodes", "2", *SMALL, "--out", str(out)), out)
    assert "episodes 4 (now 2)" in line
    line = _refusal(in_process("--checkpoint", one, "--episodes", "4", *SMALL, "--seed", "7", "--out", str(out)), out)
    assert "seed 0 (now 7)" in line and "episodes" not in line
    line = _refusal(in_process("--checkpoint", one, "--episodes", "4", "--num-envs", "4", "--max-steps", "20",
                        "--out", str(out)), out)  # fmt: skip
    assert "num_envs 2 (now 4)" in line and "max_steps 30 (now 20)" in line
    line = _refusal(
        in_process("--checkpoint", one, "--episodes", "4", *SMALL, "--env", "Hopper-v5", "--out", str(out)), out
    )
    assert "env HalfCheetah-v5 (now Hopper-v5)" in line
    line = _refusal(in_process("--checkpoint", one, "--episodes", "4", *SMALL, "--no-obs-norm", "--out", str(out)), out)
    assert "obs_norm true (now false)" in line
    assert (out / "results.jsonl").read_bytes() == before  # nothing was added by a refused run

    # The same settings again, with --again (without it the run says the checkpoint is there): a line beside the first.
    assert in_process("--checkpoint", one, "--episodes", "4", *SMALL, "--out", str(out), "--again").returncode == 0
    proc = in_process("--checkpoint", one, "--episodes", "2", *SMALL, "--out", str(out), "--append")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [r["settings"]["episodes"] for r in read_records(out)] == [4, 4, 2]


def test_a_watch_resume_with_the_same_settings_and_retry_failed_work_as_before(ckpt, tmp_path):
    out = tmp_path / "out"
    common = ("--watch", str(ckpt), "--episodes", "2", *SMALL, "--poll-interval", "0.2", "--out", str(out))
    assert in_process(*common).returncode == 0
    failed = [r for r in read_records(out) if r["status"] == "failed"]
    assert len(failed) == 1 and failed[0]["settings"]["episodes"] == 2  # a failed line says its settings too

    proc = in_process(*common)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "resuming: 3 checkpoint(s) already in" in proc.stdout and "add --retry-failed" in proc.stdout
    proc = in_process(*common, "--retry-failed")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "evaluating them again (--retry-failed)" in proc.stdout
    assert len(read_records(out)) == 4

    proc = in_process(*common, "--retry-failed", "--seed", "1")
    assert "seed 0 (now 1)" in _refusal(proc, out)
    assert len(read_records(out)) == 4


def test_failed_lines_hold_no_numbers_a_run_with_its_settings_fixed_is_not_refused(ckpt, tmp_path):
    out = tmp_path / "out"
    common = ("--watch", str(ckpt), "--episodes", "2", *SMALL, "--poll-interval", "0.2", "--out", str(out))
    assert in_process(*common, "--policy", "launch_helpers:raising_policy").returncode == 0
    assert {r["status"] for r in read_records(out)} == {"failed"}
    proc = in_process(*common, "--retry-failed")  # the policy fixed: its failures evaluated again, with these settings
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [r["status"] for r in read_records(out)].count("ok") == 2


def test_lines_written_before_lines_said_their_settings_resume_without_refusal(ckpt, tmp_path):
    out = tmp_path / "out"
    common = ("--watch", str(ckpt), *SMALL, "--poll-interval", "0.2", "--out", str(out))
    assert in_process(*common, "--episodes", "2").returncode == 0
    records = read_records(out)
    with open(out / "results.jsonl", "w") as f:  # as the launcher wrote them before: no settings
        for record in records:
            record.pop("settings", None)
            f.write(json.dumps(record) + "\n")
    proc = in_process(*common, "--episodes", "4")  # unknown, not different: the resume goes on as before
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "resuming: 3 checkpoint(s) already in" in proc.stdout
    # What old lines do say still counts: the env backend they were evaluated on.
    line = _refusal(in_process(*common, "--episodes", "4", "--env-backend", "gymnasium"), out)
    assert "env_backend native (now gymnasium)" in line


def test_a_suite_into_an_out_of_another_suite_other_conditions_or_a_plain_run_is_refused(ckpt, tmp_path):
    out, one = tmp_path / "out", str(ckpt / "step_0002000.pt")
    suite = tmp_path / "suite.yaml"
    suite.write_text(suite_of("robust", 0.1))
    assert in_process("--suite", str(suite), "--checkpoint", one, "--out", str(out)).returncode == 0
    proc = in_process("--suite", str(suite), "--checkpoint", one, "--out", str(out))  # the same suite again: resumed
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "resuming: 2 cell evaluation(s) already in" in proc.stdout

    suite.write_text(suite_of("robust", 0.3))
    line = _refusal(in_process("--suite", str(suite), "--checkpoint", one, "--out", str(out)), out)
    assert 'condition_settings {"action_noise": 0.1} (now {"action_noise": 0.3})' in line
    other = tmp_path / "other.yaml"
    other.write_text(suite_of("other", 0.1))
    assert "suite robust (now other)" in _refusal(
        in_process("--suite", str(other), "--checkpoint", one, "--out", str(out)), out
    )
    line = _refusal(in_process("--checkpoint", one, "--episodes", "2", *SMALL, "--out", str(out)), out)
    assert "suite robust (now none)" in line
    assert len(read_records(out)) == 2


BAD_INPUTS = {
    "missing checkpoint": ["--checkpoint", "no-such.pt"],
    "typo'd env": ["--checkpoint", "CKPT", "--env", "HalfCheeta-v5"],
    "bad suite key": ["--checkpoint", "CKPT", "--suite", "BAD_SUITE"],
    "typo'd suite env": ["--checkpoint", "CKPT", "--suite", "TYPO_SUITE"],
    "missing watch dir": ["--watch", "no-such-dir"],
}


@pytest.mark.parametrize("given_out", [True, False], ids=["--out", "default out"])
def test_a_bad_input_creates_no_directory(given_out, ckpt, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "bad.yaml").write_text(suite_of("s", 0.1).replace("    conditions:", "    bogus: 1\n    conditions:"))
    (work / "typo.yaml").write_text(suite_of("s", 0.1).replace("HalfCheetah-v5", "HalfCheeta-v5"))
    names = {"CKPT": str(ckpt / "step_0001000.pt"), "BAD_SUITE": "bad.yaml", "TYPO_SUITE": "typo.yaml"}
    for what, args in BAD_INPUTS.items():
        args = [names.get(a, a) for a in args] + (["--out", "out"] if given_out else [])
        proc = cli(*args, cwd=str(work))
        assert proc.returncode == 2 and proc.stderr.startswith("simeval-launch: error: "), (what, proc.stderr)
        assert sorted(os.listdir(work)) == ["bad.yaml", "typo.yaml"], (what, os.listdir(work))
        assert "results:" not in proc.stdout, (what, proc.stdout)


def test_the_logger_and_out_appear_with_the_first_write(ckpt, tmp_path):
    out = tmp_path / "out"
    proc = cli("--checkpoint", str(ckpt / "step_0001500.pt"), *SMALL, "--out", str(out))  # unreadable: exit 2
    assert proc.returncode == 2 and not out.exists(), proc.stderr
    assert (
        cli("--checkpoint", str(ckpt / "step_0001000.pt"), "--episodes", "2", *SMALL, "--out", str(out)).returncode == 0
    )
    assert (out / "logs" / "simeval" / "scalars" / "eval" / "reward.csv").is_file()


VECNORM = "Support of VecNormV2 for"
RAY_LINES = ("Started a local Ray instance", "Token authentication is enabled for this Ray")


def test_known_third_party_warnings_only_with_verbose(ckpt, tmp_path):
    one = str(ckpt / "step_0001000.pt")
    quiet = cli("--checkpoint", one, "--episodes", "2", *SMALL, "--out", str(tmp_path / "a"))
    assert quiet.returncode == 0 and VECNORM not in quiet.stderr, quiet.stderr
    loud = cli("--checkpoint", one, "--episodes", "2", *SMALL, "--out", str(tmp_path / "b"), "--verbose")
    assert loud.returncode == 0 and VECNORM in loud.stderr, loud.stderr


def test_ray_start_up_lines_only_with_verbose(ckpt, tmp_path):
    one, env = str(ckpt / "step_0001000.pt"), {"RAY_ADDRESS": "local"}  # a cluster of its own: what a user sees
    args = ("--checkpoint", one, "--backend", "ray", "--episodes", "2", *SMALL)
    quiet = cli(*args, "--out", str(tmp_path / "a"), env=env)
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert not any(text in quiet.stderr for text in RAY_LINES), quiet.stderr
    loud = cli(*args, "--out", str(tmp_path / "b"), "--verbose", env=env)
    assert loud.returncode == 0, loud.stderr[-2000:]
    assert RAY_LINES[0] in loud.stderr, loud.stderr


def test_the_launcher_hides_nothing_for_code_outside_it(ckpt, tmp_path):
    import logging
    import warnings

    from simeval.launch import main

    names = ("ray._private.worker", "ray._private.authentication.authentication_token_setup")
    loggers = [logging.getLogger(name) for name in names]
    before = (list(warnings.filters), [list(lg.filters) for lg in loggers], os.environ.get("PYTHONWARNINGS"))
    for verbose in ([], ["--verbose"]):
        assert main(["--checkpoint", "no-such.pt", "--out", str(tmp_path / "out"), *verbose]) == 2
    after = (list(warnings.filters), [list(lg.filters) for lg in loggers], os.environ.get("PYTHONWARNINGS"))
    assert after == before
    assert not (tmp_path / "out").exists()
