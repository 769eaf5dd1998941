"""Section 7: failures surface as EvalError, clear `pending`, and never wedge the evaluator."""

from __future__ import annotations

import functools
import logging
import os
import threading
import time

import pytest
from helpers import const_policy, count_env, env_factory_that_fails, failing_metrics

from simeval import EvalError, Evaluator


def _exploding_env():
    return count_env(lengths=(3,), fail_at_step=5)


def assert_fails_on_every_path(ev: Evaluator, type_name: str, message: str) -> None:
    """evaluate(), wait() and poll() each raise the worker's error; pending is cleared each time."""
    with pytest.raises(EvalError) as excinfo:
        ev.evaluate()
    err = excinfo.value
    assert type_name in str(err) and message in str(err)
    assert "Traceback" in err.remote_traceback and message in err.remote_traceback
    assert not ev.pending
    ev.trigger_eval()
    with pytest.raises(EvalError, match=message):
        ev.wait(120)
    assert not ev.pending
    ev.trigger_eval()
    deadline = time.time() + 120
    with pytest.raises(EvalError, match=message):
        while time.time() < deadline:
            ev.poll(timeout=0.2)
    assert not ev.pending


def _env_until_healed(healed: str):
    """Explodes mid-round until the file ``healed`` exists (read each time the env is built)."""
    return count_env(lengths=(3,)) if os.path.exists(healed) else _exploding_env()


def test_env_exception_surfaces_and_the_evaluator_recovers(backend, tmp_path):
    healed = tmp_path / "healed"
    ev = Evaluator(
        functools.partial(_env_until_healed, str(healed)),
        policy_factory=const_policy,
        num_trajectories=4,
        backend=backend,
    )
    try:
        assert_fails_on_every_path(ev, "ValueError", "CountEnv exploded on purpose")
        healed.write_text("")
        assert ev.evaluate()["eval/reward"] == 3.0  # the failed env was thrown away and rebuilt
    finally:
        ev.shutdown()


def test_policy_exception_surfaces(backend):
    def bad_policy_factory(env):
        policy = const_policy()
        policy.module.forward = lambda observation: (_ for _ in ()).throw(ZeroDivisionError("policy divided by zero"))
        return policy

    ev = Evaluator(count_env, policy_factory=bad_policy_factory, num_trajectories=1, backend=backend)
    try:
        assert_fails_on_every_path(ev, "ZeroDivisionError", "policy divided by zero")
    finally:
        ev.shutdown()


def test_metrics_fn_exception_surfaces(backend):
    ev = Evaluator(
        count_env, policy_factory=const_policy, num_trajectories=1, metrics_fn=failing_metrics, backend=backend
    )
    try:
        assert_fails_on_every_path(ev, "KeyError", "metrics_fn could not find")
    finally:
        ev.shutdown()


def test_worker_start_up_failure_surfaces(backend):
    ev = Evaluator(env_factory_that_fails, policy_factory=const_policy, num_trajectories=1, backend=backend)
    try:
        assert_fails_on_every_path(ev, "RuntimeError", "env factory refused to build")
    finally:
        ev.shutdown()


def _dying_env():
    return count_env(lengths=(3,), exit_at_step=4)


@pytest.mark.parametrize("backend", ["process", "ray"], indirect=True)
def test_dead_worker_is_reported_within_seconds_and_replaced(backend, tmp_path):
    """The process backend reports the death and replaces the child; Ray re-runs the round on a fresh actor."""
    flag = tmp_path / "died-once"

    def env_once():
        if not flag.exists():
            flag.write_text("x")
            return _dying_env()
        return count_env(lengths=(3,))

    ev = Evaluator(env_once, policy_factory=const_policy, num_trajectories=2, backend=backend)
    try:
        start = time.monotonic()
        if backend == "ray":
            result = ev.evaluate()
            assert result["eval/reward"] == 3.0 and result["eval/workers"][0]["restarts"] == 1
        else:
            with pytest.raises(EvalError, match="died|exit|actor"):
                ev.evaluate()
        assert time.monotonic() - start < 60
        assert not ev.pending
        assert ev.evaluate()["eval/reward"] == 3.0  # a fresh worker took over
    finally:
        ev.shutdown()


def test_a_ray_worker_that_keeps_dying_fails_the_round_after_max_restarts(ray_cluster):
    ev = Evaluator(
        _dying_env, policy_factory=const_policy, num_trajectories=2, backend="ray", num_gpus=0, max_restarts=1
    )
    try:
        start = time.monotonic()
        with pytest.raises(EvalError, match=r"Ray eval worker 0 of 1 .*died 2 time\(s\).*max_restarts=1"):
            ev.evaluate()
        assert time.monotonic() - start < 60
        assert not ev.pending
    finally:
        ev.shutdown()


def test_wait_with_nothing_pending_returns_none_at_once():
    ev = Evaluator(count_env, const_policy(), num_trajectories=1)
    try:
        start = time.monotonic()
        assert ev.wait() is None
        assert time.monotonic() - start < 1.0
        assert ev.poll() is None
    finally:
        ev.shutdown()


def test_unschedulable_ray_actor_fails_after_start_timeout(ray_cluster):
    ev = Evaluator(
        count_env,
        policy_factory=const_policy,
        num_trajectories=1,
        backend="ray",
        num_gpus=0,
        start_timeout=3,
        ray_kwargs={"resources": {"simeval_absent": 1}},  # a resource no node has: never scheduled
    )
    try:
        start = time.monotonic()
        ev.trigger_eval()
        with pytest.raises(EvalError, match="did not start within 3 s.*simeval_absent"):
            ev.wait(60)
        assert time.monotonic() - start < 30
        assert not ev.pending
    finally:
        ev.shutdown()


def test_on_result_exception_is_logged_and_evaluation_goes_on(caplog):
    def bad_callback(result):
        raise RuntimeError("logger is down")

    ev = Evaluator(count_env, const_policy(), num_trajectories=1, on_result=bad_callback)
    try:
        with caplog.at_level(logging.ERROR, logger="simeval.caller.evaluator"):
            assert ev.evaluate()["eval/reward"] == 3.0
            ev.trigger_eval()
            assert ev.wait(60)["eval/reward"] == 3.0
    finally:
        ev.shutdown()
    assert "on_result callback failed" in caplog.text
    assert "logger is down" in caplog.text


def _hanging_env():
    time.sleep(3600)


def test_process_worker_stuck_at_start_fails_after_start_timeout(no_leaks):
    ev = Evaluator(_hanging_env, policy_factory=const_policy, num_trajectories=1, backend="process", start_timeout=3)
    try:
        start = time.monotonic()
        with pytest.raises(EvalError, match="did not start within 3 s"):
            ev.evaluate()
        assert time.monotonic() - start < 30
        assert not ev.pending
    finally:
        ev.shutdown()


def _dies_once(flag: str):
    if not os.path.exists(flag):
        open(flag, "w").close()
        return _dying_env()
    return count_env(lengths=(3,))


def _fails_to_build_once(flag: str):
    if not os.path.exists(flag):
        open(flag, "w").close()
        raise RuntimeError("first build failed on purpose")
    return count_env(lengths=(3,))


@pytest.mark.parametrize("factory", [_dies_once, _fails_to_build_once])
def test_a_request_queued_behind_a_dead_process_worker_runs_on_a_fresh_one(factory, tmp_path, no_leaks):
    """The next request is launched from the reader thread that saw the child die: it must not join itself."""
    ev = Evaluator(
        functools.partial(factory, str(tmp_path / "once")),
        policy_factory=const_policy,
        num_trajectories=1,
        backend="process",
        busy_policy="queue",
    )
    try:
        assert ev.trigger_eval(const_policy(w=1.0), step=1)
        assert ev.trigger_eval(const_policy(w=2.0), step=2)  # queued behind the round that fails
        with pytest.raises(EvalError, match="died|first build failed"):
            ev.wait(120)
        result = ev.wait(120)
        assert (result["eval/step"], result["eval/reward"]) == (2, 6.0)
        assert not ev.pending
    finally:
        ev.shutdown()


def test_a_request_sent_after_the_child_ended_fails_at_once():
    """The window between the reader's last word and the next send: nobody else would complete the future."""
    from concurrent.futures import Future

    ev = Evaluator(count_env, policy_factory=const_policy, num_trajectories=1, backend="process")
    try:
        child = ev._backend._child
        child.proc.kill()
        child.reader.join(30)
        assert child.ended
        future = Future()
        child.send(("eval", 0, None, None), future)
        with pytest.raises(EvalError, match="died"):
            future.result(timeout=5)
        assert ev.evaluate(const_policy(w=2.0))["eval/reward"] == 6.0  # the backend replaces it
    finally:
        ev.shutdown()


def _refuses_to_build(payload: bytes):
    """Fails at start-up; ``payload`` makes the set-up sent to each child larger than a socket buffer."""
    raise RuntimeError(f"env factory refused to build ({len(payload)} byte config)")


def _failed_before_any_request(ev: Evaluator) -> None:
    """Wait until the evaluator's first child reported its start-up failure and ended, with no request to tell."""
    child = ev._backend._child
    child.reader.join(120)
    assert child.ended and child.fatal is not None and not child.fatal_reported


def _unstick(ev: Evaluator, stuck: bool) -> None:
    """Shut ``ev`` down; after a deadlock, first free the lock its start() waits on (shutdown needs it too)."""
    if stuck:
        ev._backend._gate.release()
    ev.shutdown()


def test_a_request_queued_behind_an_unseen_start_up_failure_runs_instead_of_deadlocking(no_leaks):
    """The next request fails inside start() with the failure no request saw; the request queued behind it is
    launched from that failure's callback, on the same thread: start() must not still hold its lock then."""
    ev = Evaluator(
        functools.partial(_refuses_to_build, b"x" * (8 << 20)),
        policy_factory=const_policy,
        num_trajectories=1,
        backend="process",
        busy_policy="queue",
    )
    stuck = False
    try:
        _failed_before_any_request(ev)
        # Two callers at once: one starts (replacing the failed child takes a while: the fresh child
        # must read its set-up), the other is queued behind it.
        barrier = threading.Barrier(2)
        callers = [threading.Thread(target=lambda: (barrier.wait(), ev.trigger_eval()), daemon=True) for _ in "ab"]
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join(60)
        stuck = any(caller.is_alive() for caller in callers)
        assert not stuck, "trigger_eval() never returned: the backend deadlocked starting the queued request"
        for _ in callers:
            with pytest.raises(EvalError, match="failed to start: RuntimeError: env factory refused to build"):
                ev.wait(120)
        assert not ev.pending
    finally:
        _unstick(ev, stuck)


def test_a_future_the_process_backend_completes_in_start_may_start_the_next_request():
    """As the request queue does: the first future's done-callback starts the next request on the same thread."""
    from concurrent.futures import Future

    ev = Evaluator(env_factory_that_fails, policy_factory=const_policy, num_trajectories=1, backend="process")
    backend = ev._backend
    stuck = False
    try:
        _failed_before_any_request(ev)
        first, second = Future(), Future()
        first.add_done_callback(lambda _: backend.start(2, None, second))
        starter = threading.Thread(target=backend.start, args=(1, None, first), daemon=True)
        starter.start()
        starter.join(60)
        stuck = starter.is_alive()
        assert not stuck, "start() never returned: the callback it ran could not start the next request"
        with pytest.raises(EvalError, match="failed to start: RuntimeError: env factory refused to build"):
            first.result(timeout=0)
        with pytest.raises(EvalError, match="failed to start: RuntimeError: env factory refused to build"):
            second.result(timeout=120)  # the fresh child failed too, and said so to the request it was given
    finally:
        _unstick(ev, stuck)


def test_connect_to_an_actor_that_never_starts_fails_within_start_timeout(ray_cluster):
    import simeval

    ev = Evaluator(
        count_env,
        policy_factory=const_policy,
        num_trajectories=1,
        backend="ray",
        num_gpus=0,
        start_timeout=60,
        ray_kwargs={"name": "simeval-test-stuck", "resources": {"simeval_absent": 1}},
    )
    try:
        start = time.monotonic()
        with pytest.raises(EvalError, match="did not start within 3 s"):
            simeval.connect("simeval-test-stuck", start_timeout=3)
        assert time.monotonic() - start < 30
    finally:
        ev.shutdown()
