"""LeRobot 0.4.4 through simeval: its pretrained_model/ directories, its sim envs, and lerobot-eval as the oracle.

Runs in the venv that ``make lerobot`` builds (``make test-lerobot``); every test is required, so CI
fails if LeRobot cannot run. The policy is an ACT built and saved here (tests/le_robot/act_policy.py:
seeded random weights, made-up but fixed normaliser statistics; no hub access), reading PushT's
96-pixel camera image and agent position and answering chunks of 10 actions, of which 5 are played.
The oracle: ``lerobot-eval`` on the same directory, env and seed gives the same per-episode return
and success as simeval. lerobot-eval seeds batch ``k`` of ``B`` envs ``seed + k * B + i``; simeval's
LeRobot envs seed sub-env ``i``'s ``k``-th episode the same way, so with ``--num-envs B`` the
episodes are the same ones, listed sub-env by sub-env (simeval) or batch by batch (lerobot-eval). For a
count that is not a multiple of B, lerobot-eval keeps the first episodes of whole batches, and so does
simeval on a LeRobot env; its records name each episode's env seed (``episode_env_seeds``) to pair them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from act_policy import save_act  # noqa: E402

EPISODES, NUM_ENVS, SEED, STEPS = 8, 4, 3, 60
# simeval keeps rewards in float32 (RewardSum), lerobot-eval sums the env's float64 rewards: the returns of
# STEPS steps agree to float32 rounding.
RTOL = 1e-5

pytestmark = [pytest.mark.required, pytest.mark.timeout(600)]


def run(*cmd: str, cwd: str = REPO) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": REPO,
        "HF_HUB_OFFLINE": "1",
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory) -> str:
    return str(save_act(tmp_path_factory.mktemp("act") / "pretrained_model"))


def lerobot_eval_metrics(policy_dir: str, out, episodes: int, batch_size: int, seed: int) -> dict:
    """lerobot-eval's per-episode numbers: ``episodes`` episodes in batches of ``batch_size`` envs, from ``seed``."""
    run(
        os.path.join(os.path.dirname(sys.executable), "lerobot-eval"),
        f"--policy.path={policy_dir}",
        "--policy.device=cpu",
        "--env.type=pusht",
        f"--env.episode_length={STEPS}",
        f"--eval.n_episodes={episodes}",
        f"--eval.batch_size={batch_size}",
        f"--seed={seed}",
        f"--output_dir={out}",
        "--env.visualization_width=96",  # its videos of 10 episodes: small frames, the observations unchanged
        "--env.visualization_height=96",
        cwd=str(out.parent),
    )
    return json.loads((out / "eval_info.json").read_text())["per_task"][0]["metrics"]


@pytest.fixture(scope="module")
def lerobot_eval(policy_dir, tmp_path_factory) -> dict:
    """lerobot-eval's per-episode numbers: EPISODES episodes in batches of NUM_ENVS, from SEED."""
    return lerobot_eval_metrics(policy_dir, tmp_path_factory.mktemp("lerobot_eval") / "out", EPISODES, NUM_ENVS, SEED)


def simeval_launch(
    policy_dir: str, out, *flags: str, num_envs: int = NUM_ENVS, episodes: int = EPISODES, seed: int = SEED
) -> dict:
    run(
        sys.executable, "-m", "simeval.launch", "--checkpoint", policy_dir, "--env", "lerobot:pusht",
        "--num-envs", str(num_envs), "--episodes", str(episodes), "--max-steps", str(STEPS), "--seed", str(seed),
        "--out", str(out), *flags,
    )  # fmt: skip
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(lines) == 1 and lines[0]["status"] == "ok", lines
    return lines[0]


def batch_order(values: list) -> list:
    """simeval's episodes (sub-env by sub-env: sub-env i's k-th at i * K + k) in lerobot-eval's order (k * B + i)."""
    per_env = EPISODES // NUM_ENVS
    return [values[i * per_env + k] for k in range(per_env) for i in range(NUM_ENVS)]


def test_returns_and_success_equal_lerobot_evals_on_the_same_seeds(policy_dir, lerobot_eval, tmp_path):
    line = simeval_launch(policy_dir, tmp_path / "out")
    assert line["checkpoint_format"] == "lerobot" and line["env"] == "lerobot:pusht"
    ours = batch_order(line["episode_returns"])
    theirs = lerobot_eval["sum_rewards"]
    assert ours == pytest.approx(theirs, rel=RTOL, abs=1e-6)
    assert sum(r > 0 for r in theirs) >= 2, theirs  # the oracle sees episodes that differ, not only zeros
    assert [bool(s) for s in batch_order(line["episode_success_at_end"])] == lerobot_eval["successes"]
    assert line["episode_lengths"] == [STEPS] * EPISODES


def test_the_process_backend_evaluates_the_same_episodes(policy_dir, lerobot_eval, tmp_path):
    line = simeval_launch(policy_dir, tmp_path / "out", "--backend", "process")
    assert batch_order(line["episode_returns"]) == pytest.approx(lerobot_eval["sum_rewards"], rel=RTOL, abs=1e-6)


UNEVEN = {"episodes": 3, "num_envs": 2, "seed": 20}  # not a multiple: lerobot-eval runs 2 batches, keeps 3 episodes


@pytest.fixture(scope="module")
def lerobot_eval_uneven(policy_dir, tmp_path_factory) -> dict[int, float]:
    """lerobot-eval's return of each episode it keeps, by seed: its episode ``j`` is seeded ``seed + j``."""
    out = tmp_path_factory.mktemp("lerobot_eval_uneven") / "out"
    metrics = lerobot_eval_metrics(policy_dir, out, UNEVEN["episodes"], UNEVEN["num_envs"], UNEVEN["seed"])
    return {UNEVEN["seed"] + j: r for j, r in enumerate(metrics["sum_rewards"])}


def test_a_lerobot_env_lays_its_quotas_out_in_lerobot_evals_batch_order():
    """The first N episodes of whole batches: the extra ones on the first sub-envs; other simulators unchanged."""
    from simeval.envs.simulators import Simulator, registered
    from simeval.metrics import episode_quotas

    lerobot = next(sim for sim in registered() if sim.name == "lerobot")
    assert lerobot.episodes_in_batch_order and not Simulator.episodes_in_batch_order
    assert episode_quotas(3, 2, batch_order=True) == [2, 1]
    assert episode_quotas(50, 8, batch_order=True) == [7, 7, 6, 6, 6, 6, 6, 6]  # docs/lerobot.md's example
    assert episode_quotas(8, 4, batch_order=True) == episode_quotas(8, 4) == [2] * 4
    assert episode_quotas(3, 2) == [1, 2]


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_a_count_that_is_not_a_multiple_of_num_envs_plays_lerobot_evals_episodes(
    policy_dir, lerobot_eval_uneven, tmp_path, backend
):
    """3 episodes on 2 envs: lerobot-eval's seeds (20, 21, 22), each episode's return its, paired by env seed."""
    line = simeval_launch(policy_dir, tmp_path / "out", "--backend", backend, **UNEVEN)
    theirs = lerobot_eval_uneven
    assert sorted(line["episode_returns"]) == pytest.approx(sorted(theirs.values()), rel=RTOL, abs=1e-6)
    assert sorted(line["episode_env_seeds"]) == sorted(theirs)
    ours = dict(zip(line["episode_env_seeds"], line["episode_returns"], strict=True))
    assert ours == pytest.approx(theirs, rel=RTOL, abs=1e-6)


def test_the_policy_answers_what_lerobots_own_classes_answer(policy_dir):
    """The format's policy (built from the checkpoint's data) equals LeRobot's from_pretrained, bit for bit."""
    import torch
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors

    from simeval.checkpoints import load_checkpoint
    from simeval.envs import make_env
    from simeval.factories import build_policy, weights_bound
    from simeval.policy_kinds import acting_of
    from simeval.weights import load_weights

    ck = load_checkpoint(policy_dir)
    env = make_env("lerobot:pusht", num_envs=2, seed=SEED, max_steps=STEPS)
    try:
        policy = build_policy(ck.policy_factory, ck.policy_kwargs, env, max_bytes=weights_bound(ck.policy))
        load_weights(policy, ck.policy, "policy")
        assert (acting_of(policy).chunk, acting_of(policy).steps_per_call) == (5, 5)
        td = env.reset()
        ours = policy(td)["action"]
    finally:
        env.close()
    theirs_policy = ACTPolicy.from_pretrained(policy_dir)
    pre, post = make_pre_post_processors(theirs_policy.config, pretrained_path=policy_dir)
    batch = pre({"observation.image": td["observation.image"], "observation.state": td["observation.state"]})
    theirs = post(theirs_policy.predict_action_chunk(batch)[:, :5])
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize(
    ("env_id", "kind", "task", "action"),
    [
        ("lerobot:pusht", "pusht", None, [[100.0, 300.0], [400.0, 120.0]]),
        ("lerobot:aloha/AlohaTransferCube-v0", "aloha", "AlohaTransferCube-v0", [[0.1] * 14, [-0.1] * 14]),
    ],
)
def test_the_env_observes_what_lerobot_eval_hands_its_policy(env_id, kind, task, action):
    """Same seeds, same actions: the observations lerobot-eval's preprocess_observation gives, the same rewards."""
    import numpy as np
    import torch
    from lerobot.envs.configs import EnvConfig
    from lerobot.envs.factory import make_env as lerobot_make_env
    from lerobot.envs.utils import preprocess_observation

    from simeval.envs import make_env

    ours_env = make_env(env_id, num_envs=2, seed=SEED)  # first: it sets MUJOCO_GL for ALOHA's cameras
    config = EnvConfig.get_choice_class(kind)(**({"task": task} if task else {}))
    (group,) = lerobot_make_env(config, n_envs=2).values()  # {env type or task group: {0: vector env}}
    theirs_env = group[0]
    try:
        raw, _ = theirs_env.reset(seed=[SEED, SEED + 1])
        theirs = preprocess_observation(raw)
        ours = ours_env.reset()
        assert set(theirs) <= set(ours.keys())
        for key in theirs:
            assert torch.equal(ours[key], theirs[key]), key
        action = np.array(action, dtype=np.float32)  # what a policy answers (lerobot-eval passes it on as is)
        raw, reward, *_ = theirs_env.step(action)
        step = ours_env.step(ours.set("action", torch.as_tensor(action, dtype=torch.float32)))["next"]
        for key, value in preprocess_observation(raw).items():
            assert torch.allclose(step[key], value, atol=1e-6), key
        assert step["reward"].reshape(-1).tolist() == pytest.approx(reward.tolist(), rel=1e-6)
    finally:
        theirs_env.close()
        ours_env.close()


def test_a_metaworld_episode_is_fixed_by_its_seed_where_lerobot_evals_is_not():
    """MetaWorld 3 ignores reset's seed and LeRobot's env draws the puck and goal from NumPy's global generator;
    simeval's seeds them per episode, so two builds of one seed start the same episodes, image for image."""
    import numpy as np
    import torch
    from lerobot.envs.metaworld import MetaworldEnv

    from simeval.envs import make_env

    first, again, other = (make_env("lerobot:metaworld/push-v3", num_envs=2, seed=s) for s in (SEED, SEED, SEED + 1))
    try:
        a, b, c = first.reset(), again.reset(), other.reset()
        assert torch.equal(a["observation.image"], b["observation.image"])
        assert torch.equal(a["observation.image"][1], c["observation.image"][0])  # sub-env i of seed s: seed s + i
        assert not torch.equal(a["observation.image"][0], a["observation.image"][1])
        action = torch.tensor([[0.5, -0.2, 0.1, 1.0]] * 2)
        steps = [env.step(td.set("action", action))["next", "reward"] for env, td in ((first, a), (again, b))]
        assert torch.equal(*steps)
    finally:
        for env in (first, again, other):
            env.close()
    theirs = MetaworldEnv(task="metaworld-push-v3", obs_type="pixels_agent_pos")
    assert not np.array_equal(theirs.reset(seed=SEED)[0]["pixels"], theirs.reset(seed=SEED)[0]["pixels"])
    theirs.close()


def test_watch_evaluates_lerobot_trains_checkpoints_by_step_and_not_last(policy_dir, tmp_path):
    """``--watch`` on lerobot-train's output: each checkpoints/<step>/pretrained_model once, in step order."""
    import shutil

    run_dir = tmp_path / "train"
    for step in ("000100", "000200"):
        shutil.copytree(policy_dir, run_dir / "checkpoints" / step / "pretrained_model")
    (run_dir / "checkpoints" / "last").symlink_to("000200")
    out = tmp_path / "out"
    run(
        sys.executable, "-m", "simeval.launch", "--watch", str(run_dir), "--env", "lerobot:pusht", "--num-envs", "2",
        "--episodes", "2", "--max-steps", "10", "--seed", str(SEED), "--until-step", "200", "--out", str(out),
    )  # fmt: skip
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [(line["step"], line["status"]) for line in lines] == [(100, "ok"), (200, "ok")]


def test_a_replayed_pusht_episode_comes_back_to_the_bit(policy_dir, tmp_path):
    """``--replay``: an episode after sub-env 1's first (batch order: 3 then 2 episodes), re-run in its round.
    LeRobot promises nothing to the bit; on PushT with a CPU policy it comes back equal all the same."""
    line = simeval_launch(policy_dir, tmp_path / "out", num_envs=2, episodes=5)
    assert (line["episode_sub_envs"][4], line["episode_ordinals"][4]) == (1, 1)
    done = run(sys.executable, "-m", "simeval.launch", "--replay", str(tmp_path / "out"), "--replay-episode", "1:4")
    assert "promise: LeRobot: each episode starts from its own env seed; not promised to the bit" in done.stdout
    assert f"replayed return {line['episode_returns'][4]!r}" in done.stdout and "equal to the bit: yes" in done.stdout
