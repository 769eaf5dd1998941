"""simeval.serve_policy serving a policy that sees pixels (issue 35): real processes and sockets on 127.0.0.1.

A small CNN (tests/pixel_policy.py) trained on nothing, saved with VecNorm statistics that moved, is
served with ``--policy pixel_policy:pixel_actor --cameras track --image-size 32``; the launcher's
``--policy-server`` evaluation of it gives the returns of the same checkpoint evaluated in process,
and openpi's own client gets answers that depend on the image it sends.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from test_remote_policy import _start, _stop

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(REPO, "tests")

SAVE = textwrap.dedent(
    """
    import sys, torch
    sys.path.insert(0, {tests!r})
    from pixel_policy import pixel_actor
    from simeval import save_checkpoint
    from simeval.envs import OBS_NORM_ID, make_env
    from simeval.weights import resolve_model

    env = make_env("HalfCheetah-v5", num_envs=2, seed=3, cameras=["track"], image_size=32)
    torch.manual_seed(0)
    env.rollout(30, break_when_any_done=False)  # random actions: the VecNorm statistics move off 0 and 1
    vecnorm = resolve_model({{"env": env}}, OBS_NORM_ID)
    assert float(vecnorm.loc["observation.state"].abs().max()) > 0
    save_checkpoint({ckpt!r}, pixel_actor(env), obs_norm=vecnorm, step=7, env="HalfCheetah-v5")
    """
)


def _env() -> dict:
    return {"PYTHONPATH": TESTS, "MUJOCO_GL": os.environ.get("MUJOCO_GL") or "egl"}


@pytest.fixture(scope="module")
def pixel_server(tmp_path_factory):
    """A pixel policy's checkpoint (with VecNorm statistics) served on 127.0.0.1: (checkpoint, port)."""
    ckpt = str(tmp_path_factory.mktemp("pixels") / "step_000000007.pt")
    env = {**os.environ, **_env()}
    done = subprocess.run([sys.executable, "-c", SAVE.format(tests=TESTS, ckpt=ckpt)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    proc, port = _start(
        ["-m", "simeval.serve_policy", ckpt, "--port", "0", "--policy", "pixel_policy:pixel_actor"]
        + ["--cameras", "track", "--image-size", "32", "--batch-window-ms", "20"],
        env=_env(),
    )
    try:
        yield ckpt, port
    finally:
        _stop(proc)


def _launch(out, *args: str) -> dict:
    cmd = [sys.executable, "-m", "simeval.launch", "--cameras", "track", "--image-size", "32", "--num-envs", "2"]
    cmd += ["--episodes", "2", "--max-steps", "20", "--out", str(out), *args]
    done = subprocess.run(cmd, cwd=REPO, env={**os.environ, **_env()}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    with open(os.path.join(out, "results.jsonl")) as f:
        return [json.loads(line) for line in f][-1]


def test_a_served_pixel_policy_evaluates_as_the_same_policy_in_process(pixel_server, tmp_path):
    """--policy-server against serve_policy --cameras gives the returns of --checkpoint --policy --cameras.

    Tolerance as for state policies (docs/remote_policies.md): one client, each step's two requests in
    one pass, so the same float32 operations on the same rows: 1e-4 relative.
    """
    ckpt, port = pixel_server
    remote = _launch(tmp_path / "remote", "--policy-server", f"ws://127.0.0.1:{port}", "--env", "HalfCheetah-v5")
    local = _launch(tmp_path / "local", "--checkpoint", ckpt, "--policy", "pixel_policy:pixel_actor")
    assert local["plan"]["obs_norm"] is True and remote["plan"]["obs_norm"] is False  # the server normalises
    assert remote["episode_seeds"] == local["episode_seeds"]
    np.testing.assert_allclose(remote["episode_returns"], local["episode_returns"], rtol=1e-4)


def test_openpi_client_gets_actions_that_depend_on_the_image(pixel_server):
    """openpi's WebsocketClientPolicy: metadata naming the image key and shape; the action changes with the image
    alone; an image of another size is openpi's error frame, one line."""
    from openpi_client.websocket_client_policy import WebsocketClientPolicy

    _, port = pixel_server
    client = WebsocketClientPolicy("127.0.0.1", port)
    meta = client.get_server_metadata()
    assert meta["images"] == {"observation/image": [32, 32, 3]} and meta["obs_dim"] == 17
    rng = np.random.default_rng(0)
    state = rng.normal(size=17).astype(np.float32)
    dark, bright = np.zeros((32, 32, 3), np.uint8), np.full((32, 32, 3), 200, np.uint8)
    first = client.infer({"observation/state": state, "observation/image": dark})["actions"]
    again = client.infer({"observation/state": state, "observation/image": dark})["actions"]
    other = client.infer({"observation/state": state, "observation/image": bright})["actions"]
    assert first.shape == (6,) and np.array_equal(first, again) and not np.allclose(first, other)
    with pytest.raises(RuntimeError, match=r"'observation/image' must be a uint8 image of shape \[32, 32, 3\]"):
        client.infer({"observation/state": state, "observation/image": np.zeros((64, 64, 3), np.uint8)})


@pytest.mark.parametrize(
    "args, words",
    [
        (["--cameras", "track", "--policy", "simeval.policies:gaussian_actor"], "builds a policy of the state vector"),
        (["--image-size", "32"], "--image-size sets the camera images: add --cameras CAMERA."),
        (["--policy", "pixel_policy:pixel_actor", "--cameras", "track", "--image-key", "wrist=x"],
         "--image-key names cameras not in --cameras: wrist"),
        (["--policy", "pixel_policy:pixel_actor", "--cameras", "track", "--image-key", "track"],
         "--image-key takes CAMERA=KEY"),
    ],
)  # fmt: skip
def test_pixel_flag_errors_are_one_line(pixel_server, args, words):
    ckpt, _ = pixel_server
    done = subprocess.run([sys.executable, "-m", "simeval.serve_policy", ckpt, "--port", "0", *args], cwd=REPO,
                          env={**os.environ, **_env()}, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and words in done.stderr, done.stderr
