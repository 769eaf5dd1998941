"""What a suite task's policy sees: its own ``cameras``, ``image_size``, ``frame_stack`` and ``prompt`` (the run's
flags the defaults), and one served policy (``--policy-server``) evaluated across a suite's tasks x conditions.

The server is real, on 127.0.0.1: a small openpi-protocol server (below) that records what each request
holds (its prompt, its state's and images' shapes) and answers zeros.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from launch_helpers import REPO, cli, read_records

from simeval.launch.cli import parse
from simeval.launch.config import ConfigError
from simeval.launch.suite import load_suite
from simeval.launch.suite_run import SuiteCell, check_suite

RECORDER = r"""
import asyncio, json, sys
import numpy as np
from websockets.asyncio.server import serve
from simeval.policy_kinds.wire import packb, unpackb

LOG, SEEN = sys.argv[1], set()
ACT = {17: 6, 11: 3}  # HalfCheetah-v5's and Hopper-v5's state and action sizes

async def handler(ws):
    await ws.send(packb({}))
    async for message in ws:
        request = unpackb(message)
        # simeval's step tags (simeval/step, simeval/step_requests) differ per step: not what a task sends
        seen = {k: (list(v.shape) if isinstance(v, np.ndarray) else v) for k, v in request.items()
                if not k.startswith("simeval/")}
        text = json.dumps(seen, sort_keys=True)
        if text not in SEEN:
            SEEN.add(text)
            with open(LOG, "a") as f:
                f.write(text + "\n")
        dim = ACT[request["observation/state"].shape[0]]
        await ws.send(packb({"actions": np.zeros(dim, np.float32)}))

async def main():
    async with serve(handler, "127.0.0.1", 0, max_size=None) as server:
        print(f"serving on ws://127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
        await asyncio.Future()

asyncio.run(main())
"""

SUITE = """\
name: seeing
episodes: 2
num_envs: 2
max_steps: 10
tasks:
  - env: HalfCheetah-v5
    image_size: 32
    prompt: run forward
    conditions:
      nominal: {}
      think-2: {inference_delay: 2}
  - env: Hopper-v5
    prompt: hop
"""


@pytest.fixture
def recorder(tmp_path):
    """The recording server; (its address, the file of the distinct requests it saw)."""
    log = tmp_path / "seen.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-c", RECORDER, str(log)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    line, deadline = "", time.monotonic() + 120
    while time.monotonic() < deadline and not line.startswith("serving"):
        line = proc.stdout.readline() or line
        if proc.poll() is not None:
            break
    assert line.startswith("serving"), proc.stderr.read()[-2000:]
    try:
        yield line.split()[-1], log
    finally:
        proc.kill()
        proc.wait()


def test_one_served_policy_runs_a_suite_and_each_task_sends_its_own_prompt_and_cameras(recorder, tmp_path):
    url, log = recorder
    suite = tmp_path / "seeing.yaml"
    suite.write_text(SUITE)
    out = tmp_path / "out"
    # --cameras and --image-size are the defaults: Hopper-v5 sets none, HalfCheetah-v5 its own image size
    proc = cli("--suite", str(suite), "--policy-server", url, "--cameras", "track", "--image-size", "16",
               "--out", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = [json.loads(line) for line in log.read_text().splitlines()]
    assert sorted(seen, key=lambda s: s["prompt"]) == [
        {"observation/image": [16, 16, 3], "observation/state": [11], "prompt": "hop"},
        {"observation/image": [32, 32, 3], "observation/state": [17], "prompt": "run forward"},
    ]
    lines = {(r["task"], r["condition"]): r for r in read_records(out)}
    assert [r["status"] for r in lines.values()] == ["ok"] * 3
    assert list(lines) == [("HalfCheetah-v5", "nominal"), ("HalfCheetah-v5", "think-2"), ("Hopper-v5", "nominal")]
    for (task, _), line in lines.items():
        prompt, size = ("run forward", 32) if task == "HalfCheetah-v5" else ("hop", 16)
        assert line["checkpoint"] == url and line["checkpoint_format"] == "remote"
        assert line["prompt"] == prompt and line["settings"]["policy_kwargs"]["prompt"] == prompt
        assert (line["settings"]["cameras"], line["settings"]["image_size"]) == (["track"], size)
        assert line["episode_seeds"] == lines[("HalfCheetah-v5", "nominal")]["episode_seeds"]  # common seeds


def test_a_task_without_its_own_settings_takes_the_flags(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text(SUITE)
    parsed = parse(["--suite", str(suite), "--policy-server", "ws://127.0.0.1:1", "--cameras", "track"])
    cheetah, hopper = (SuiteCell(load_suite(str(suite)).cells()[i], "seeing") for i in (0, 2))
    assert (cheetah.config(parsed.cfg).image_size, hopper.config(parsed.cfg).image_size) == (32, 64)
    assert hopper.config(parsed.cfg).cameras == ["track"] and hopper.config(parsed.cfg).policy_kwargs["prompt"] == "hop"
    checkpoint = parse(["--suite", str(suite), "--checkpoint", "x.pt"]).cfg  # a prompt is for a policy server
    assert "prompt" not in SuiteCell(load_suite(str(suite)).cells()[2], "seeing").config(checkpoint).policy_kwargs


TASK = "name: s\ntasks:\n  - env: HalfCheetah-v5\n"


@pytest.mark.parametrize(
    "extra, words",
    [
        ("    cameras: [track, track]\n", "tasks[0].cameras: a list of the model's camera names"),
        ("    cameras: {a: 1}\n", "tasks[0].cameras: a list of the model's camera names"),
        ("    image_size: 0\n", "tasks[0].image_size: a whole number in 1..1024, got 0"),
        ("    frame_stack: true\n", "tasks[0].frame_stack: a whole number in 1..64, got True"),
        ("    prompt: 7\n", "tasks[0].prompt: the task's text, 1..4096 characters, got 7"),
        ("    prompt: '  '\n", "tasks[0].prompt: the task's text"),
        ("    camera: track\n", "tasks[0].camera: unknown field"),
    ],
)
def test_a_bad_task_setting_is_one_line_naming_the_file_and_the_key(tmp_path, extra, words):
    path = tmp_path / "bad.yaml"
    path.write_text(TASK + extra)
    with pytest.raises(ConfigError) as err:
        load_suite(str(path))
    assert str(err.value).startswith(f"{path}: {words}") and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "extra, flags, words",
    [
        ("    image_size: 32\n", ["--checkpoint", "x.pt"], "tasks[0].image_size: sets the camera images of"),
        ("    conditions: {dim: {light_intensity: 0.5}}\n", ["--checkpoint", "x.pt"],
         "tasks[0].conditions.dim: light_intensity change the camera images of HalfCheetah-v5: give the task cameras."),
        ("    cameras: [track]\n    frame_stack: 2\n", ["--policy-server", "ws://127.0.0.1:1"],
         "tasks[0].frame_stack: a policy server is sent each camera's current image"),
        ("    frame_stack: 2\n", ["--policy-server", "ws://127.0.0.1:1", "--cameras", "track"],
         "tasks[0].frame_stack: a policy server"),
    ],
)  # fmt: skip
def test_what_a_task_sees_is_checked_against_the_run_in_one_line(tmp_path, extra, flags, words):
    path = tmp_path / "bad.yaml"
    path.write_text(TASK + extra)
    with pytest.raises(ConfigError) as err:
        check_suite(parse(["--suite", str(path), *flags]))
    assert str(err.value).startswith(f"{path}: {words}") and "\n" not in str(err.value)


def test_a_suite_file_names_nothing_that_is_imported_or_called(tmp_path):
    path = tmp_path / "evil.yaml"
    path.write_text(TASK + "    cameras: ['os:system']\n")
    with pytest.raises(ConfigError, match=r"tasks\[0\].cameras: a list of the model's camera names"):
        load_suite(str(path))
    path.write_text(TASK + "    prompt: 'os:system'\n")  # a prompt is text: sent as it is, never resolved
    (cell,) = load_suite(str(path)).cells()
    served = parse(["--suite", str(path), "--policy-server", "ws://127.0.0.1:1"]).cfg
    assert SuiteCell(cell, "s").config(served).policy_kwargs["prompt"] == "os:system"
