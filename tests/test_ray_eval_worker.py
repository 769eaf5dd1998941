"""simeval.RayEvalWorker: torchrl's RayEvalWorker API on simeval's Ray backend."""

from __future__ import annotations

import functools
import inspect
import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from helpers import const_policy, count_env, env_factory_that_fails, mlp_policy
from tensordict import TensorDict

from simeval import EvalError, RayEvalWorker

pytestmark = pytest.mark.ray
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _weights(policy) -> TensorDict:
    return TensorDict.from_module(policy).data.detach().cpu()  # what torchrl's docs tell users to send


def _poll(worker, timeout: float = 120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        result = worker.poll(timeout=0.5)
        if result is not None:
            return result
    raise AssertionError("no result in time")


def test_signature_is_torchrls():
    from torchrl.collectors.distributed import RayEvalWorker as TorchRLWorker

    for method in ("__init__", "submit", "poll", "shutdown"):
        ours = inspect.signature(getattr(RayEvalWorker, method)).parameters
        theirs = inspect.signature(getattr(TorchRLWorker, method)).parameters
        for name, param in theirs.items():
            assert name in ours, (method, name)
            assert (ours[name].kind, ours[name].default) == (param.kind, param.default), (method, name)
    ours = inspect.signature(RayEvalWorker.from_name).parameters
    assert list(ours)[:2] == ["name", "reward_keys"]


def _parity_env(lengths):
    return count_env(lengths=lengths, reward_sum=False)


def _parity_policy(env):
    return mlp_policy(obs_dim=1, act_dim=1, hidden=8)


@pytest.mark.parametrize(
    "lengths, max_steps, break_when_any_done",
    [((3, 7), 20, True), ((20, 30), 10, False), ((20, 30), 10, True)],
)
def test_reward_is_torchrls_figure_and_episode_reward_the_true_return(
    ray_cluster, lengths, max_steps, break_when_any_done
):
    """Same env, same weights: ``reward`` equals torchrl's RayEvalWorker's; episode_reward is the mean return."""
    from torchrl.collectors.distributed import RayEvalWorker as TorchRLWorker

    env_maker = functools.partial(_parity_env, lengths)
    weights = _weights(mlp_policy(obs_dim=1, act_dim=1, hidden=8, seed=3))
    results = {}
    # torchrl's actor does not get the driver's sys.path (simeval's does): give it the tests' modules.
    path = {"env_vars": {"PYTHONPATH": os.pathsep.join([os.path.join(REPO, "tests"), REPO])}}
    for name, cls in (("simeval", RayEvalWorker), ("torchrl", TorchRLWorker)):
        worker = cls(None, env_maker, _parity_policy, num_gpus=0, runtime_env=path)
        try:
            worker.submit(weights, max_steps, break_when_any_done=break_when_any_done)
            results[name] = _poll(worker)
        finally:
            worker.shutdown()
    ours, theirs = results["simeval"], results["torchrl"]
    assert ours["reward"] == pytest.approx(theirs["reward"], rel=1e-5)
    assert ours["frames"] is None and theirs["frames"] is None
    # The correct figures beside it: one complete episode per sub-env, capped at max_steps.
    policy = _parity_policy(None)
    policy.load_state_dict(dict(weights.flatten_keys(".").items()))
    with torch.no_grad():
        per_step = policy.module(torch.arange(max(lengths), dtype=torch.float32).unsqueeze(-1)).squeeze(-1)
    returns = [float(per_step[: min(n, max_steps)].sum()) for n in lengths]
    assert ours["num_episodes"] == len(lengths)
    assert ours["episode_reward"] == pytest.approx(sum(returns) / len(returns), rel=1e-5)
    assert ours["episode_length"] == sum(min(n, max_steps) for n in lengths) / len(lengths)
    assert ours["episode_reward_ci_low"] <= ours["episode_reward"] <= ours["episode_reward_ci_high"]


def test_every_submit_is_kept_and_polled_in_order(ray_cluster):
    worker = RayEvalWorker(None, functools.partial(count_env, lengths=(3, 5)), const_policy, num_gpus=0)
    try:
        assert worker.poll() is None  # nothing submitted
        worker.submit(_weights(const_policy(w=1.0)), 50)
        worker.submit(_weights(const_policy(w=2.0)), 50)  # torchrl would drop the first result
        assert worker.pending
        first, second = _poll(worker), _poll(worker)
        assert worker.poll(timeout=0) is None and not worker.pending
        worker.submit(None, 2)  # no weights: the last ones; max_steps caps this round's episodes
        third = _poll(worker)
    finally:
        worker.shutdown()
    assert (first["episode_reward"], first["reward"], first["num_episodes"]) == (4.0, 1.0, 2)
    assert (second["episode_reward"], second["reward"]) == (8.0, 2.0)
    assert (third["episode_reward"], third["episode_length"]) == (4.0, 2.0)


def test_bad_max_steps_is_refused(ray_cluster):
    worker = RayEvalWorker(None, count_env, const_policy, num_gpus=0)
    try:
        for bad in (0, -3, 2.5, None):
            with pytest.raises(ValueError, match="max_steps must be a positive int"):
                worker.submit(_weights(const_policy()), bad)
    finally:
        worker.shutdown()


def _rendering_cheetah(render: bool):
    from simeval.envs import make_env

    return make_env("HalfCheetah-v5", num_envs=2, obs_norm=False, render=render, seed=0)


def _cheetah_policy(env):
    return mlp_policy(obs_dim=17, act_dim=6)


@pytest.mark.parametrize("render", [True, False])
def test_frames_come_from_a_rendering_env_only(ray_cluster, render):
    worker = RayEvalWorker(
        None,
        functools.partial(_rendering_cheetah, render),
        _cheetah_policy,
        num_gpus=0,
        runtime_env={"env_vars": {"MUJOCO_GL": "egl"}},
    )
    try:
        worker.submit(_weights(mlp_policy()), 5)
        result = _poll(worker, 240)
    finally:
        worker.shutdown()
    if not render:
        assert result["frames"] is None
        return
    frames = result["frames"]
    assert frames.dtype == torch.uint8 and frames.shape == (1, 6, 3, 240, 240)  # reset frame + 5 steps
    assert frames.float().std() > 0 and not torch.equal(frames[0, 0], frames[0, -1])  # the cheetah moved


def test_init_fn_runs_first_in_the_actor(ray_cluster):
    worker = RayEvalWorker("torchfree_init:torch_free_init", count_env, const_policy, num_gpus=0)
    try:
        worker.submit(_weights(const_policy(w=3.0)), 10)
        assert _poll(worker)["episode_reward"] == 9.0
    finally:
        worker.shutdown()


def _policy_that_raises(env):
    policy = const_policy()
    policy.module.forward = lambda observation: (_ for _ in ()).throw(ZeroDivisionError("policy divided by zero"))
    return policy


def _dies_once(flag: str):
    if not os.path.exists(flag):
        open(flag, "w").close()
        return count_env(lengths=(3,), exit_at_step=2)
    return count_env(lengths=(3,))


def _first_round_fails(worker: RayEvalWorker, match: str) -> None:
    try:
        worker.submit(None, 10)
        with pytest.raises(EvalError, match=match):
            _poll(worker)
    finally:
        worker.shutdown()


def test_failures_are_raised_from_poll_and_the_worker_recovers(ray_cluster, tmp_path):
    _first_round_fails(
        RayEvalWorker(None, env_factory_that_fails, const_policy, num_gpus=0), "env factory refused to build"
    )
    _first_round_fails(RayEvalWorker(None, count_env, _policy_that_raises, num_gpus=0), "policy divided by zero")
    dying = RayEvalWorker(None, functools.partial(_dies_once, str(tmp_path / "died")), const_policy, num_gpus=0)
    try:
        dying.submit(_weights(const_policy(w=1.0)), 10)
        start = time.monotonic()
        # the actor's death is detected, not waited on, and the round re-run on a fresh actor
        assert _poll(dying)["episode_reward"] == 3.0
        assert time.monotonic() - start < 60
        dying.submit(_weights(const_policy(w=2.0)), 10)
        assert _poll(dying)["episode_reward"] == 6.0
    finally:
        dying.shutdown()


def test_unschedulable_worker_fails_from_poll(ray_cluster):
    worker = RayEvalWorker(None, count_env, const_policy, num_gpus=0, start_timeout=3, resources={"simeval_absent": 1})
    try:
        worker.submit(None, 5)
        start = time.monotonic()
        with pytest.raises(EvalError, match="did not start within 3 s.*simeval_absent"):
            _poll(worker, 60)
        assert time.monotonic() - start < 30
    finally:
        worker.shutdown()


FROM_NAME = textwrap.dedent(
    """
    import os, sys, time
    sys.path.insert(0, {tests!r})
    import ray
    ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False)
    from tensordict import TensorDict
    from helpers import const_policy
    from simeval import RayEvalWorker
    worker = RayEvalWorker.from_name("simeval-test-worker")
    worker.submit(TensorDict.from_module(const_policy(w=5.0)).data, 50)
    deadline = time.time() + 120
    result = None
    while result is None and time.time() < deadline:
        result = worker.poll(timeout=1)
    print("RESULT", result["episode_reward"], result["reward"])
    try:
        RayEvalWorker.from_name("simeval-test-worker", reward_keys=("next", "other"))
    except ValueError as exc:
        print("REFUSED", exc)
    """
)


def test_from_name_reaches_the_worker_from_another_process_and_shutdown_kills_it(ray_cluster, tmp_path):
    worker = RayEvalWorker(
        None, functools.partial(count_env, lengths=(3,)), const_policy, num_gpus=0, name="simeval-test-worker"
    )
    try:
        worker.submit(_weights(const_policy(w=1.0)), 50)
        assert _poll(worker)["episode_reward"] == 3.0
        script = tmp_path / "other.py"
        script.write_text(FROM_NAME.format(tests=os.path.join(REPO, "tests")))
        out = subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            timeout=240,
            env=dict(os.environ, PYTHONPATH=REPO, RAY_ADDRESS=ray_cluster.get_runtime_context().gcs_address),
        )
        assert out.returncode == 0, out.stderr[-3000:]
        assert "RESULT 15.0 5.0" in out.stdout
        assert "REFUSED" in out.stdout and "built with reward_keys=('next', 'reward')" in out.stdout
        worker.submit(_weights(const_policy(w=2.0)), 50)  # the handle in the other process did not stop it
        assert _poll(worker)["episode_reward"] == 6.0
    finally:
        worker.shutdown()
    with pytest.raises(ValueError, match="no simeval evaluator named 'simeval-test-worker'"):
        RayEvalWorker.from_name("simeval-test-worker")
