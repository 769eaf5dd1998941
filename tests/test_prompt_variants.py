"""A policy server's prompt drawn per episode from a condition's list of variants (``prompt: [...]``).

The server is real, on 127.0.0.1: a small openpi-protocol server (RECORDER) that logs each request's connection,
step tag and prompt, and answers zeros. The evaluations are real launcher runs of native MuJoCo HalfCheetah (it never
terminates, so each sub-env plays its episodes back to back, ``max_steps`` steps each, one request per step).
"""

from __future__ import annotations

import json

import pytest
from launch_helpers import cli, in_process, read_records
from test_remote_policy import _start, _stop

from simeval import EvalError, Evaluator
from simeval.condition_terms import MAX_PROMPT, MAX_VARIANTS
from simeval.conditions import Condition, episode_seed
from simeval.envs import make_env
from simeval.launch import suite
from simeval.launch.cli import parse
from simeval.launch.config import ConfigError
from simeval.launch.suite import load_suite
from simeval.launch.suite_run import SuiteCell, check_suite

RECORDER = r"""
import asyncio, itertools, json, sys
import numpy as np
from websockets.asyncio.server import serve
from simeval.policy_kinds.wire import packb, unpackb

LOG, CHUNK, CONNECTIONS = sys.argv[1], int(sys.argv[2]), itertools.count()

async def handler(ws):
    connection = next(CONNECTIONS)
    await ws.send(packb({"obs_dim": 17, "action_dim": 6, "action_chunk": CHUNK}))
    async for message in ws:
        request = unpackb(message)
        with open(LOG, "a") as f:
            f.write(json.dumps([connection, request["simeval/step"], request.get("prompt")]) + "\n")
        await ws.send(packb({"actions": np.zeros((CHUNK, 6), np.float32)}))

async def main():
    async with serve(handler, "127.0.0.1", 0, max_size=None) as server:
        print(f"serving on ws://127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
        await asyncio.Future()

asyncio.run(main())
"""

VARIANTS = ["run forward", "sprint ahead", "go fast", "move to the right"]
STEPS = 5  # each episode's steps (--max-steps of the suite)
SUITE = """\
name: para
episodes: 8
num_envs: {num_envs}
max_steps: {steps}
tasks:
  - env: HalfCheetah-v5
    prompt: run forward
    conditions:
      nominal: {{}}
      paraphrased: {{prompt: {variants}}}
"""


def _serve(tmp_path_factory, chunk: int):
    """A recording server answering chunks of ``chunk`` actions: (its address, its log: one [connection, step,
    prompt] per request)."""
    log = tmp_path_factory.mktemp("recorder") / "requests.jsonl"
    proc, port = _start(["-c", RECORDER, str(log), str(chunk)])
    try:
        yield f"ws://127.0.0.1:{port}", log
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def recorder(tmp_path_factory):
    """A server of one action per reply: every sub-env asks at every step."""
    yield from _serve(tmp_path_factory, 1)


@pytest.fixture(scope="module")
def chunked_recorder(tmp_path_factory):
    """A server of 3 actions per reply: every sub-env asks at steps 0 and 3 of its 5-step episodes."""
    yield from _serve(tmp_path_factory, 3)


def _write_suite(path, num_envs: int) -> str:
    path.write_text(SUITE.format(num_envs=num_envs, steps=STEPS, variants=json.dumps(VARIANTS)))
    return str(path)


def _run(recorder, tmp_path, num_envs: int) -> tuple[dict[str, dict], list[list[list[str]]]]:
    """The suite run through the server with ``num_envs`` sub-envs: its lines by condition, and each new connection's
    calls (in order), each call the prompts of its requests (in row order: sub-env order, every sub-env every step)."""
    url, log = recorder
    seen = len(log.read_text().splitlines()) if log.exists() else 0
    suite_file = _write_suite(tmp_path / f"para{num_envs}.yaml", num_envs)
    proc = in_process("--suite", suite_file, "--policy-server", url, "--out", str(tmp_path / f"out{num_envs}"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    calls: dict[tuple[int, int], list[str]] = {}
    for connection, step, prompt in map(json.loads, log.read_text().splitlines()[seen:]):
        calls.setdefault((connection, step), []).append(prompt)
    connections = sorted({c for c, _ in calls})
    by_connection = [[calls[key] for key in sorted(calls) if key[0] == c] for c in connections]
    return {r["condition"]: r for r in read_records(tmp_path / f"out{num_envs}")}, by_connection


def _episodes(line: dict) -> dict[tuple[int, int], tuple[int, int]]:
    """(sub-env, ordinal) -> (episode seed, recorded variant index), for every episode of ``line``."""
    columns = ("episode_sub_envs", "episode_ordinals", "episode_seeds")
    indices = line["episode_conditions"]["prompt"]
    assert all(float(i).is_integer() and 0 <= i < len(VARIANTS) for i in indices)
    rows = zip(*(line[c] for c in columns), indices, strict=True)
    return {(sub_env, k): (seed, int(i)) for sub_env, k, seed, i in rows}


def _sent_as_recorded(line: dict, calls: list[list[str]], num_envs: int, per_episode: int = STEPS) -> None:
    """Every sub-env's requests over the round are its episodes' recorded variants, ``per_episode`` requests each,
    in episode order, at the same calls for every sub-env (the worker's probe before the round may hold any)."""
    episodes = _episodes(line)
    offsets = None  # the calls where the round may start, as every sub-env's requests so far allow
    for sub_env in range(num_envs):
        ordinals = sorted(k for s, k in episodes if s == sub_env)
        expected = [VARIANTS[episodes[sub_env, k][1]] for k in ordinals for _ in range(per_episode)]
        sent = [call[sub_env] for call in calls]
        found = {o for o in range(len(sent) - len(expected) + 1) if sent[o : o + len(expected)] == expected}
        offsets = found if offsets is None else offsets & found
        assert offsets, (sub_env, expected, sent)


def test_each_episode_is_sent_the_variant_its_recorded_index_names_in_any_batch_size(recorder, tmp_path):
    lines2, connections2 = _run(recorder, tmp_path, num_envs=2)
    lines4, connections4 = _run(recorder, tmp_path, num_envs=4)
    for lines, connections, num_envs in ((lines2, connections2, 2), (lines4, connections4, 4)):
        nominal, paraphrased = lines["nominal"], lines["paraphrased"]
        assert (nominal["status"], paraphrased["status"]) == ("ok", "ok")
        # the cells run one after the other, each on a client (a connection) of its own
        assert [len(c[0]) for c in connections] == [num_envs, num_envs]
        assert {p for call in connections[0] for p in call} == {"run forward"}  # the task's prompt
        assert nominal["prompt"] == "run forward" and "episode_conditions" not in nominal
        # the condition's variants replace the task's prompt: recorded as settings, the draws per episode
        assert "prompt" not in paraphrased and "prompt" not in paraphrased["settings"]["policy_kwargs"]
        assert paraphrased["condition_settings"] == {"prompt": VARIANTS}
        _sent_as_recorded(paraphrased, connections[1], num_envs)
        # each index is the episode's draw from its seed alone
        condition = Condition.parse({"prompt": VARIANTS})
        drawn = [condition.draw(seed)["prompt"] for seed in paraphrased["episode_seeds"]]
        assert paraphrased["episode_conditions"]["prompt"] == drawn
        assert len(set(drawn)) > 1  # 8 episodes: not all one variant
    # the same seed, another batch size: the episodes both ran (sub-envs 0-1, ordinals 0-1) got the same variants
    by_episode = [_episodes(lines2["paraphrased"]), _episodes(lines4["paraphrased"])]
    common = set(by_episode[0]) & set(by_episode[1])
    assert common == {(0, 0), (0, 1), (1, 0), (1, 1)}
    assert all(by_episode[0][e] == by_episode[1][e] for e in common)


def test_a_chunked_server_is_sent_each_episodes_variant_at_each_query(chunked_recorder, tmp_path):
    """The worker asks a server of chunks for the sub-envs whose chunk is spent, on their rows alone: each row's
    request still carries its own episode's variant."""
    lines, connections = _run(chunked_recorder, tmp_path, num_envs=3)
    assert [len(c[0]) for c in connections] == [3, 3]
    _sent_as_recorded(lines["paraphrased"], connections[1], 3, per_episode=-(-STEPS // 3))


def test_episodes_draw_every_variant_uniformly_and_the_other_settings_as_before():
    """Over 512 episodes each of 4 variants is drawn 128 +- 40 times; adding the variants changes no other draw."""
    plain = Condition.parse({"action_noise": [0.0, 0.2], "push": [-1.0, 1.0], "push_step": [10, 90]})
    with_prompt = Condition.parse({**plain.as_data(), "prompt": VARIANTS})
    counts = [0] * len(VARIANTS)
    for i in range(8):
        for k in range(64):
            seed = episode_seed(0, i, k)
            drawn = with_prompt.draw(seed)
            counts[int(drawn.pop("prompt"))] += 1
            assert drawn == plain.draw(seed)
    assert all(88 <= c <= 168 for c in counts), counts
    assert with_prompt.ranged == ("action_noise", "prompt", "push", "push_step")
    assert Condition.parse(with_prompt.as_data()) == with_prompt  # as a results line records it, for a replay


def test_a_prompt_condition_without_a_policy_server_is_refused_naming_it(tmp_path):
    path = _write_suite(tmp_path / "para.yaml", 2)
    with pytest.raises(ConfigError) as err:
        check_suite(parse(["--suite", path, "--checkpoint", "x.pt"]))
    message = str(err.value)
    assert message.startswith(f"{path}: tasks[0].conditions.paraphrased.prompt: the text sent to a policy server")
    assert "give --policy-server" in message and "\n" not in message
    proc = cli("--suite", path, "--checkpoint", "x.pt", "--out", str(tmp_path / "out"))
    assert proc.returncode != 0 and "conditions.paraphrased.prompt" in proc.stderr and "--policy-server" in proc.stderr
    served = parse(["--suite", path, "--policy-server", "ws://127.0.0.1:1"])
    check_suite(served)  # with a policy server the same suite passes, and the condition's cell sends no task prompt
    cells = load_suite(path).cells()
    assert [SuiteCell(c, "para").config(served.cfg).policy_kwargs.get("prompt") for c in cells] == ["run forward", None]


def test_a_local_policy_in_an_env_that_draws_prompts_is_refused_in_one_line():
    """The Python API: a policy that reads no ``prompt_variant`` would ignore the variants its episodes claim."""
    from helpers import mlp_policy

    def env():
        return make_env("HalfCheetah-v5", num_envs=2, max_steps=5, obs_norm=False, condition={"prompt": VARIANTS})

    with Evaluator(env, policy_factory=mlp_policy, num_trajectories=2, max_steps=5, seed=0) as ev:
        with pytest.raises(EvalError, match=r"condition .*: the policy reads no prompt; a policy server's client"):
            ev.evaluate()


TASK = "name: s\ntasks:\n  - env: HalfCheetah-v5\n    conditions:\n      p: {prompt: %s}\n"
SHAPE = f"prompt is a list of 2..{MAX_VARIANTS} texts, each of 1..{MAX_PROMPT} characters"


@pytest.mark.parametrize(
    "value, where",
    [
        ("go", "prompt"),
        ('["go"]', "prompt"),
        (json.dumps(["go"] * (MAX_VARIANTS + 1)), "prompt"),
        ('["go", ""]', "prompt[1]"),
        ('["go", "  "]', "prompt[1]"),
        ('["go", 7]', "prompt[1]"),
        (json.dumps(["go", "x" * (MAX_PROMPT + 1)]), "prompt[1]"),
    ],
)
def test_a_bad_prompt_value_is_one_line_naming_the_file_and_the_field(tmp_path, value, where):
    path = tmp_path / "bad.yaml"
    path.write_text(TASK % value)
    with pytest.raises(ConfigError) as err:
        load_suite(str(path))
    message = str(err.value)
    assert message.startswith(f"{path}: tasks[0].conditions.p.{where}: {SHAPE}"), message
    assert "\n" not in message and len(message) < 400


def test_the_prompt_bound_is_one_constant():
    assert suite.MAX_PROMPT is MAX_PROMPT
