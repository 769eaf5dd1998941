"""Section 3: where each backend builds and runs things, init_fn order, named Ray evaluators."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap
import threading

import pytest
import torch
from helpers import const_policy, count_env, probe_env, video_env, where_am_i

from simeval import Evaluator

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_thread_backend_builds_env_and_policy_inside_the_worker_thread():
    built_in = {}

    def env_factory():
        built_in["env"] = threading.current_thread().name
        return count_env()

    def policy_factory(env):
        built_in["policy"] = threading.current_thread().name
        return const_policy()

    ev = Evaluator(env_factory, policy_factory=policy_factory, num_trajectories=1)
    try:
        assert built_in == {}  # lazy: nothing built on the caller's thread
        ev.evaluate()
    finally:
        ev.shutdown()
    assert built_in == {"env": "simeval-thread-worker", "policy": "simeval-thread-worker"}


@pytest.mark.parametrize("backend", ["process", "ray"], indirect=True)
def test_remote_backends_run_the_env_in_another_process(backend):
    ev = Evaluator(count_env, policy_factory=const_policy, num_trajectories=1, metrics_fn=where_am_i, backend=backend)
    try:
        result = ev.evaluate()
    finally:
        ev.shutdown()
    assert result["eval/pid"] != os.getpid()


def test_ray_actor_really_requests_the_gpus(ray_cluster):
    ev = Evaluator(
        count_env, policy_factory=const_policy, num_trajectories=1, metrics_fn=where_am_i, backend="ray", num_gpus=1
    )
    try:
        result = ev.evaluate()
    finally:
        ev.shutdown()
    assert result["eval/cuda_visible"] == 0.0  # Ray gave the actor logical GPU 0
    no_gpu = Evaluator(
        count_env, policy_factory=const_policy, num_trajectories=1, metrics_fn=where_am_i, backend="ray", num_gpus=0
    )
    try:
        assert no_gpu.evaluate()["eval/cuda_visible"] == -1.0
    finally:
        no_gpu.shutdown()


def test_dump_video_runs_after_each_round_where_the_env_lives(backend, tmp_path):
    path = str(tmp_path / "dumps.txt")
    ev = Evaluator(functools.partial(probe_env, path), policy_factory=const_policy, num_trajectories=1, backend=backend)
    try:
        ev.evaluate(step=10)
        ev.trigger_eval(step=20)
        ev.wait(60)
    finally:
        ev.shutdown()
    lines = [line.split() for line in open(path).read().splitlines()]
    assert [int(step) for _, step in lines] == [10, 20]
    pids = {int(pid) for pid, _ in lines}
    assert len(pids) == 1
    assert (pids == {os.getpid()}) == (backend == "thread")


def test_dump_video_false_skips_dump(tmp_path):
    path = tmp_path / "dumps.txt"
    ev = Evaluator(
        functools.partial(probe_env, str(path)), policy_factory=const_policy, num_trajectories=1, dump_video=False
    )
    try:
        ev.evaluate()
    finally:
        ev.shutdown()
    assert not path.exists()


TRAIN_SCRIPT = textwrap.dedent(
    """
    import os, sys
    import torch  # a training script imports torch at its top
    sys.path.insert(0, {tests!r})
    from helpers import const_policy, count_env
    from simeval import Evaluator

    def init_fn():
        # Isaac Lab's AppLauncher refuses to start once torch is loaded.
        if "torch" in sys.modules:
            raise RuntimeError("torch was imported before init_fn")
        os.environ["SIMEVAL_INIT_RAN"] = "1"

    def make_env():
        assert os.environ.get("SIMEVAL_INIT_RAN") == "1", "env built before init_fn"
        return count_env()

    if __name__ == "__main__":
        backend, init = sys.argv[1], sys.argv[2]
        if backend == "ray":
            import ray
            ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False)
        ev = Evaluator(make_env, policy_factory=const_policy, num_trajectories=2, backend=backend,
                       init_fn=init_fn if init == "callable" else "torchfree_init:torch_free_init",
                       num_gpus=0)
        try:
            print("REWARD", ev.evaluate(const_policy(w=4.0))["eval/reward"])
        finally:
            ev.shutdown()
    """
)


def _run_script(tmp_path, source: str, *args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    script = tmp_path / "train.py"
    script.write_text(source)
    env = dict(os.environ, PYTHONPATH=REPO, **(env_extra or {}))
    return subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path
    )


def _ray_address(ray) -> str:
    return ray.get_runtime_context().gcs_address


@pytest.mark.parametrize("init", ["callable", "string"])
@pytest.mark.parametrize("backend", ["process", "ray"], indirect=True)
def test_init_fn_runs_before_torch_even_when_the_script_imports_torch(backend, init, tmp_path):
    import ray

    extra = {"RAY_ADDRESS": _ray_address(ray)} if backend == "ray" else {}
    out = _run_script(tmp_path, TRAIN_SCRIPT.format(tests=os.path.join(REPO, "tests")), backend, init, env_extra=extra)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "REWARD 12.0" in out.stdout


CONNECT_SCRIPT = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, {tests!r})
    import ray
    ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False)
    import simeval
    from helpers import const_policy
    handle = simeval.connect("simeval-test-served")
    assert handle.pending is False
    assert handle.trigger_eval(const_policy(w=5.0), step=42) is True
    result = handle.wait(120)
    print("RESULT", result["served/step"], result["served/reward"])
    handle.shutdown()
    """
)


def test_named_ray_evaluator_is_reachable_from_another_process(ray_cluster, tmp_path):
    ev = Evaluator(
        count_env,
        policy_factory=const_policy,
        num_trajectories=2,
        backend="ray",
        num_gpus=0,
        log_prefix="served",
        ray_kwargs={"name": "simeval-test-served"},
    )
    try:
        assert ev.evaluate(const_policy(w=1.0))["served/reward"] == 3.0
        out = _run_script(
            tmp_path,
            CONNECT_SCRIPT.format(tests=os.path.join(REPO, "tests")),
            env_extra={"RAY_ADDRESS": _ray_address(ray_cluster)},
        )
        assert out.returncode == 0, out.stderr[-3000:]
        assert "RESULT 42 15.0" in out.stdout
        # The served actor survives the other process's shutdown() of its handle.
        assert ev.evaluate(const_policy(w=2.0))["served/reward"] == 6.0
    finally:
        ev.shutdown()
    with pytest.raises(ValueError, match="no simeval evaluator named"):
        import simeval

        simeval.connect("simeval-test-served")


def test_import_simeval_is_light():
    """What a training script or an Isaac Lab worker imports before init_fn loads no heavy package."""
    light = [
        "simeval",
        "simeval.caller.evaluator",
        "simeval.metrics",
        "simeval.settings",
        "simeval.errors",
        "simeval.caller.requests",
        "simeval.records",
        "simeval.caller.ray_eval_worker",
        "simeval.backends.host",
        "simeval.launch",
        "simeval.launch.cli",
        "simeval.hooks",
    ]
    code = (
        f"import sys, importlib; [importlib.import_module(m) for m in {light!r}]; "
        "heavy = [m for m in ('torch','tensordict','torchrl','ray','mujoco') if m in sys.modules]; "
        "print(heavy); assert not heavy, heavy"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=REPO)
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_recorded_frames_come_back_as_video_and_are_dumped(backend, tmp_path):
    ev = Evaluator(
        functools.partial(video_env, str(tmp_path)), policy_factory=const_policy, num_trajectories=1, backend=backend
    )
    try:
        result = ev.evaluate(step=3)
    finally:
        ev.shutdown()
    video = result["eval/video"]
    assert video.dtype == torch.uint8 and video.shape[-3:] == (3, 8, 8)
    brightness = [int(f[0, 0, 0]) for f in video.reshape(-1, 3, 8, 8)]
    assert "0,1,2,3,4" in ",".join(map(str, brightness))  # an episode's frames, in order
    assert list(tmp_path.rglob("*.pt")), "VideoRecorder.dump() wrote nothing"


def test_ray_backend_starts_a_local_cluster_when_none_is_running(tmp_path):
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {os.path.join(REPO, "tests")!r})
        from helpers import const_policy, count_env
        from simeval import Evaluator
        ev = Evaluator(count_env, policy_factory=const_policy, num_trajectories=1, backend="ray", num_gpus=0)
        print("REWARD", ev.evaluate()["eval/reward"])
        ev.shutdown()
        import ray; ray.shutdown()
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    import tempfile

    # Its own short temp dir (AF_UNIX paths are capped at 107 bytes): no cluster to find there.
    env["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    try:
        out = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=240,
            env=dict(env, PYTHONPATH=REPO),
            cwd=tmp_path,
        )
    finally:
        import shutil

        shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "REWARD 3.0" in out.stdout


def test_weight_sync_schemes_select_process_isolation_as_in_torchrl():
    from torchrl.weight_update import SharedMemWeightSyncScheme

    schemes = {"policy": SharedMemWeightSyncScheme()}
    with pytest.raises(ValueError, match="requires `env` to be a callable"):
        Evaluator(count_env(), const_policy(), weight_sync_schemes=schemes)
    ev = Evaluator(
        count_env, policy_factory=const_policy, num_trajectories=1, metrics_fn=where_am_i, weight_sync_schemes=schemes
    )
    try:
        assert ev.backend_name == "process"
        result = ev.evaluate(const_policy(w=2.0))
    finally:
        ev.shutdown()
    assert result["eval/pid"] != os.getpid() and result["eval/reward"] == 6.0
