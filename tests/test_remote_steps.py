"""One client of serve_policy gets the in-process numbers exactly (issue 45, item 5).

simeval's client tags each request with its step (``simeval/step``, ``simeval/step_requests``) and the batcher
closes a forward pass only on whole client steps, so one client's step is one pass of the same rows the in-process
policy call sees: the same float32 operations, bit-identical returns. The server runs with a zero batch window,
which split a step's 16 requests over several passes before (3 of 16 returns differed by up to 4.8%).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import numpy as np
from test_remote_policy import ROOT, _start, _stop

from simeval.checkpoints.shipped import shipped_checkpoint


def _launch(out, *args: str) -> list[float]:
    cmd = [sys.executable, "-m", "simeval.launch", "--num-envs", "16", "--episodes", "16", "--max-steps", "100"]
    done = subprocess.run([*cmd, "--out", str(out), *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    with open(os.path.join(out, "results.jsonl")) as f:
        return [json.loads(line) for line in f][-1]


def test_one_client_through_the_server_gets_the_in_process_returns_exactly(tmp_path):
    proc, port = _start(["-m", "simeval.serve_policy", shipped_checkpoint(), "--port", "0", "--batch-window-ms", "0"])
    try:
        remote = _launch(tmp_path / "remote", "--policy-server", f"ws://127.0.0.1:{port}", "--env", "HalfCheetah-v5")
    finally:
        summary = _stop(proc)
    local = _launch(tmp_path / "local", "--checkpoint", shipped_checkpoint())
    assert remote["episode_seeds"] == local["episode_seeds"]
    assert remote["episode_returns"] == local["episode_returns"], summary  # ==: bit for bit, not approx


def test_serve_policy_in_a_hostile_directory_imports_nothing_from_it(tmp_path):
    """The server's VecNorm lock needs multiprocessing's resource tracker, which multiprocessing would start with
    ``python -c`` in the working directory (importing a ``multiprocessing.py`` lying there): serve_policy starts it
    without the working directory on its path (the console script's way, ``entry_code``)."""
    from test_child_path import CHECKPOINT, REPO, TESTS, hostile_dir, markers

    from simeval.backends.bootstrap import entry_code

    run_dir = hostile_dir(tmp_path / "run")
    cmd = [sys.executable, "-c", entry_code("simeval.serve_policy", "main_exit"), CHECKPOINT, "--port", "0"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([REPO, TESTS])}
    proc = subprocess.Popen(cmd, cwd=run_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
    finally:
        err = _stop(proc)
    assert line.startswith("serving"), err[-2000:]
    assert markers(run_dir) == [], err[-2000:]
    assert "resource_tracker" not in err, err[-2000:]


# -- the batcher's steps, in process -------------------------------------------------------------------------------
def _sizes(
    steps: list[tuple[int, int | None]], pause_s: float = 0.0, read_each_step: bool = True, **kwargs
) -> list[int]:
    """The passes' sizes when one connection sends ``steps`` (requests, the tag's count; None: untagged) one after
    another, ``pause_s`` between a step's requests, reading a step's replies before the next (else all at the
    end)."""
    from test_server_hardening import STATE, InProcess, connect

    from simeval.policy_kinds.wire import STEP_KEY, STEP_REQUESTS_KEY, packb

    sizes: list[int] = []

    def forward(batch: dict):
        sizes.append(len(batch[STATE]))
        return np.tanh(batch[STATE][:, :6])

    async def scenario(url: str) -> None:
        ws = await connect(url)
        for step, (requests, count) in enumerate(steps):
            tag = {STEP_KEY: step, STEP_REQUESTS_KEY: count} if count is not None else {}
            for _ in range(requests):
                await ws.send(packb({STATE: np.zeros(17, np.float32), **tag}))
                await asyncio.sleep(pause_s)
            for _ in range(requests if read_each_step else 0):
                await asyncio.wait_for(ws.recv(), 30)
        for _ in range(0 if read_each_step else sum(n for n, _ in steps)):
            await asyncio.wait_for(ws.recv(), 30)
        await ws.close()

    with InProcess(forward, **kwargs) as server:
        asyncio.run(scenario(server.url))
    return sizes


def test_a_tagged_step_is_one_pass_however_slowly_its_requests_come():
    """A zero window, 5 ms between a step's requests: one pass per step; untagged requests go one by one."""
    assert _sizes([(16, 16), (3, 3)], pause_s=0.005, window_s=0.0) == [16, 3]
    assert _sizes([(3, None)], pause_s=0.005, window_s=0.0) == [1, 1, 1]


def test_a_step_past_the_caps_still_gets_its_answers():
    """A step of more than --max-batch fills whole passes; one past --max-in-flight goes as the cap lets it in;
    a step that sends fewer requests than its tag says goes when the next step begins (never a deadlock)."""
    assert _sizes([(20, 20)], window_s=0.0, max_batch=8) == [8, 8, 4]
    assert sum(_sizes([(10, 10)], window_s=0.0, max_in_flight=4)) == 10
    assert sum(_sizes([(2, 5), (1, 1)], window_s=0.0, read_each_step=False)) == 3
