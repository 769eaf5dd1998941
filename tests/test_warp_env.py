"""The MuJoCo Warp env (make_env(..., backend="warp")) against the native env, on Warp's CPU device.

What agrees, and how closely (``TOLERANCE``; the bounds are 10-40x what these seeds give):

* reset observations, the observations of sub-envs just reset, and the done,
  terminated and truncated flags: exactly. Both envs draw sub-env ``i``'s reset
  noise from the same float64 generator (seed + i) and observe it in float32;
* step observations and rewards: to float32 precision, growing with the episode.
  MuJoCo Warp computes in float32 where the native env uses float64: an
  episode's first step differs by ~1e-6. A contact that starts a substep earlier
  in one than in the other turns that into ~1e-3 to 1e-2 on HalfCheetah's joint
  velocities within a few steps (as MuJoCo does to a float32-rounded copy of its
  own state: chaotic contact dynamics, not a modelling difference), so its
  episodes are capped at 10 steps here; Hopper stays within ~1e-5 over whole episodes.

Warp compiles its kernels on first use: this module compiles them at -O0 (see
``_warp``), about 20 s on a 2-core machine, once per cache (~/.cache/warp).
Two tasks, three sub-envs and a few dozen steps keep the rest to ~20 s.
"""

from __future__ import annotations

import functools
import threading
import warnings

import pytest
import torch
from helpers import mlp_policy

from simeval import Evaluator
from simeval.envs import OBS_NORM_ID, make_env, tasks

WARP_TASKS = tasks("warp")

pytestmark = [pytest.mark.required, pytest.mark.timeout(600)]

SEED = 11
NUM_ENVS = 3
# task: (max_steps, steps driven, observation atol for an episode's first step, for any step, reward atol)
TOLERANCE = {
    "HalfCheetah-v5": (10, 20, 1e-4, 5e-2, 1e-3),
    "Hopper-v5": (None, 32, 1e-5, 1e-4, 1e-5),
}


@pytest.fixture(autouse=True)
def _warp():
    """Skip (a failure in CI) without MuJoCo Warp; inside the test, so that the required mark applies.

    Kernels are compiled at -O0 here: half the compile time of Warp's default -O2 on the CPU,
    the same source (the comparisons hold either way), and these runs are too short for speed to matter.
    """
    wp = pytest.importorskip("warp")
    pytest.importorskip("mujoco_warp")
    level, wp.config.optimization_level = wp.config.optimization_level, 0
    yield
    wp.config.optimization_level = level


def _pair(name: str, **kwargs):
    kwargs = {"num_envs": NUM_ENVS, "seed": SEED, "obs_norm": False, "device": "cpu", **kwargs}
    return make_env(name, backend="warp", **kwargs), make_env(name, backend="native", **kwargs)


def _actions(env, steps: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(SEED)
    low, high = env.action_spec.space.low.cpu(), env.action_spec.space.high.cpu()
    return low + (high - low) * torch.rand((steps, *low.shape), generator=gen)


def _drive(env, actions: torch.Tensor) -> dict[str, torch.Tensor]:
    """Step through ``actions`` with torchrl's auto-reset, recording what is compared."""
    td = env.reset()
    rows = []
    for action in actions:
        td["action"] = action.to(env.device)
        td, td_next = env.step_and_maybe_reset(td)
        row = {k: td["next", k].clone() for k in ("observation", "reward", "terminated", "truncated", "step_count")}
        row["after_reset"] = td_next["observation"].clone()
        rows.append(row)
        td = td_next
    return {k: torch.stack([r[k] for r in rows]).cpu() for k in rows[0]}


def test_reset_observations_and_specs_are_the_native_envs():
    """Same seed, same initial states, bit for bit; same specs; a partial reset resets only its sub-env."""
    for name in WARP_TASKS:
        warp, native = _pair(name)
        try:
            assert torch.equal(warp.reset()["observation"], native.reset()["observation"]), name
            for spec in ("observation_spec", "action_spec", "full_reward_spec", "full_done_spec"):
                assert getattr(warp, spec) == getattr(native, spec), (name, spec)
            tds = [env.reset() for env in (warp, native)]  # reset() again: the streams go on
            before = tds[0]["observation"].clone()
            assert torch.equal(before, tds[1]["observation"])
            for td in tds:
                td["_reset"] = torch.tensor([[False], [True], [False]])
            obs = warp.reset(tds[0])["observation"]
            assert torch.equal(obs, native.reset(tds[1])["observation"]), name
            assert torch.equal(obs[[0, 2]], before[[0, 2]]) and not torch.equal(obs[1], before[1])
        finally:
            warp.close()
            native.close()


@pytest.mark.parametrize("name", sorted(TOLERANCE))
def test_same_actions_give_the_native_envs_episodes(name):
    """Seeded random actions through truncations (HalfCheetah, max_steps=10) and terminations (Hopper)."""
    max_steps, steps, first_atol, atol, reward_atol = TOLERANCE[name]
    warp, native = _pair(name, max_steps=max_steps)
    actions = _actions(native, steps)
    mine, ref = _drive(warp, actions), _drive(native, actions)
    warp.close()
    native.close()
    for key in ("terminated", "truncated", "step_count"):
        assert torch.equal(mine[key], ref[key]), key
    done = (ref["terminated"] | ref["truncated"]).squeeze(-1)
    if name == "HalfCheetah-v5":
        assert done.sum() == NUM_ENVS * steps // max_steps and not ref["terminated"].any()
    else:
        assert ref["terminated"].sum() >= NUM_ENVS, "too few terminations for a comparison"
    assert torch.equal(mine["after_reset"][done], ref["after_reset"][done])  # fresh states after a reset
    first = (ref["step_count"] == 1).squeeze(-1)
    close = functools.partial(torch.testing.assert_close, rtol=0)
    close(mine["observation"][first], ref["observation"][first], atol=first_atol)
    close(mine["observation"], ref["observation"], atol=atol)
    close(mine["reward"], ref["reward"], atol=reward_atol)
    assert mine["observation"].dtype == mine["reward"].dtype == torch.float32


def test_evaluator_gives_the_native_envs_returns():
    """make_env(..., backend="warp") in simeval.Evaluator (thread backend): the native env's episodes."""
    results = {}
    for backend in ("warp", "native"):
        ev = Evaluator(
            functools.partial(
                make_env, "HalfCheetah-v5", num_envs=4, max_steps=20, obs_norm=False, backend=backend, device="cpu"
            ),
            policy_factory=functools.partial(mlp_policy, obs_dim=17, act_dim=6, seed=1),
            num_trajectories=4,
            max_steps=20,
            seed=SEED,
            keep_episodes=True,
        )
        try:
            results[backend] = ev.evaluate()
        finally:
            ev.shutdown()
    warp, native = results["warp"], results["native"]
    assert warp["eval/episode_lengths"].tolist() == native["eval/episode_lengths"].tolist() == [20] * 4
    torch.testing.assert_close(warp["eval/episode_returns"], native["eval/episode_returns"], rtol=0, atol=1e-2)


def _warp_round_pair(factory, rounds: int = 2, weights=None, seed: int | None = SEED, **settings) -> dict:
    """``rounds`` rounds in a row through the public Evaluator: the default loop, and torchrl's Collector."""
    out = {}
    for name, extra in (("tensor", {}), ("collector", {"collector_cls": "Collector"})):
        with Evaluator(factory, policy_factory=_policy, seed=seed, keep_episodes=True, **settings, **extra) as ev:
            out[name] = [_comparable(ev.evaluate(weights_dict=weights)) for _ in range(rounds)]
    return out


def _policy(env):
    return mlp_policy(seed=5, obs_dim=env.observation_spec["observation"].shape[-1], act_dim=env.action_spec.shape[-1])


def _comparable(result: dict) -> dict:
    """Every number of a result except the clocks, as plain lists."""
    clocks = ("fps", "seconds", "time", "started")
    return {
        k: v.tolist() if hasattr(v, "tolist") else v
        for k, v in result.items()
        if k.startswith("eval/") and not any(c in k for c in clocks)
    }


@pytest.mark.parametrize(
    ("task", "num_envs", "episodes", "max_steps", "seeded"),
    [
        ("Hopper-v5", 4, 11, 40, True),  # terminations mid-batch, three episodes per sub-env, uneven quotas
        ("HalfCheetah-v5", 3, 4, 12, False),  # the step cap truncates; unseeded rounds go on from the generators
    ],
)
def test_warp_rounds_without_the_collector_give_the_collectors_numbers(task, num_envs, episodes, max_steps, seeded):
    """The Warp env's tensor loop (resets on the device, returns summed there) against torchrl's Collector."""
    factory = functools.partial(make_env, task, num_envs=num_envs, obs_norm=False, backend="warp", device="cpu", seed=3)
    got = _warp_round_pair(factory, seed=SEED if seeded else None, num_trajectories=episodes, max_steps=max_steps)
    assert got["tensor"] == got["collector"]  # every metric and per-episode list, bit for bit, in both rounds
    first, second = got["tensor"]
    assert first["eval/num_episodes"] == episodes
    if seeded:
        assert {**first, "eval/step": 0} == {**second, "eval/step": 0}  # the same episodes again
        assert first["eval/terminated_fraction"] == 1 and len(set(first["eval/episode_lengths"])) > 1
    else:
        assert first["eval/episode_returns"] != second["eval/episode_returns"]  # new initial states


def test_warp_returns_equal_a_bare_loops_with_and_without_reward_sum():
    """Every episode's return and length against an oracle that shares no code with the Evaluator
    (tests/returns_oracle.py: the env stepped with torchrl's own auto-reset, rewards summed per sub-env).

    Hopper falls at step 11 or 12 (the cap), two episodes per sub-env: the tensor loop with make_env's RewardSum
    (it sums in float32 on the device), and torchrl's Collector without RewardSum in batches of 5 steps, where
    the tally carries each unfinished episode's return into the next batch. Warp's CPU device steps three
    Hoppers in ~0.1 s, so the episodes are short.
    """
    from returns_oracle import assert_same_episodes, bare_loop, without_reward_sum

    horizon, episodes, max_steps = 5, 6, 12
    factory = functools.partial(
        make_env, "Hopper-v5", num_envs=3, obs_norm=False, max_steps=max_steps, backend="warp", device="cpu"
    )

    def policy(env):
        return mlp_policy(seed=20, obs_dim=env.observation_spec["observation"].shape[-1], act_dim=3)

    env = factory()
    oracle = bare_loop(env, policy(env), episodes, seed=SEED)
    env.close()
    assert oracle.straddling(horizon) == episodes and set(oracle.lengths) == {11, max_steps}
    collector = {"collector_cls": "Collector", "frames_per_batch": 3 * horizon}
    for env_factory, extra, precision in (
        (factory, {}, "float32"),  # the tensor loop: RewardSum's float32 sums
        (functools.partial(without_reward_sum, factory), collector, "float64"),  # the tally's sums
    ):
        with Evaluator(
            env_factory, policy_factory=policy, num_trajectories=episodes, max_steps=max_steps, seed=SEED,
            keep_episodes=True, **extra,
        ) as ev:  # fmt: skip
            assert_same_episodes(ev.evaluate(), oracle, precision)


def test_warp_rounds_with_frozen_vecnorm_statistics_give_the_collectors_numbers():
    train = make_env("HalfCheetah-v5", num_envs=2, backend="warp", device="cpu", seed=1)
    train.rollout(8, break_when_any_done=False)
    vecnorm = train.transform[2]
    weights = {"policy": _policy(train), OBS_NORM_ID: vecnorm}
    factory = functools.partial(make_env, "HalfCheetah-v5", num_envs=3, backend="warp", device="cpu")
    got = _warp_round_pair(factory, rounds=1, weights=weights, num_trajectories=3, max_steps=6)
    plain = _warp_round_pair(
        functools.partial(factory, obs_norm=False),
        rounds=1,
        weights={"policy": weights["policy"]},
        num_trajectories=3,
        max_steps=6,
    )
    train.close()
    assert got["tensor"] == got["collector"]
    assert got["tensor"][0]["eval/episode_returns"] != plain["tensor"][0]["eval/episode_returns"]  # normalised


def test_the_warp_env_runs_the_tensor_loop_by_default_and_the_collector_where_it_cannot():
    from simeval.envs.simulators.mujoco_warp.steps import WarpSteps
    from simeval.settings import EvalSettings
    from simeval.worker.eval_worker import EvalWorker

    def loop(**settings):
        factory = functools.partial(make_env, "HalfCheetah-v5", num_envs=2, backend="warp", device="cpu")
        worker = EvalWorker(
            EvalSettings(num_trajectories=2, max_steps=5, **settings), env_factory=factory, policy_factory=_policy
        )
        worker.build()
        try:
            return None if worker._direct is None else type(worker._direct.steps)
        finally:
            worker.close()

    assert loop() is WarpSteps
    assert loop(collector_cls="Collector") is None
    assert loop(metrics_fn=len) is None


@pytest.mark.parametrize("depth", [1, 3])
def test_resets_drawn_ahead_start_the_episodes_the_envs_own_resets_would(depth):
    """ResetsAhead at any depth (CUDA keeps 4 ahead) against the env's own host-read resets, then settled."""
    from simeval.envs.simulators.mujoco_warp.resets import ResetsAhead

    mine, ref = (
        make_env("Hopper-v5", num_envs=3, backend="warp", device="cpu", obs_norm=False, seed=4, max_steps=25)
        for _ in range(2)
    )
    actions = _actions(ref, 60)
    rows = _drive(ref, actions)
    mine.reset()
    base = mine.base_env
    resets = ResetsAhead(base, depth=depth)
    observed, ends = [], []
    for action in actions:
        reward, terminated, truncated = base.advance(action, 25)  # 25: the StepCounter's cap
        resets.take(terminated | truncated)
        observed.append(base.observe().clone())
        ends.append(torch.stack((terminated, truncated), -1))
    ends = torch.stack(ends)
    assert torch.equal(ends, torch.cat((rows["terminated"], rows["truncated"]), -1))
    assert ends[..., 0].sum() >= 1 and ends.any(-1).sum() >= 9  # terminations and truncations
    assert torch.equal(torch.stack(observed), rows["after_reset"])  # every reset state, bit for bit
    assert torch.equal(mine.reset()["observation"], ref.reset()["observation"])  # generators rewound
    mine.close()
    ref.close()


def test_outputs_are_device_tensors_sharing_warp_memory():
    """The state the step reads is Warp's memory seen by torch (no copy); outputs live on the env's device."""
    import warp as wp

    env = make_env("HalfCheetah-v5", num_envs=2, backend="warp", device="cpu", seed=0, obs_norm=False)
    base = env.base_env
    try:
        assert base.device == torch.device("cpu") and str(base._wp_device) == "cpu"
        for name in ("qpos", "qvel", "ctrl"):
            assert getattr(base.state, name).data_ptr() == getattr(base._d, name).ptr, name
        ptr = base.state.qpos.data_ptr()
        td = env.rand_step(env.reset())
        assert base.state.qpos.data_ptr() == ptr  # stepping writes into the same arrays
        assert torch.equal(base.state.ctrl, td["action"].clamp(-1, 1))
        nxt = td["next"]
        assert torch.equal(nxt["observation"], torch.cat((base.state.qpos[:, 1:], base.state.qvel), 1))
        for key in ("observation", "reward", "done", "terminated", "truncated"):
            assert nxt[key].device == base.device, key
        assert isinstance(base._d.qpos, wp.array) and base._d.qpos.device == base._wp_device
    finally:
        env.close()


def test_bad_input_is_a_one_line_error(monkeypatch):
    cases = [
        ({"name": "Humanoid-v5"}, ValueError, r"^backend='warp' has no 'Humanoid-v5': it runs HalfCheetah-v5, "),
        ({"name": "Ant-v5"}, ValueError, r"^backend='warp' has no 'Ant-v5'"),
        ({"device": "cuda:99"}, ValueError, r"^unknown device 'cuda:99' for backend='warp': Warp has cpu"),
        ({"render": True}, ValueError, r"^backend='warp' does not render"),
    ]
    for kwargs, kind, message in cases:
        kwargs = {"name": "HalfCheetah-v5", "backend": "warp", **kwargs}
        with pytest.raises(kind, match=message) as err:
            make_env(**kwargs)
        assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=r"choose 'native', 'gymnasium' or 'warp'"):
        make_env("Hopper-v5", backend="mjwarp")
    monkeypatch.setitem(__import__("sys").modules, "mujoco_warp", None)  # as if not installed
    with pytest.raises(ImportError, match=r"^backend='warp' needs MuJoCo Warp .*: pip install simeval\[warp\]$"):
        make_env("HalfCheetah-v5", backend="warp")


def test_cuda_graphs_are_captured_on_the_main_thread_only_unless_asked():
    """A thread-backend worker beside a trainer must not capture (CUDA error 906 on an H200); process workers do."""
    from simeval.envs.simulators.mujoco_warp.env import graphs_wanted

    seen = {}
    worker = threading.Thread(target=lambda: seen.update(default=graphs_wanted(None), asked=graphs_wanted(True)))
    worker.start()
    worker.join()
    assert graphs_wanted(None) is True
    assert seen == {"default": False, "asked": True}
    assert graphs_wanted(False) is False


def test_a_cuda_env_built_off_the_main_thread_warns_that_it_steps_without_graphs():
    """The thread backend's graphless Warp env is 18x slower on an H200: the user is told and pointed at 'process'."""
    from simeval.envs.simulators.mujoco_warp.env import warn_if_graphless

    def caught(*args) -> list[str]:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            thread = threading.Thread(target=warn_if_graphless, args=args)
            thread.start()
            thread.join()
        return [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)]

    (message,) = caught(True, None, "cuda:0")
    assert message.startswith("MuJoCo Warp on cuda:0 was built off the main thread") and "backend='process'" in message
    assert caught(True, False) == [] and caught(True, True) == []  # the user chose
    assert caught(False, None) == []  # Warp's CPU device captures nothing anyway
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_if_graphless(True, None)  # the main thread captures: silent
