"""Section 2: the seed's constructor, methods, result keys and busy policies."""

from __future__ import annotations

import functools
import inspect
import time

import pytest
import torch
from helpers import ConstPolicy, cheetah, const_policy, count_env, mlp_policy
from tensordict import TensorDict

from simeval import Evaluator

SEED_KEYWORDS = {
    "policy": None,
    "policy_factory": None,
    "num_trajectories": 10,
    "max_steps": None,
    "frames_per_batch": None,
    "collector_cls": None,
    "collector_kwargs": None,
    "weight_sync_schemes": None,
    "log_prefix": "eval",
    "reward_keys": ("next", "reward"),
    "done_keys": ("next", "done"),
    "device": None,
    "metrics_fn": None,
    "dump_video": True,
    "on_result": None,
    "busy_policy": "error",
    "backend": "thread",
    "init_fn": None,
    "num_gpus": 1,
    "ray_kwargs": None,
}


def test_constructor_keeps_the_seed_keywords_and_defaults():
    params = inspect.signature(Evaluator).parameters
    assert list(params)[0] == "env"
    for name, default in SEED_KEYWORDS.items():
        assert name in params, name
        assert params[name].default == default, name
    from torchrl.envs.utils import ExplorationType

    assert ExplorationType[params["exploration_type"].default] is ExplorationType.DETERMINISTIC
    for extra, default in {"seed": None, "start_timeout": 120.0, "keep_episodes": False}.items():
        assert params[extra].default == default


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(backend="gpu"), "Unknown backend 'gpu'. Choose 'thread', 'process', or 'ray'."),
        (dict(busy_policy="drop"), "Unknown busy_policy 'drop'"),
        (dict(policy_factory=const_policy), "Provide either `policy` or `policy_factory`, not both."),
        (dict(policy=None), "Either `policy` or `policy_factory` must be provided."),
    ],
)
def test_bad_arguments_give_the_seed_messages(kwargs, message):
    args = dict(policy=const_policy())
    args.update(kwargs)
    policy = args.pop("policy")
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        Evaluator(count_env, policy, **args)


@pytest.mark.parametrize("backend", ["process", "ray"])
def test_remote_backends_need_a_callable_env_and_a_policy_factory(backend):
    env = count_env()
    with pytest.raises(ValueError, match="requires `env` to be a callable"):
        Evaluator(env, policy_factory=const_policy, backend=backend)
    with pytest.raises(ValueError, match="requires `policy_factory`"):
        Evaluator(count_env, const_policy(), backend=backend)


def test_result_keys_are_the_seeds_plus_ci_and_all_scalars():
    seen = []
    ev = Evaluator(
        functools.partial(cheetah, 2),
        policy_factory=mlp_policy,
        num_trajectories=4,
        max_steps=20,
        metrics_fn=lambda td: {"mean_action": td["action"][td["collector", "mask"]].mean()},
        on_result=seen.append,
    )
    try:
        result = ev.evaluate(mlp_policy(), step=7)
    finally:
        ev.shutdown()
    expected = {
        "eval/reward",
        "eval/reward_std",
        "eval/num_episodes",
        "eval/episode_length",
        "eval/fps",
        "eval/step",
        "eval/reward_ci_low",
        "eval/reward_ci_high",
        "eval/mean_action",
        "eval/frame_count",
    }
    assert expected <= set(result)
    assert result["eval/step"] == 7 and result["eval/num_episodes"] == 4
    assert result["eval/episode_length"] == 20
    assert result["eval/reward_ci_low"] <= result["eval/reward"] <= result["eval/reward_ci_high"]
    # on_result gets the same metrics as a flat TensorDict; the guide's .item() idiom works.
    (td,) = seen
    assert isinstance(td, TensorDict)
    plain = {k: v.item() for k, v in td.items()}
    assert plain["eval/reward"] == pytest.approx(result["eval/reward"])
    assert set(plain) == set(result)


def test_keep_episodes_adds_per_episode_tensors():
    ev = Evaluator(
        count_env, policy_factory=functools.partial(const_policy, w=2.0), num_trajectories=3, keep_episodes=True
    )
    try:
        result = ev.evaluate()
    finally:
        ev.shutdown()
    assert torch.equal(result["eval/episode_returns"], torch.tensor([6.0, 6.0, 6.0], dtype=torch.float64))
    assert torch.equal(result["eval/episode_lengths"], torch.tensor([3, 3, 3]))


def test_log_prefix_and_step_counter():
    ev = Evaluator(count_env, const_policy(), num_trajectories=1, log_prefix="val")
    try:
        first, second = ev.evaluate(), ev.evaluate()
    finally:
        ev.shutdown()
    assert (first["val/step"], second["val/step"]) == (0, 1)


def test_weights_as_module_or_tensordict_give_the_same_result():
    ev = Evaluator(count_env, const_policy(w=0.0), num_trajectories=2)
    try:
        trained = const_policy(w=5.0)
        from_module = ev.evaluate(trained)["eval/reward"]
        from_td = ev.evaluate(TensorDict.from_module(trained).data)["eval/reward"]
        from_extract = ev.evaluate(Evaluator.extract_weights(trained))["eval/reward"]
        from_dict = ev.evaluate(weights_dict={"policy": trained})["eval/reward"]
    finally:
        ev.shutdown()
    assert from_module == from_td == from_extract == from_dict == 15.0


def test_weights_that_do_not_fit_fail_clearly():
    ev = Evaluator(count_env, const_policy(), num_trajectories=1)
    try:
        wrong = TensorDict({"module": {"w": torch.ones(3)}})
        with pytest.raises(Exception, match="do not fit the eval module.*shape mismatch"):
            ev.evaluate(wrong)
        assert not ev.pending
        assert ev.evaluate()["eval/num_episodes"] == 1
    finally:
        ev.shutdown()


def _slow_env():
    return count_env(lengths=(400,))


def test_busy_policy_error_raises_on_second_trigger():
    ev = Evaluator(_slow_env, policy_factory=const_policy, num_trajectories=4)
    try:
        assert ev.trigger_eval(const_policy(w=1.0)) is True
        with pytest.raises(RuntimeError, match="Evaluation already pending"):
            ev.trigger_eval(const_policy(w=2.0))
        assert ev.wait(60)["eval/reward"] == 400.0
    finally:
        ev.shutdown()


def test_busy_policy_queue_runs_every_request_with_its_own_weights():
    ev = Evaluator(_slow_env, policy_factory=const_policy, num_trajectories=2, busy_policy="queue")
    try:
        trained = const_policy(w=1.0)
        steps = []
        for w in (1.0, 2.0, 3.0):
            trained.module.w.data.fill_(w)  # training mutates its weights in place
            assert ev.trigger_eval(trained, step=int(w)) is True
            steps.append(int(w))
        results = [ev.wait(60) for _ in steps]
    finally:
        ev.shutdown()
    assert [r["eval/step"] for r in results] == [1, 2, 3]
    assert [r["eval/reward"] for r in results] == [400.0, 800.0, 1200.0]


def test_busy_policy_skip_returns_false_and_does_not_touch_the_weights():
    ev = Evaluator(_slow_env, policy_factory=const_policy, num_trajectories=4, busy_policy="skip")
    try:
        assert ev.trigger_eval(const_policy(w=1.0)) is True
        # Anything that is not weights would raise if it were copied; skipping must not look.
        assert ev.trigger_eval(object()) is False
        assert ev.wait(60)["eval/reward"] == 400.0
        with pytest.raises(TypeError):
            ev.trigger_eval(object())  # idle: now the weights are read
    finally:
        ev.shutdown()


def test_poll_returns_none_while_running_then_the_result():
    ev = Evaluator(_slow_env, policy_factory=const_policy, num_trajectories=4)
    try:
        ev.trigger_eval(const_policy(w=1.0), step=3)
        assert ev.poll() is None
        assert ev.pending
        result = None
        deadline = time.time() + 60
        while result is None and time.time() < deadline:
            result = ev.poll(timeout=0.5)
        assert result["eval/step"] == 3
        assert not ev.pending
    finally:
        ev.shutdown()


def test_trigger_eval_is_fast_and_copies_weights():
    """The trigger copies: later in-place training updates do not leak into the running round."""
    ev = Evaluator(_slow_env, policy_factory=const_policy, num_trajectories=2)
    try:
        trained = const_policy(w=1.0)
        ev.trigger_eval(trained)
        trained.module.w.data.fill_(50.0)
        assert ev.wait(60)["eval/reward"] == 400.0
    finally:
        ev.shutdown()


def test_eval_policy_mode_is_restored():
    for start_training in (True, False):
        policy = const_policy()
        policy.train(start_training)
        ev = Evaluator(count_env, policy, num_trajectories=1)
        try:
            ev.evaluate()
        finally:
            ev.shutdown()
        inner: ConstPolicy = policy.module
        assert inner.modes_seen == {False}  # the rollout ran in eval mode
        assert policy.training is start_training


@pytest.mark.parametrize("busy_policy", ["skip", "error"])
def test_two_triggers_at_once_start_exactly_one_round(busy_policy):
    """The busy check and the admission are one step: two callers cannot both find the evaluator idle."""
    import threading

    ev = Evaluator(
        functools.partial(count_env, lengths=(30,)),
        policy_factory=const_policy,
        num_trajectories=1,
        busy_policy=busy_policy,
    )
    try:
        for _ in range(25):
            barrier = threading.Barrier(2)
            outcomes = []

            def trigger(barrier=barrier, outcomes=outcomes):
                barrier.wait()
                try:
                    outcomes.append(ev.trigger_eval())
                except RuntimeError:
                    outcomes.append("refused")

            threads = [threading.Thread(target=trigger) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            assert sorted(map(str, outcomes)) == sorted(["True", "False" if busy_policy == "skip" else "refused"])
            assert ev.wait(60)["eval/num_episodes"] == 1
            assert ev.wait(0.1) is None  # exactly one round ran
    finally:
        ev.shutdown()


def test_a_given_policy_on_another_device_than_device_is_a_clear_error():
    """A caller's policy is never moved (it may be training's); the evaluator says what to do instead."""
    from simeval import EvalError

    policy = const_policy().to("meta")
    ev = Evaluator(count_env(), policy, num_trajectories=1, device="cpu")
    try:
        with pytest.raises(EvalError, match="lives on meta: pass policy_factory"):
            ev.evaluate()
    finally:
        ev.shutdown()
    assert next(policy.parameters()).device.type == "meta"
