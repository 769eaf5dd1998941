"""Remote policies: python -m simeval.serve_policy and --policy-server, real processes and sockets on 127.0.0.1.

The oracle for the protocol is openpi's own client (openpi-client, installed by the Makefile
without its dependencies: it pins numpy < 2, and its client needs only websockets and msgpack).
Fault cases run against a small misbehaving server written from the protocol (FAKE below), in a
process of its own so that it can be killed mid-round.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from simeval import EvalError, Evaluator
from simeval.checkpoints.shipped import shipped_checkpoint
from simeval.envs import make_env
from simeval.policy_kinds import kind_of
from simeval.policy_kinds.remote import remote_policy
from simeval.policy_kinds.remote_client import RemoteClientPolicy, RemotePolicyError
from simeval.policy_kinds.wire import TOKEN_ENV, WireError, packb, unpackb

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKEN = "test-token-35"
STARTUP_S = 300  # a loaded 2-core machine takes long to import torch
KEYS = {"state": "observation/state", "actions": "actions"}


def _start(args: list[str], env: dict | None = None) -> tuple[subprocess.Popen, int]:
    """Start a server process; (process, the port it printed once listening)."""
    proc = subprocess.Popen(
        [sys.executable, *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    line = ""
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("serving") or not line:
            break
    if not line.startswith("serving"):
        proc.kill()
        raise AssertionError(f"server did not start: {line!r} {proc.stderr.read()[-2000:]}")
    return proc, int(line.rsplit(":", 1)[1])


def _stop(proc: subprocess.Popen) -> str:
    """SIGINT the server; its stderr (the batching summary)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return err


@pytest.fixture(scope="module")
def served():
    """The shipped final checkpoint served on 127.0.0.1 with a token (clients get it from the environment)."""
    proc, port = _start(
        ["-m", "simeval.serve_policy", shipped_checkpoint(), "--port", "0", "--token", TOKEN, "--batch-window-ms", "20"]
        + ["--max-message", "1M"]
    )
    old = os.environ.get(TOKEN_ENV)
    os.environ[TOKEN_ENV] = TOKEN
    try:
        yield f"ws://127.0.0.1:{port}", port, proc
    finally:
        if old is None:
            os.environ.pop(TOKEN_ENV, None)
        else:
            os.environ[TOKEN_ENV] = old
        _stop(proc)


def _launch(out, *args: str) -> dict:
    cmd = [sys.executable, "-m", "simeval.launch", "--num-envs", "4", "--episodes", "4", "--max-steps", "50"]
    done = subprocess.run([*cmd, "--out", str(out), *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    with open(os.path.join(out, "results.jsonl")) as f:
        return [json.loads(line) for line in f][-1]


# -- the protocol ---------------------------------------------------------------------------------------
def test_wire_format_is_openpis_and_refuses_what_it_does_not_rebuild():
    from openpi_client import msgpack_numpy

    message = {"observation/state": np.arange(17, dtype=np.float32), "prompt": "run", "n": np.int64(3)}
    for got in (unpackb(msgpack_numpy.packb(message)), msgpack_numpy.unpackb(packb(message))):
        assert got["prompt"] == "run" and got["n"] == 3
        np.testing.assert_array_equal(got["observation/state"], message["observation/state"])
    bad = {b"__ndarray__": True, b"data": b"\0" * 8, b"dtype": "|O", b"shape": [1]}
    with pytest.raises(WireError, match="dtype object"):
        unpackb(msgpack_numpy.packb({"a": bad}))
    short = {b"__ndarray__": True, b"data": b"\0" * 4, b"dtype": "<f4", b"shape": [2]}
    with pytest.raises(WireError, match="needs 8 bytes"):
        unpackb(msgpack_numpy.packb({"a": short}))
    with pytest.raises(WireError, match="not a msgpack"):
        unpackb(b"\xc1")


def test_openpi_client_is_answered_by_serve_policy(served):
    """openpi's own client: metadata first, then actions equal to the policy's in-process action."""
    from openpi_client.websocket_client_policy import WebsocketClientPolicy

    from simeval.serve_policy import load_served

    url, port, _ = served
    client = WebsocketClientPolicy("127.0.0.1", port, api_key=TOKEN)
    meta = client.get_server_metadata()
    assert meta["env"] == "HalfCheetah-v5" and meta["obs_dim"] == 17 and meta["action_dim"] == 6
    obs = np.random.default_rng(0).normal(size=17).astype(np.float32)
    reply = client.infer({"observation/state": obs})
    assert reply["actions"].shape == (6,) and reply["actions"].dtype == np.float32
    here = load_served(shipped_checkpoint(), None, None, None)
    np.testing.assert_array_equal(reply["actions"], here(obs[None])[0])  # one request, one row: bit for bit
    with pytest.raises(RuntimeError, match=r"shape \[17\], got shape \[3\]"):  # openpi's error frame, one line
        client.infer({"observation/state": np.zeros(3, np.float32)})


def test_a_token_is_required_and_a_server_beyond_loopback_refuses_to_start_without_one(served, monkeypatch):
    url, _, _ = served
    monkeypatch.delenv(TOKEN_ENV)
    with pytest.raises(RemotePolicyError, match=f"HTTP 401.*{TOKEN_ENV}"):
        RemoteClientPolicy(url, 17, 6, chunk=None, keys=KEYS, timeout_s=30, max_message_bytes=2**20)
    done = subprocess.run(
        [sys.executable, "-m", "simeval.serve_policy", shipped_checkpoint(), "--port", "0", "--host", "0.0.0.0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=STARTUP_S,
        env={k: v for k, v in os.environ.items() if k != TOKEN_ENV},
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--token" in done.stderr


def test_rows_answered_in_any_batch_agree_to_float32_rounding(served):
    """The tolerance batch composition causes, per action: the same observation alone or among 64."""
    url, _, _ = served
    client = RemoteClientPolicy(url, 17, 6, chunk=None, keys=KEYS, timeout_s=60, max_message_bytes=2**20)
    obs = np.random.default_rng(1).normal(size=(64, 17)).astype(np.float32)
    together = client.ask(obs)
    alone = np.stack([client.ask(obs[i : i + 1])[0] for i in range(8)])
    assert np.abs(together[:8] - alone).max() <= 1e-6


def test_concurrent_clients_share_one_forward_pass(served):
    """Requests of two connections arriving together are answered by one forward pass."""
    from openpi_client.websocket_client_policy import WebsocketClientPolicy

    _, port, _ = served
    clients = [WebsocketClientPolicy("127.0.0.1", port, api_key=TOKEN) for _ in range(2)]
    barrier, seen = threading.Barrier(2), []

    def ask(client):
        for _ in range(50):
            barrier.wait()
            seen.append(client.infer({"observation/state": np.zeros(17, np.float32)})["server_timing"])

    threads = [threading.Thread(target=ask, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert max(s["batch_clients"] for s in seen) == 2 and max(s["batch_size"] for s in seen) == 2


# -- evaluation through the server equals in-process ------------------------------------------------------
@pytest.mark.parametrize("backend", ["thread", "process"])
def test_policy_server_evaluation_equals_in_process(served, tmp_path, backend):
    """--policy-server against serve_policy gives the in-process returns of the same checkpoint.

    Tolerance: where the server's passes hold the same rows as the in-process policy calls (one
    client, each call's requests joined in one pass), the same float32 operations run on the same
    rows, and returns agree to float32 summation (1e-4 relative). Another batch composition rounds
    actions differently (<= 1e-6, test above), and HalfCheetah amplifies that over an episode.
    """
    url, _, _ = served
    remote = _launch(tmp_path / "remote", "--policy-server", url, "--env", "HalfCheetah-v5", "--backend", backend)
    local = _launch(tmp_path / "local", "--checkpoint", shipped_checkpoint())
    assert remote["checkpoint_format"] == "remote" and remote["plan"]["obs_norm"] is False
    assert "token" not in json.dumps(remote)
    assert remote["episode_seeds"] == local["episode_seeds"]
    np.testing.assert_allclose(remote["episode_returns"], local["episode_returns"], rtol=1e-4)


# -- faults -----------------------------------------------------------------------------------------------
FAKE = r"""
import asyncio, os, sys
import numpy as np
from websockets.asyncio.server import serve
from simeval.policy_kinds.wire import packb, unpackb

MODE = sys.argv[1]
COUNT = [0]

async def handler(ws):
    await ws.send(packb({"obs_dim": 17, "action_dim": 6}))
    async for message in ws:
        state = unpackb(message)["observation/state"]
        COUNT[0] += 1
        print(COUNT[0], flush=True)
        if MODE == "die" and COUNT[0] > 10:
            os._exit(1)
        if MODE == "hang":
            await asyncio.sleep(3600)
        if MODE == "image":  # a policy that sees pixels: openpi's uint8 HWC image, or an error frame
            image = unpackb(message).get("observation/image")
            ok = isinstance(image, np.ndarray) and image.dtype == np.uint8
            if not (ok and image.ndim == 3 and image.shape[2] == 3):
                await ws.send("ValueError: no uint8 [H, W, 3] observation/image in the request")
                continue
            actions = np.tanh(state[:6].astype(np.float64) + image.mean() / 255.0).astype(np.float32)
            await ws.send(packb({"actions": actions}))
            continue
        actions = {
            "ok": np.tanh(state[:6]),
            "nan": np.full(6, np.nan, np.float32),
            "shape": np.zeros((2, 5), np.float32),
            "big": np.zeros(1_000_000, np.float32),
            "chunk": np.stack([np.tanh(state[:6])] * 4),
        }.get(MODE, np.tanh(state[:6]))
        if MODE == "text":
            await ws.send("Traceback (most recent call last):\nValueError: the model broke")
            continue
        await ws.send(packb({"actions": actions.astype(np.float32)}))

async def main():
    port = int(sys.argv[2])
    async with serve(handler, "127.0.0.1", port, max_size=None) as server:
        print(f"serving fake on ws://127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
        await asyncio.Future()

asyncio.run(main())
"""


def _fake(mode: str, port: int = 0) -> tuple[subprocess.Popen, int]:
    return _start(["-c", FAKE, mode, str(port)])


@pytest.mark.parametrize(
    "mode, message",
    [
        ("nan", "NaN or infinite 'actions'"),
        ("shape", r"'actions' of shape \[2, 5\], expected \[1, 6\] or \[6\]"),
        ("big", "sent a message over 65536 bytes"),
        ("text", "answered an error: ValueError: the model broke"),
        ("hang", r"did not answer within 1 s"),
    ],
)
def test_a_bad_reply_is_one_line(mode, message):
    proc, port = _fake(mode)
    try:
        client = RemoteClientPolicy(
            f"ws://127.0.0.1:{port}", 17, 6, chunk=None, keys=KEYS, timeout_s=1, max_message_bytes=65536
        )
        start = time.monotonic()
        with pytest.raises(RemotePolicyError, match=message) as err:
            client.ask(np.zeros((3, 17), np.float32))
        assert "\n" not in str(err.value) and time.monotonic() - start < 10
    finally:
        proc.kill()
        proc.wait()


def test_a_server_that_dies_mid_round_fails_the_round_and_the_next_round_reconnects():
    proc, port = _fake("die")  # exits after 10 requests: mid-round
    url = f"ws://127.0.0.1:{port}"
    env = functools.partial(make_env, "HalfCheetah-v5", num_envs=2, max_steps=50, obs_norm=False)
    policy = functools.partial(remote_policy, url=url, timeout_s=5.0)
    try:
        with Evaluator(env, policy_factory=policy, num_trajectories=2, max_steps=50, seed=0) as ev:
            start = time.monotonic()
            with pytest.raises(EvalError, match="policy server at ws://127.0.0.1"):
                ev.evaluate()
            assert time.monotonic() - start < 120
            proc.wait(timeout=30)
            proc, _ = _fake("ok", port)  # back on the same port: the next round reconnects
            result = ev.evaluate()
            assert result["eval/num_episodes"] == 2
    finally:
        proc.kill()
        proc.wait()


def test_the_remote_kind_owns_the_client_and_declares_its_chunk():
    proc, port = _fake("ok")
    try:
        client = RemoteClientPolicy(
            f"ws://127.0.0.1:{port}", 17, 6, chunk=4, keys=KEYS, timeout_s=5, max_message_bytes=2**20
        )
        assert kind_of(client).name == "remote" and client.chunk == 4
        with pytest.raises(RemotePolicyError, match=r"expected \[4, 6\]"):
            client.ask(np.zeros((1, 17), np.float32))
    finally:
        proc.kill()
        proc.wait()


def test_a_request_over_the_servers_size_cap_closes_its_connection(served):
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    url, _, _ = served
    with connect(url, additional_headers={"Authorization": f"Api-Key {TOKEN}"}, max_size=2**20) as ws:
        ws.recv(timeout=30)  # the metadata
        ws.send(packb({"observation/state": np.zeros(400_000, np.float32)}))  # 1.6 MB > --max-message 1M
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=30)
        assert closed.value.rcvd.code == 1009


def _requests(mode: str, chunk: int | None) -> int:
    """Requests a fake server in ``mode`` got for one round of 2 sub-envs x 20 steps."""
    proc, port = _fake(mode)
    try:
        env = functools.partial(make_env, "HalfCheetah-v5", num_envs=2, max_steps=20, obs_norm=False)
        policy = functools.partial(remote_policy, url=f"ws://127.0.0.1:{port}", chunk=chunk, timeout_s=10.0)
        with Evaluator(env, policy_factory=policy, num_trajectories=2, max_steps=20, seed=0) as ev:
            assert ev.evaluate()["eval/episode_length"] == 20
    finally:
        proc.kill()
        out, _ = proc.communicate()
    return int(out.split()[-1])


def test_chunks_are_played_whole_before_the_server_is_asked_again():
    """Chunks of 4 per sub-env: a quarter of the requests of one action per reply (plus each episode's start)."""
    plain, chunked = _requests("ok", None), _requests("chunk", 4)
    assert plain >= 40 and chunked <= plain / 3


BY_HAND = """
import json, sys, torch
from tensordict.nn import TensorDictModule
from simeval.envs import make_env

env = make_env("HalfCheetah-v5", num_envs=2, seed=0, max_steps=20, cameras=["track"], image_size=32, obs_norm=False)

def act(state, image):  # the fake server's policy, on the images it is sent (uint8 HWC)
    pixels = (image * 255.0).round().to(torch.uint8).double()
    return torch.tanh(state[..., :6].double() + pixels.mean(dim=(-3, -2, -1), keepdim=False)[..., None] / 255.0).float()

policy = TensorDictModule(act, in_keys=["observation.state", "observation.images.track"], out_keys=["action"])
with torch.no_grad():
    print(json.dumps(env.rollout(20, policy)["next", "reward"].sum(1).view(-1).tolist()))
"""


def test_camera_images_reach_a_policy_server_as_openpis_uint8_images(tmp_path):
    """--cameras with --policy-server: each sub-env's image goes as observation/image (uint8 [H, W, 3]) beside the
    state; the returns equal a rollout by hand of the server's policy on the same images."""
    proc, port = _fake("image")
    try:
        done = subprocess.run(
            [sys.executable, "-m", "simeval.launch", "--policy-server", f"ws://127.0.0.1:{port}", "--env",
             "HalfCheetah-v5", "--cameras", "track", "--image-size", "32", "--num-envs", "2", "--episodes", "2",
             "--max-steps", "20", "--out", str(tmp_path / "out")],
            cwd=ROOT, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    finally:
        _stop(proc)
    assert done.returncode == 0, done.stderr[-2000:]
    with open(tmp_path / "out" / "results.jsonl") as f:
        (line,) = [json.loads(x) for x in f]
    env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL") or "egl"}
    by_hand = subprocess.run([sys.executable, "-c", BY_HAND], cwd=ROOT, capture_output=True, text=True, env=env,
                             timeout=300)  # fmt: skip
    assert by_hand.returncode == 0, by_hand.stderr[-2000:]
    np.testing.assert_allclose(line["episode_returns"], json.loads(by_hand.stdout), rtol=1e-5)
    assert line["settings"]["cameras"] == ["track"]
