"""The trust boundary (docs/security.md): data files never run code, never exhaust memory.

Each test is a repro of a way a checkpoint, a run directory or a YAML file did run
code or take the launcher down, run the way a user would meet it: through
``--checkpoint``, ``--watch``, ``--backend process`` and ``python -m simeval.export``.
The oracle: no marker file (nothing ran), one line naming the file (exit 2 for
``--checkpoint``, a failed results line under ``--watch`` while the genuine
checkpoint beside it is evaluated), and no allocation past a bound (launcher runs
get a 3 GiB heap limit, far below what the bombs would take).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import zipfile

import pytest
import torch
from helpers import write_dist_info
from launch_helpers import REPO, TESTS, cli, read_records, write_checkpoints

from simeval.checkpoints import CheckpointError, load_checkpoint

HEAP = 3 << 30  # the bombs below would take 10 GiB and more
SMALL = ["--episodes", "2", "--num-envs", "2", "--max-steps", "20"]
POLL = ["--poll-interval", "0.2"]


def _bounded_heap() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_DATA, (HEAP, HEAP))


def _run(module: str, *args: str, cwd: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m module args`` with a bounded heap, the way a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=cwd or REPO,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([REPO, TESTS]), **(env or {})},
        preexec_fn=_bounded_heap,
        stdin=subprocess.DEVNULL,
    )


def _error_line(proc: subprocess.CompletedProcess, prog: str) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.startswith(f"{prog}: error: ")]
    assert proc.returncode == 2 and len(lines) == 1, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return lines[0]


def _rewrite(path: str, **fields) -> str:
    """The simeval checkpoint at ``path`` with ``fields`` replaced, written back."""
    data = torch.load(path, weights_only=True)
    data.update(fields)
    torch.save(data, path)
    return path


def _gadget(directory, marker, factory: str = "timeit:timeit") -> str:
    """A genuine checkpoint whose policy_factory is a stdlib gadget that would create ``marker`` if called."""
    (path,) = write_checkpoints(str(directory), steps=(500,))
    setup = f"open({str(marker)!r}, 'w').close()"
    return _rewrite(path, policy_factory=factory, policy_kwargs={"setup": setup, "number": 0})


def _watch_to_the_end(ckpt, out) -> dict[str, dict]:
    """``--watch ckpt`` of a finished run (DONE written), to exit 0: its records by checkpoint file name."""
    (ckpt / "DONE").touch()
    proc = _run("simeval.launch", "--watch", str(ckpt), *SMALL, "--out", str(out), *POLL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {r["checkpoint_name"]: r for r in read_records(out)}


# -- 1. a checkpoint names code: nothing is imported or called --------------------------------------------------


@pytest.mark.parametrize("how", ["checkpoint", "process", "export"])
def test_a_checkpoint_naming_a_stdlib_gadget_runs_nothing(tmp_path, how):
    marker = tmp_path / "ran"
    path = _gadget(tmp_path / "ckpt", marker)
    if how == "export":
        proc = _run("simeval.export", path, "--to", "onnx", "--out", str(tmp_path / "p.onnx"))
        line = _error_line(proc, "simeval-export")
    else:
        backend = ["--backend", "process"] if how == "process" else []
        proc = _run("simeval.launch", "--checkpoint", path, *SMALL, *backend, "--out", str(tmp_path / "out"))
        line = _error_line(proc, "simeval-launch")
    assert f"{path}: names the policy factory 'timeit:timeit', which is not registered" in line, line
    assert "--policy" in line and not marker.exists()


def test_a_watched_run_refuses_the_gadget_and_evaluates_the_genuine_checkpoint_beside_it(tmp_path):
    marker = tmp_path / "ran"
    ckpt = tmp_path / "ckpt"
    _gadget(ckpt, marker)
    write_checkpoints(str(ckpt), steps=(1000,))
    by_name = _watch_to_the_end(ckpt, tmp_path / "out")
    assert by_name["step_0000500.pt"]["status"] == "failed"
    assert "'timeit:timeit', which is not registered" in by_name["step_0000500.pt"]["error"]
    assert by_name["step_0001000.pt"]["status"] == "ok"
    assert not marker.exists()


@pytest.mark.parametrize("field", ["policy_factory", "env"])
def test_a_module_in_the_working_directory_named_by_a_checkpoint_is_never_imported(tmp_path, field):
    # gymnasium's make() imports the module of a "module:Env-v0" id: the env a checkpoint names must be a
    # registered id (or isaaclab:/mjlab:<task>) before anything is made from it.
    marker = tmp_path / "imported"
    (tmp_path / "evilmod.py").write_text(f"open({str(marker)!r}, 'w').close()\ndef actor(env, **kw): pass\n")
    if field == "env":
        (path,) = write_checkpoints(str(tmp_path / "ckpt"), steps=(500,))
        _rewrite(path, env="evilmod:Evil-v0")
        expected = "unknown env 'evilmod:Evil-v0': not a gymnasium id"
    else:
        path = _gadget(tmp_path / "ckpt", marker, factory="evilmod:actor")
        expected = "'evilmod:actor', which is not registered"
    line = _error_line(_run("simeval.launch", "--checkpoint", path, *SMALL, "--out", "out", cwd=str(tmp_path)),
                       "simeval-launch")  # fmt: skip
    assert expected in line and not marker.exists(), line


def test_policy_on_the_command_line_overrides_the_files_factory(tmp_path):
    marker = tmp_path / "ran"
    path = _gadget(tmp_path / "ckpt", marker)
    proc = cli("--checkpoint", path, *SMALL, "--policy", "simeval.policies:gaussian_actor",
               "--policy-kwargs", '{"hidden": [16]}', "--out", str(tmp_path / "out"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (record,) = read_records(tmp_path / "out")
    assert record["status"] == "ok" and len(record["episode_returns"]) == 2
    assert not marker.exists()


def test_a_factory_registered_through_an_entry_point_is_built_and_others_are_not(tmp_path, monkeypatch):
    from simeval.factories import build_policy, is_registered, registered
    from simeval.launch.cli import parse
    from simeval.launch.plan import plan_for

    site = tmp_path / "site"
    (site / "mynets").mkdir(parents=True)
    (site / "mynets" / "__init__.py").write_text(
        "from simeval.policies import gaussian_actor\n"
        "def actor(env, width: int = 16):\n    return gaussian_actor(env, hidden=[width])\n"
    )
    write_dist_info(site, "mynets", "simeval.policy_factories", "actor = mynets:actor")
    (path,) = write_checkpoints(str(tmp_path / "ckpt"), steps=(500,))
    _rewrite(path, policy_factory="mynets:actor", policy_kwargs={"width": 16})
    ck = load_checkpoint(path)
    cfg = parse(["--checkpoint", path])
    assert not is_registered("mynets:actor")
    with pytest.raises(CheckpointError, match="'mynets:actor', which is not registered; nothing was imported"):
        plan_for(cfg.cfg, cfg.explicit, ck)
    assert "mynets" not in sys.modules

    monkeypatch.syspath_prepend(str(site))
    assert registered()["mynets:actor"] == "entry point 'actor' of package mynets"
    plan = plan_for(cfg.cfg, cfg.explicit, ck)
    assert (plan.policy_factory, plan.policy_kwargs, plan.trusted) == ("mynets:actor", {"width": 16}, False)
    from simeval.envs import make_env

    policy = build_policy(plan.policy_factory, plan.policy_kwargs, make_env("HalfCheetah-v5", num_envs=1))
    assert policy is not None
    with pytest.raises(ValueError, match=r"policy_kwargs width='16' for mynets:actor: .* declares width as int"):
        build_policy(plan.policy_factory, {"width": "16"}, make_env("HalfCheetah-v5", num_envs=1))


@pytest.mark.parametrize(
    ("kwargs", "refusal"),
    [
        ({"hidden": [60000, 60000]}, r"make simeval.policies:gaussian_actor allocate over \d+ MiB, far more than the "
                                     r"checkpoint's weights: they do not match the weights \(nothing allocated\)"),
        ({"hidden": "64"}, r"declares hidden as Sequence\[int\]"),
        ({"hidden": [16], "activation": "os:system"}, r"do not fit simeval.policies:gaussian_actor, which takes"),
    ],
)  # fmt: skip
def test_policy_kwargs_from_a_file_are_checked_before_anything_is_allocated(tmp_path, kwargs, refusal):
    (path,) = write_checkpoints(str(tmp_path / "ckpt"), steps=(500,))
    _rewrite(path, policy_kwargs=kwargs)
    line = _error_line(_run("simeval.launch", "--checkpoint", path, *SMALL, "--out", str(tmp_path / "out")),
                       "simeval-launch")  # fmt: skip
    assert path in line
    import re

    assert re.search(refusal, line), line


def test_a_checkpoint_handing_the_lerobot_factory_an_unlisted_processor_step_is_refused_before_lerobot(tmp_path):
    """The LeRobot factory is registered, so any checkpoint may name it: its steps are checked where it builds them,
    not only by the LeRobot reader (here a simeval checkpoint, which that reader never sees)."""
    (path,) = write_checkpoints(str(tmp_path / "ckpt"), steps=(500,))
    step = {"registry_name": "tokenizer_processor", "config": {}}  # registered in LeRobot, not in simeval's STEPS
    kwargs = {"config": {"type": "act"}, "preprocessor": [step], "postprocessor": []}
    _rewrite(path, policy_factory="simeval.checkpoints.formats.lerobot:actor", policy_kwargs=kwargs)
    line = _error_line(_run("simeval.launch", "--checkpoint", path, *SMALL, "--out", str(tmp_path / "out")),
                       "simeval-launch")  # fmt: skip
    assert "LeRobot processor step 'tokenizer_processor': simeval builds only rename_observations_processor" in line


# -- 2. memory bombs: refused before the allocation -------------------------------------------------------------


def test_an_expanded_tensor_is_refused_before_any_copy(tmp_path):
    (path,) = write_checkpoints(str(tmp_path / "ckpt"), steps=(500,))
    data = torch.load(path, weights_only=True)
    data["policy"]["bomb"] = torch.zeros(1).expand(50000, 50000)  # 4 bytes on disk, 10 GB once copied
    torch.save(data, path)
    assert os.path.getsize(path) < 64 << 10
    with pytest.raises(CheckpointError, match=r"tensor 'policy.bomb' of shape \(50000, 50000\) is 10,000,000,000 "
                                              r"bytes over a storage of 4 \(an expanded or strided view\)"):
        load_checkpoint(path)  # fmt: skip
    line = _error_line(_run("simeval.launch", "--checkpoint", path, *SMALL, "--out", str(tmp_path / "out")),
                       "simeval-launch")  # fmt: skip
    assert "an expanded or strided view" in line


def test_weights_handed_to_an_evaluator_must_be_real_tensors(tmp_path):
    from tensordict import TensorDict

    from simeval.weights import as_weights, not_compact

    with pytest.raises(ValueError, match=r"weights 'w' of shape \(50000, 50000\) is 10,000,000,000 bytes over"):
        as_weights(TensorDict({"w": torch.zeros(1).expand(50000, 50000)}))
    tied = torch.randn(4, 3)
    assert not_compact(tied.t()) is None and not_compact(tied[1:]) is None  # views that copy what they hold
    assert "overlapping" in not_compact(torch.randn(16).as_strided((3, 3), (1, 1)))


def _tied(directory, views: int, hidden: list[int]) -> str:
    """A checkpoint whose policy is ``views`` views of one 4 MiB storage, for an MLP of ``hidden`` units."""
    (path,) = write_checkpoints(str(directory), steps=(500,))
    base = torch.zeros(1 << 20)
    policy = {f"v{i}": base.view(1024, 1024) for i in range(views)}
    return _rewrite(path, policy=policy, policy_factory="simeval.policies:mlp_policy", policy_kwargs={"hidden": hidden})


def test_a_thousand_views_of_one_storage_are_refused_before_any_copy(tmp_path):
    """4 MiB on disk standing for 4 GiB of weights: every copy of them (the evaluator's snapshot) would cost 4 GiB."""
    path = _tied(tmp_path / "ckpt", 1000, [27000, 27000])
    assert os.path.getsize(path) < 5 << 20
    line = _error_line(_run("simeval.launch", "--checkpoint", path, *SMALL, "--out", str(tmp_path / "out")),
                       "simeval-launch")  # fmt: skip
    assert f"{path}: its 1004 tensors view 3.9 GiB of storages holding 4.0 MiB" in line, line
    assert "refused before any copy" in line


def test_views_of_one_storage_count_once_towards_the_policy_budget(tmp_path):
    """Six views of one 4 MiB storage are 4 MiB of weights: the build may allocate 2 x 4 MiB + 16 MiB, not 64 MiB."""
    from simeval.factories import weights_bound

    path = _tied(tmp_path / "ckpt", 6, [3000, 3000])  # 36 MiB of parameters
    line = _error_line(_run("simeval.launch", "--checkpoint", path, *SMALL, "--out", str(tmp_path / "out")),
                       "simeval-launch")  # fmt: skip
    assert "make simeval.policies:mlp_policy allocate over 24 MiB, far more than the checkpoint's weights" in line
    assert weights_bound(load_checkpoint(path).policy) == 24 << 20


def _torch_zip_recompressed(obj) -> bytes:
    """``obj`` saved by torch, its members re-deflated (torch writes them stored)."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    return out.getvalue()


def test_a_deflated_torch_zip_that_expands_a_thousandfold_is_refused_unread(tmp_path):
    from simeval.checkpoints.shipped import shipped_checkpoint

    data = torch.load(shipped_checkpoint(), weights_only=True)
    data["policy"]["padding"] = torch.zeros(16 << 20)  # 64 MiB of zeros: about 64 KiB deflated
    path = tmp_path / "step_0000001.pt"
    path.write_bytes(_torch_zip_recompressed(data))
    assert os.path.getsize(path) < 1 << 20
    with pytest.raises(CheckpointError, match=r"zip member .* expands \d+x \(to 64 MiB\): a zip bomb"):
        load_checkpoint(path)


def test_an_sb3_zip_whose_weights_member_is_a_bomb_is_refused_unread(tmp_path):
    from fuzz_inputs import seed_sb3

    with zipfile.ZipFile(io.BytesIO(seed_sb3()["model.zip"])) as z:
        members = {info.filename: z.read(info) for info in z.infolist()}
    members["policy.pth"] = members["policy.pth"] + b"\0" * (64 << 20)
    path = tmp_path / "model.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        for name, blob in members.items():
            out.writestr(name, blob)
    with pytest.raises(CheckpointError, match=r"model.zip: zip member 'policy.pth' expands \d+x .*: a zip bomb"):
        load_checkpoint(path)


def test_a_file_over_the_size_cap_is_refused_unread_and_the_cap_is_a_flag(tmp_path):
    (path,) = write_checkpoints(str(tmp_path / "ckpt"), steps=(500,))
    size = os.path.getsize(path)
    with pytest.raises(CheckpointError, match=r"over the checkpoint size cap of 1 KiB: not read.*--max-checkpoint-s"):
        load_checkpoint(path, max_bytes=1024)
    line = _error_line(cli("--checkpoint", path, *SMALL, "--max-checkpoint-size", "1K", "--out", str(tmp_path / "o")),
                       "simeval-launch")  # fmt: skip
    assert "over the checkpoint size cap of 1 KiB" in line
    assert load_checkpoint(path, max_bytes=size).step == 500


def test_a_4_gib_junk_file_and_a_symlink_out_of_the_directory_leave_the_watch_going(tmp_path):
    ckpt = tmp_path / "ckpt"
    write_checkpoints(str(ckpt), steps=(1000,))
    with open(ckpt / "step_0000500.pt", "wb") as f:  # sparse: 4 GiB of zeros that take no disk
        f.truncate(4 << 30)
    with open(ckpt / "step_0000600.pt", "wb") as f:  # junk that starts like a zip
        f.write(b"PK\x03\x04")
        f.truncate(4 << 30)
    outside = tmp_path / "elsewhere"
    write_checkpoints(str(outside), steps=(700,))
    os.symlink(outside / "step_0000700.pt", ckpt / "step_0000700.pt")
    old = os.path.getmtime(ckpt / "step_0001000.pt") - 60
    for name in ("step_0000500.pt", "step_0000600.pt"):
        os.utime(ckpt / name, (old, old))  # not being written: judged at once
    by_name = _watch_to_the_end(ckpt, tmp_path / "out")
    assert by_name["step_0001000.pt"]["status"] == "ok"
    assert "not a readable checkpoint" in by_name["step_0000500.pt"]["error"]
    assert "truncated or corrupt" in by_name["step_0000600.pt"]["error"]
    assert "a symlink that leads out of the watched directory" in by_name["step_0000700.pt"]["error"]


# -- 3. YAML files: bounded ----------------------------------------------------------------------------------------

BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
    for i in range(8)
)  # 10**9 strings once expanded, 700 bytes on disk


def test_yaml_alias_bombs_are_refused_in_one_line(tmp_path):
    from fuzz_inputs import seed_rsl_rl

    from simeval.launch.config import ConfigError, load_yaml
    from simeval.launch.suite import load_suite

    (tmp_path / "bomb.yaml").write_text(BOMB)
    for load in (load_yaml, load_suite):
        with pytest.raises(ConfigError, match=r"bomb.yaml: its aliases expand to over 1,000,000 nodes"):
            load(str(tmp_path / "bomb.yaml"))
    for name, raw in seed_rsl_rl().items():
        (tmp_path / "run" / os.path.dirname(name)).mkdir(parents=True, exist_ok=True)
        (tmp_path / "run" / name).write_bytes(raw)
    (tmp_path / "run" / "params" / "agent.yaml").write_text(BOMB)
    with pytest.raises(CheckpointError, match=r"agent.yaml: its aliases expand to over 1,000,000 nodes"):
        load_checkpoint(tmp_path / "run" / "model_7.pt")
    (tmp_path / "loop.yaml").write_text("a: &a [*a]\n")
    with pytest.raises(ConfigError, match=r"loop.yaml: its aliases expand to over"):
        load_yaml(str(tmp_path / "loop.yaml"))


# -- 4. ONNX graphs: no external files, no unbounded tensors -------------------------------------------------------


def _onnx_policy(tmp_path, extra_nodes, out_name: str, initializers=()) -> str:
    import onnx
    from onnx import TensorProto, helper

    nodes = [*extra_nodes, helper.make_node("Identity", ["obs"], ["actions0"])]
    graph = helper.make_graph(
        nodes,
        "policy",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", 17])],
        [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, None)],
        initializer=list(initializers),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "policy.onnx"
    onnx.save(model, path)
    return str(path)


def test_an_onnx_graph_that_expands_to_gigabytes_or_reads_another_file_is_refused(tmp_path):
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    shape = numpy_helper.from_array(np.array([100000, 100000], dtype=np.int64), "shape")
    expand = helper.make_node("ConstantOfShape", ["shape"], ["big"])
    path = _onnx_policy(tmp_path, [expand], "big", [shape])
    with pytest.raises(CheckpointError, match=r"policy.onnx: the ONNX graph computes 'big' of 40,000,000,000 bytes"):
        load_checkpoint(path)
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"\0" * 64)
    weights = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[17], data_location=TensorProto.EXTERNAL)
    weights.external_data.add(key="location", value=str(secret))
    path = _onnx_policy(tmp_path, [helper.make_node("Add", ["obs", "w"], ["actions"])], "actions", [weights])
    with pytest.raises(CheckpointError, match=r"ONNX weights in external files are not supported"):
        load_checkpoint(path)
