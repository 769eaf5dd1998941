"""Any recorded episode replayed exactly: what a results line carries, ``--replay DIR --replay-episode LINE:INDEX``,
the episode's video, the simulators' promises, and each refusal in one line.

One suite run and one plain ``--checkpoint`` run of the shipped checkpoint on native MuJoCo HalfCheetah (5 episodes
of 30 steps on 2 sub-envs: sub-env 1 plays ordinals 0 to 2), written by the launcher into one directory; their lines
are then replayed, or copied with a field changed (what an older simeval wrote, a failed line, a changed checkpoint).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import struct

import numpy as np
import pytest
import torch
from helpers import CountEnv, const_policy
from launch_helpers import TESTS, cli, read_records

from simeval.checkpoints.shipped import SHIPPED_RUN, shipped_checkpoint
from simeval.envs.simulators import ReplayPromise, registered
from simeval.launch import main
from simeval.launch.replay import REPLAYS
from simeval.records import append_record, failed_record

SUITE = """\
name: replay
seed: 3
episodes: 5
num_envs: 2
max_steps: 30
tasks:
  - env: HalfCheetah-v5
    conditions:
      nominal: {}
      heavy: {body_mass_scale: [1.2, 1.5], observation_noise: 0.1}
"""
RUN = ["--episodes", "5", "--num-envs", "2", "--max-steps", "30", "--seed", "3"]
HEAVY, PLAIN = 2, 3  # results.jsonl lines: the suite's nominal cell, its heavy cell, then the plain run's


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> str:
    """A run directory with three lines: a suite's two cells (a drawn body mass on the second), a plain run's."""
    root = tmp_path_factory.mktemp("replay")
    suite, out = root / "suite.yaml", str(root / "out")
    suite.write_text(SUITE)
    ran = cli("--suite", str(suite), "--checkpoint", shipped_checkpoint(), "--out", out, timeout=120)
    assert ran.returncode == 0, ran.stderr[-2000:]
    ran = cli("--checkpoint", shipped_checkpoint(), *RUN, "--out", out, "--append", timeout=120)
    assert ran.returncode == 0, ran.stderr[-2000:]
    return out


@pytest.fixture
def copy(run_dir, tmp_path) -> str:
    """The run directory, copied: a test may add lines to it."""
    return shutil.copytree(run_dir, str(tmp_path / "run"))


def _replay(*args: str) -> tuple[int, str, str]:
    """``main(["--replay", ...])`` in this process (its worker sets this thread's torch threads: put back)."""
    threads = torch.get_num_threads()
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["--replay", *args])
    finally:
        torch.set_num_threads(threads)
    return code, out.getvalue(), err.getvalue()


def _add_line(run: str, record: dict) -> int:
    """Append ``record`` to ``run``'s results.jsonl; its line number."""
    append_record(os.path.join(run, "results.jsonl"), record)
    return len(read_records(run))


def test_a_line_carries_where_each_episode_ran_and_its_round(run_dir):
    records = read_records(run_dir)
    heavy, plain = records[HEAVY - 1], records[PLAIN - 1]
    for record in (heavy, plain):
        assert record["episode_sub_envs"] == [0, 0, 1, 1, 1]  # quotas 2 and 3 (sb3's: the extra one at the end)
        assert record["episode_ordinals"] == [0, 1, 0, 1, 2]
        assert record["round"] == {
            "num_envs": 2, "quotas": [2, 3], "seed": 3, "shards": [[0, 2]], "device": None, "policy_device": "cpu",
            "env_device": None,
        }  # fmt: skip
        assert record["checkpoint_sha256"] and record["settings"]["num_envs"] == 2
    assert set(heavy["episode_conditions"]) == {"body_mass_scale"} and "plan" in plain
    assert "round" not in heavy["metrics"] and "episode_sub_envs" not in heavy["metrics"]


def test_an_episode_of_sub_env_1_ordinal_2_with_a_drawn_mass_replays_to_the_bit_with_its_video(run_dir, tmp_path):
    """In a process of its own: MuJoCo reads MUJOCO_GL when it is imported, and --video sets it first."""
    import imageio.v2 as imageio

    run = shutil.copytree(run_dir, str(tmp_path / "run"))
    recorded = read_records(run)[HEAVY - 1]
    proc = cli("--replay", run, "--replay-episode", f"{HEAVY}:4", "--video", timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "promise: native MuJoCo: the same return to the bit" in proc.stdout
    assert "episode 2 of sub-env 1, in a round of 5 episodes on 2 sub-envs, seed 3; body_mass_scale" in proc.stdout
    assert f"recorded return {recorded['episode_returns'][4]!r} (30 steps)" in proc.stdout
    assert f"replayed return {recorded['episode_returns'][4]!r} (30 steps)" in proc.stdout
    assert "equal to the bit: yes" in proc.stdout
    (line,) = [json.loads(text) for text in open(os.path.join(run, REPLAYS))]
    assert struct.pack("<d", line["replayed_return"]) == struct.pack("<d", recorded["episode_returns"][4])
    assert (line["line"], line["index"], line["sub_env"], line["ordinal"]) == (HEAVY, 4, 1, 2)
    assert line["episode_seed"] == recorded["episode_seeds"][4] and line["round_seed"] == 3
    assert line["conditions"] == {"body_mass_scale": recorded["episode_conditions"]["body_mass_scale"][4]}
    assert line["equal"] is True and line["promise"]["exact"] is True
    assert line["video"] == os.path.join(run, "videos", f"replay_line{HEAVY}_episode4.mp4")
    reader = imageio.get_reader(line["video"], format="FFMPEG")
    assert reader.count_frames() == 30 + 1  # the episode's first state, then one frame a step (tests/test_video.py)
    assert reader.get_data(0).shape == (240, 240, 3)


@pytest.mark.parametrize("index", [0, 3])
def test_a_plain_run_s_episodes_replay_to_the_bit(copy, index):
    code, out, err = _replay(copy, "--replay-episode", f"{PLAIN}:{index}")
    assert code == 0, err
    recorded = read_records(copy)[PLAIN - 1]["episode_returns"][index]
    assert f"replayed return {recorded!r}" in out and "equal to the bit: yes" in out


def test_a_return_that_differs_where_the_simulator_promises_the_bit_is_an_error(copy):
    record = read_records(copy)[PLAIN - 1]
    record["episode_returns"][3] = float(np.nextafter(record["episode_returns"][3], np.inf))  # one ulp away
    line = _add_line(copy, record)
    code, out, err = _replay(copy, "--replay-episode", f"{line}:3")
    assert code == 2 and "equal to the bit: no" in out
    assert err.count("\n") == 1 and err.startswith("simeval-launch: error: ")
    assert f"line {line}, episode 3 replayed" in err and "promises the same return to the bit" in err
    (replayed,) = [json.loads(text) for text in open(os.path.join(copy, REPLAYS))]
    assert replayed["equal"] is False and replayed["recorded_return"] == record["episode_returns"][3]


def _older(record: dict) -> dict:
    """The line as simeval wrote it before lines said where each episode ran and their round."""
    return {k: v for k, v in record.items() if k not in ("episode_sub_envs", "episode_ordinals", "round")}


def _changed_checkpoint(run: str, record: dict) -> dict:
    """The line with its checkpoint file now holding another checkpoint's bytes."""
    path = os.path.join(run, "ckpt.pt")
    shutil.copy(os.path.join(SHIPPED_RUN, "step_000126976.pt"), path)
    return {**record, "checkpoint": path}


REFUSALS = [
    ("no line", lambda run, r: None, "9:0", "results.jsonl has no line 9 (its last complete line is 3): give"),
    ("no episode", lambda run, r: None, f"{PLAIN}:5", f"line {PLAIN} has 5 episodes (indices 0 to 4), not 5: give"),
    ("failed line", lambda run, r: failed_record(r["checkpoint"], "boom", 1, kind="evaluation"), "LINE:0",
     "is a failed line (evaluation: boom): it has no episodes; replay an ok line."),
    ("older line", lambda run, r: _older(r), "LINE:0",
     "was written before results lines recorded how to re-run their episodes (it has no episode_sub_envs)"),
    ("unseeded", lambda run, r: {**r, "round": {**r["round"], "seed": None}}, "LINE:0",
     "is of an unseeded round (--seed null): its episodes started from fresh entropy"),
    ("changed checkpoint", _changed_checkpoint, "LINE:0", "changed since"),
    ("served line", lambda run, r: {k: v for k, v in r.items() if not k.startswith("checkpoint")}, "LINE:0",
     "names no checkpoint (a served evaluator's line"),
]  # fmt: skip


@pytest.mark.parametrize(("what", "make", "episode", "words"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_what_cannot_be_replayed_is_refused_in_one_line(copy, what, make, episode, words):
    record = make(copy, read_records(copy)[PLAIN - 1])
    if record is not None:
        episode = episode.replace("LINE", str(_add_line(copy, record)))
    code, out, err = _replay(copy, "--replay-episode", episode)
    assert code == 2 and out == "", out
    assert err.count("\n") == 1 and err.startswith("simeval-launch: error: ") and words in err, err
    if what == "changed checkpoint":
        assert "ckpt.pt changed since" in err and "put back the file it evaluated" in err
    assert not os.path.exists(os.path.join(copy, REPLAYS))


def test_a_line_simeval_wrote_before_is_refused_and_a_directory_without_results_names_what_to_give(tmp_path):
    old = os.path.join(TESTS, "fixtures", "results_v1")
    code, _, err = _replay(os.path.join(old, "watch"), "--replay-episode", "1:0")
    assert code == 2 and "line 1 was written before results lines recorded how to re-run their episodes" in err
    code, _, err = _replay(os.path.join(old, "decided"), "--replay-episode", "1:0")
    assert code == 2 and "no results.jsonl there (an --until-decided run: give --replay" in err
    assert os.path.join(old, "decided", "a") in err


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--replay-episode", "1:0", "--num-envs", "4"], "--replay takes every setting from the results line: leave"),
        (["--replay-episode", "1:0", "--checkpoint", "a.pt"], "leave --checkpoint out."),
        (["--replay-episode", "0:1"], "--replay-episode must look like LINE:INDEX"),
        ([], "--replay DIR needs --replay-episode LINE:INDEX"),
        (["--replay-episode", "1:0", "--out", "x"], "--replay writes into DIR (replays.jsonl, videos/): leave --out"),
    ],
)
def test_the_replay_flags_refuse_what_a_replay_takes_from_the_line(copy, args, words):
    code, _, err = _replay(copy, *args)
    assert code == 2 and err.count("\n") == 1 and words in err, err


def test_every_simulator_says_what_a_replay_promises():
    for sim in registered():
        for device in ("cpu", "cuda:0"):
            promise = sim.replay_promise("HalfCheetah-v5" if sim.prefix is None else f"{sim.prefix}:x", device)
            assert isinstance(promise, ReplayPromise) and promise.text and "\n" not in promise.text
    native = next(s for s in registered() if s.name == "native")
    assert native.replay_promise("HalfCheetah-v5", "cpu").exact
    assert not native.replay_promise("HalfCheetah-v5", "cuda:0").exact


class LitCountEnv(CountEnv):
    """A CountEnv whose sub-env ``i`` renders as one pixel: (i, its episode in the round, its step)."""

    def __init__(self, lengths):
        super().__init__(lengths)
        self.episode = torch.zeros(len(lengths), dtype=torch.long)

    def _reset(self, tensordict=None, **kwargs):
        mask = None if tensordict is None else tensordict.get("_reset", None)
        if mask is None:
            self.episode.zero_()
        else:
            self.episode[mask.view(-1)] += 1
        return super()._reset(tensordict, **kwargs)

    def render(self, index: int = 0) -> np.ndarray:
        return np.array([[[index, int(self.episode[index]), int(self.t[index])]]], dtype=np.uint8)


@pytest.mark.parametrize(("sub_env", "ordinal"), [(0, 0), (1, 2), (2, 1)])
def test_the_frames_are_those_of_the_chosen_episode_and_no_other(sub_env, ordinal):
    from torchrl.envs import Compose, RewardSum, TransformedEnv

    from simeval import Evaluator
    from simeval.worker.frames import FrameBuffer

    lengths = [3, 4, 2]
    frames = FrameBuffer(sub_env, ordinal)
    env = TransformedEnv(LitCountEnv(lengths), Compose(RewardSum(), frames))
    with Evaluator(env, const_policy(), num_trajectories=9, keep_episodes=True) as ev:
        ev.evaluate(step=0)
    got = [tuple(int(v) for v in f[0, 0]) for f in frames.take()]
    assert got == [(sub_env, ordinal, t) for t in range(lengths[sub_env] + 1)]


def test_a_round_split_over_workers_records_every_worker_s_range():
    from simeval.shards import merge

    def shard(first, quotas, ordinals):
        sub_envs = [first + i for i, q in enumerate(quotas) for _ in range(q)]
        return {
            "episode_returns": [1.0] * len(sub_envs), "episode_lengths": [1] * len(sub_envs), "frame_count": 1,
            "seconds": 1.0, "step_reward_to_first_done": 0.0, "episode_info": {}, "step": 0,
            "episode_sub_envs": sub_envs, "episode_ordinals": ordinals,
            "round": {"num_envs": len(quotas), "quotas": quotas, "seed": 7, "shards": [[first, len(quotas)]],
                      "device": None},
        }  # fmt: skip

    merged = merge([shard(0, [1, 2], [0, 0, 1]), shard(2, [2], [0, 1])])
    assert merged["round"] == {"num_envs": 3, "quotas": [1, 2, 2], "seed": 7, "shards": [[0, 2], [2, 1]],
                               "device": None}  # fmt: skip
    assert merged["episode_sub_envs"] == [0, 1, 1, 2, 2] and merged["episode_ordinals"] == [0, 0, 1, 0, 1]


def test_a_replay_refuses_a_policy_factory_the_line_names_and_the_user_did_not(copy):
    record = read_records(copy)[PLAIN - 1]
    record["settings"] = {**record["settings"], "policy": "os:system"}
    line = _add_line(copy, record)
    code, _, err = _replay(copy, "--replay-episode", f"{line}:0")
    assert code == 2 and "--policy os:system, which a replay does not import on a results file's word" in err
    assert "give --policy os:system yourself to trust it." in err
    code, _, err = _replay(copy, "--replay-episode", f"{line}:0", "--policy", "simeval.policies:mlp_policy")
    assert code == 2 and "names os:system, another: leave --policy out." in err


@pytest.mark.required
@pytest.mark.parametrize("backend", ["gymnasium", "warp"])
def test_gymnasium_and_warp_rounds_replay_to_the_bit_on_the_cpu(backend, tmp_path):
    """Their promises (the same return to the bit on the CPU), held on an episode after sub-env 1's first."""
    if backend == "warp":
        pytest.importorskip("mujoco_warp")
    out = str(tmp_path / "out")
    ran = cli("--checkpoint", shipped_checkpoint(), *RUN, "--env-backend", backend, "--out", out, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
    (record,) = read_records(out)
    assert record["env_backend"] == backend and record["episode_sub_envs"][4] == 1
    code, printed, err = _replay(out, "--replay-episode", "1:4")
    assert code == 0, err
    assert f"promise: {'gymnasium' if backend == 'gymnasium' else 'MuJoCo Warp'}: the same return to the bit" in printed
    assert f"replayed return {record['episode_returns'][4]!r}" in printed and "equal to the bit: yes" in printed
