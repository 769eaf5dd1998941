"""Evaluator(round_timeout_s=...) and --round-timeout: a round that hangs fails, its worker is replaced,
and the next round gives the numbers it gave before.

The hang is real: a policy (a user's policy_factory, trusted code) that blocks in its forward pass in the
middle of a round, on the real native HalfCheetah, on each backend's real worker (a thread, a child
process, a Ray actor on the loopback cluster). Flag files say when it hangs, so a worker built after the
hang (in another process, too) does not hang again; the thread backend's abandoned thread is let go at
the end of the test, so it ends and nothing is left running.
"""

from __future__ import annotations

import functools
import json
import math
import os
import threading
import time

import pytest
from helpers import cheetah, mlp_policy
from launch_helpers import cli, write_checkpoints
from tensordict.nn import TensorDictModule
from torch import nn

from simeval import EvalError, Evaluator

HANG_AT_CALL = 5  # an armed policy hangs at its 5th forward pass: in the middle of a round
HANG_CAP_S = 300.0  # a hang never outlives a broken test by more than this


def _hang_here(flags: str) -> None:
    """Block until ``flags/release`` exists (at most HANG_CAP_S); mark ``flags/hung`` first, so it happens once."""
    open(os.path.join(flags, "hung"), "w").close()
    deadline = time.monotonic() + HANG_CAP_S
    while not os.path.exists(os.path.join(flags, "release")) and time.monotonic() < deadline:
        time.sleep(0.05)


class HangOnce(nn.Module):
    """``net``, except that once ``flags/armed`` exists, its HANG_AT_CALL-th call after that hangs (once for all)."""

    def __init__(self, net: nn.Module, flags: str) -> None:
        super().__init__()
        self.net = net
        self.flags = flags
        self.armed_calls = 0

    def forward(self, observation):
        if os.path.exists(os.path.join(self.flags, "armed")) and not os.path.exists(os.path.join(self.flags, "hung")):
            self.armed_calls += 1
            if self.armed_calls == HANG_AT_CALL:
                _hang_here(self.flags)
        return self.net(observation)


def hang_once_policy(env=None, flags: str = "") -> TensorDictModule:
    """mlp_policy's network (seeded: the same weights every build) behind :class:`HangOnce`."""
    net = mlp_policy(env).module
    return TensorDictModule(HangOnce(net, flags), in_keys=["observation"], out_keys=["action"])


def hanging_actor(env, flags: str, hidden: list = (16,)):
    """The launcher's --policy for the end-to-end test: gaussian_actor, whose HANG_AT_CALL-th call hangs once."""
    from simeval.policies import gaussian_actor

    actor = gaussian_actor(env, hidden=hidden)
    calls = [0]

    def maybe_hang(module, args):
        if not os.path.exists(os.path.join(flags, "hung")):
            calls[0] += 1
            if calls[0] == HANG_AT_CALL:
                _hang_here(flags)

    actor.register_forward_pre_hook(maybe_hang)
    return actor


def _worker_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "simeval-thread-worker"]


def _reference_then_a_hung_round(ev: Evaluator, flags: str) -> tuple[dict, threading.Thread]:
    """A round's result and the thread that ran it; then a round on that thread that hangs and times out (2 s)."""
    reference = ev.evaluate()
    (first,) = _worker_threads()
    open(os.path.join(flags, "armed"), "w").close()
    with pytest.raises(EvalError, match=r"exceeded its 2 s timeout"):
        ev.evaluate()
    return reference, first


def _gone(pid: int, within: float = 15.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not os.path.exists(f"/proc/{pid}"):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("backend", ["thread", "process", "ray"], indirect=True)
def test_a_hung_round_fails_the_worker_is_replaced_and_the_next_round_gives_the_same_numbers(
    backend, tmp_path, no_leaks
):
    flags = str(tmp_path)
    ev = Evaluator(
        functools.partial(cheetah, num_envs=2, max_steps=20),
        policy_factory=functools.partial(hang_once_policy, flags=flags),
        num_trajectories=3,
        seed=0,
        keep_episodes=True,
        backend=backend,
        num_gpus=0,
        busy_policy="queue",
        round_timeout_s=3,
    )
    try:
        reference = ev.evaluate(step=1)  # a worker's first round may also take start_timeout: its start-up
        child = ev._backend._child.proc.pid if backend == "process" else None
        open(os.path.join(flags, "armed"), "w").close()
        start = time.monotonic()
        assert ev.trigger_eval(step=2)  # hangs in its 5th step
        assert ev.trigger_eval(step=3)  # queued behind it: must run on the fresh worker
        with pytest.raises(EvalError) as excinfo:
            ev.wait(120)
        took = time.monotonic() - start
        message = str(excinfo.value)
        assert "exceeded its 3 s timeout (round_timeout_s=3)" in message and "\n" not in message
        assert "round_timeout_s" in message and "--round-timeout" in message
        assert 3.0 <= took < 3.0 + 10.0, took
        assert os.path.exists(os.path.join(flags, "hung"))
        queued = ev.wait(120)
        again = ev.evaluate(step=4)
        assert not ev.pending
    finally:
        open(os.path.join(flags, "release"), "w").close()
        ev.shutdown()
    for result, step in ((queued, 3), (again, 4)):
        assert result["eval/step"] == step
        assert result["eval/episode_returns"].tolist() == reference["eval/episode_returns"].tolist()
        assert result["eval/episode_lengths"].tolist() == reference["eval/episode_lengths"].tolist()
        assert result["eval/reward"] == reference["eval/reward"]
    if backend == "process":
        assert child is not None and _gone(child, within=1.0)  # killed at the timeout, not at shutdown
    if backend == "ray":
        (first,) = reference["eval/workers"]
        (later,) = again["eval/workers"]
        assert first["pid"] != later["pid"] and _gone(first["pid"])


def test_the_thread_backend_abandons_the_stuck_thread_and_runs_on_a_fresh_one(tmp_path, no_leaks):
    flags = str(tmp_path)
    ev = Evaluator(
        functools.partial(cheetah, num_envs=2, max_steps=20),
        policy_factory=functools.partial(hang_once_policy, flags=flags),
        num_trajectories=2,
        seed=0,
        round_timeout_s=2,
    )
    try:
        reference, first = _reference_then_a_hung_round(ev, flags)
        again = ev.evaluate()
        assert again["eval/reward"] == reference["eval/reward"]
        threads = _worker_threads()
        assert first in threads and first.is_alive() and first.daemon  # still stuck in the policy: abandoned
        assert len(threads) == 2  # and a fresh one ran the round
    finally:
        open(os.path.join(flags, "release"), "w").close()
        ev.shutdown()
    first.join(10)
    assert not first.is_alive()  # once let go, it sees it was stopped and ends


def test_with_instances_passed_in_rounds_fail_at_once_until_the_stuck_thread_lets_go(tmp_path, no_leaks):
    """The fresh worker needs the caller's env and policy back: not while the abandoned thread still runs in them."""
    flags = str(tmp_path)
    env = cheetah(num_envs=2, max_steps=20)
    policy = hang_once_policy(flags=flags)
    ev = Evaluator(env, policy, num_trajectories=2, seed=0, keep_episodes=True, round_timeout_s=2)
    try:
        reference, first = _reference_then_a_hung_round(ev, flags)
        start = time.monotonic()
        with pytest.raises(EvalError, match=r"still running in the env and policy you passed; pass an env factory"):
            ev.evaluate()
        assert time.monotonic() - start < 2.0
        open(os.path.join(flags, "release"), "w").close()
        first.join(10)
        assert not first.is_alive()
        assert ev.evaluate()["eval/episode_returns"].tolist() == reference["eval/episode_returns"].tolist()
    finally:
        open(os.path.join(flags, "release"), "w").close()
        ev.shutdown()
        env.close()


def test_a_round_shorter_than_the_timeout_is_untouched_and_the_timer_ends_with_it(no_leaks):
    ev = Evaluator(
        functools.partial(cheetah, num_envs=2, max_steps=10), policy_factory=mlp_policy, num_trajectories=2, seed=0,
        round_timeout_s=60,
    )  # fmt: skip
    try:
        for _ in range(3):
            assert ev.evaluate()["eval/num_episodes"] == 2
        deadline = time.monotonic() + 5.0  # a cancelled timer's thread ends a moment after the round
        while [t for t in threading.enumerate() if t.name == "simeval-round-timer"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [t for t in threading.enumerate() if t.name == "simeval-round-timer"]
    finally:
        ev.shutdown()


@pytest.mark.parametrize("value", [0, -1, float("nan"), True, "5", [5]])
def test_round_timeout_s_must_be_seconds_above_zero(value):
    with pytest.raises(ValueError, match=r"^round_timeout_s must be .*math\.inf.*got") as excinfo:
        Evaluator(cheetah, policy_factory=mlp_policy, round_timeout_s=value)
    assert "\n" not in str(excinfo.value)


def test_math_inf_and_none_are_accepted():
    from simeval.caller.round_timeout import RoundClock, check_round_timeout

    check_round_timeout(None)
    check_round_timeout(math.inf)
    check_round_timeout(0.5)
    assert RoundClock(math.inf, start_timeout=120, max_steps=100).start_round(10) is None


def test_the_default_rule():
    from simeval.caller.round_timeout import FIRST_ROUND_S, FLOOR_S, SLACK, default_round_timeout

    assert (FIRST_ROUND_S, FLOOR_S, SLACK) == (3600.0, 600.0, 20.0)
    assert default_round_timeout(None, waves=1, episode_steps=1000) == 3600.0  # nothing measured yet
    assert default_round_timeout(0.001, waves=2, episode_steps=1000) == 600.0  # 2 s expected: the floor
    assert default_round_timeout(0.05, waves=4, episode_steps=1000) == pytest.approx(20 * 0.05 * 4 * 1000)


def _raw(seconds: float, steps_per_env: int, num_envs: int = 4, lengths=(100,)) -> dict:
    return {"seconds": seconds, "frame_count": steps_per_env * num_envs, "num_envs": num_envs,
            "num_episodes": len(lengths), "episode_lengths": list(lengths)}  # fmt: skip


def test_the_clock_adds_start_timeout_to_a_fresh_workers_round_and_learns_the_step_time():
    from simeval.caller.round_timeout import RoundClock

    clock = RoundClock(None, start_timeout=120, max_steps=1000)
    first = clock.start_round(8)
    assert first.seconds == 3600 + 120 and "start_timeout" in first.message
    clock.finished(_raw(seconds=200.0, steps_per_env=2000))  # 0.1 s per step of all sub-envs
    second = clock.start_round(8)  # 2 waves of 4 sub-envs, up to 1000 steps each: 200 s expected
    assert second.seconds == pytest.approx(20 * 0.1 * 2 * 1000)
    assert "round_timeout_s" in second.message and "\n" not in second.message
    third = clock.start_round(8)  # the second never finished: the third may be on a fresh worker
    assert third.seconds == pytest.approx(20 * 0.1 * 2 * 1000 + 120)


def test_without_max_steps_the_clock_uses_the_longest_episode_seen():
    from simeval.caller.round_timeout import RoundClock

    clock = RoundClock(None, start_timeout=0.0, max_steps=None)
    clock.start_round(4)
    clock.finished(_raw(seconds=60.0, steps_per_env=600, lengths=(300, 500)))  # 0.1 s per step
    clock.start_round(4)
    clock.finished(_raw(seconds=30.0, steps_per_env=300, lengths=(200,)))  # shorter episodes: 500 stays
    assert clock.start_round(8).seconds == pytest.approx(20 * 0.1 * 2 * 500)


def test_an_explicit_timeout_gets_start_timeout_only_on_a_fresh_workers_round():
    from simeval.caller.round_timeout import RoundClock

    clock = RoundClock(5.0, start_timeout=30.0, max_steps=100)
    assert clock.start_round(None).seconds == 35.0
    clock.finished(_raw(seconds=1.0, steps_per_env=100))
    deadline = clock.start_round(None)
    assert deadline.seconds == 5.0
    assert deadline.message.startswith("evaluation round exceeded its 5 s timeout (round_timeout_s=5)")


@pytest.mark.parametrize("value", ["0", "-2", "inf", "nan"])
def test_the_launcher_flag_is_checked(value, tmp_path):
    from simeval.launch.cli import parse
    from simeval.launch.config import ConfigError

    message = r"^--round-timeout must be a finite number of seconds > 0 \(leave it out for the default rule\)"
    with pytest.raises(ConfigError, match=message):
        parse(["--checkpoint", "x.pt", "--round-timeout", value])
    assert parse(["--checkpoint", "x.pt", "--round-timeout", "2.5"]).cfg.round_timeout == 2.5
    assert parse(["--checkpoint", "x.pt"]).cfg.round_timeout is None


@pytest.mark.parametrize("mode", ["watch", "checkpoint"])
def test_launcher_round_timeout_end_to_end(mode, tmp_path):
    """--watch: the hung checkpoint is a failed line and the next one is evaluated; --checkpoint: one line, exit 2."""
    ckpts = tmp_path / "ckpts"
    ckpts.mkdir()
    paths = write_checkpoints(str(ckpts), steps=(1000, 2000))
    flags = tmp_path / "flags"
    flags.mkdir()
    out = tmp_path / "out"
    source = ("--watch", str(ckpts)) if mode == "watch" else ("--checkpoint", paths[0])
    args = [
        *source, "--out", str(out), "--episodes", "2", "--num-envs", "2", "--max-steps", "30",
        "--policy", "test_round_timeout:hanging_actor", "--policy-kwargs", json.dumps({"flags": str(flags)}),
        "--round-timeout", "3", "--start-timeout", "5",
    ]  # fmt: skip
    if mode == "watch":
        args += ["--until-step", "2000"]
    start = time.monotonic()
    try:
        proc = cli(*args, timeout=120)
    finally:
        (flags / "release").write_text("")
    assert time.monotonic() - start < 90
    assert (flags / "hung").exists()
    timed_out = "evaluation round exceeded its 8 s timeout (round_timeout_s=3 + start_timeout=5"
    if mode == "checkpoint":
        assert proc.returncode == 2, proc.stderr[-2000:]
        (line,) = [line for line in proc.stderr.splitlines() if line.startswith("simeval-launch:")]
        assert line.startswith(f"simeval-launch: error: {paths[0]}: {timed_out}"), line
        return
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line) for line in open(out / "results.jsonl") if line.strip()]
    assert [(r["step"], r["status"]) for r in records] == [(1000, "failed"), (2000, "ok")]
    assert records[0]["error"].startswith(timed_out), records[0]
