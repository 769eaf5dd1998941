"""The trust boundary, reads (docs/security.md): every data file is opened as data, and what it holds stays inert.

Each test is a repro of a way a file once blocked, escaped or fooled a reader: a FIFO named like a checkpoint,
a symlink swapped in after the watcher listed the directory, ONNX tensors read from other files or declared
without bound, LeRobot configs nested or sized to exhaust memory, a suite naming container settings, hostile
names in a report. The oracle is one line naming the file, promptly (reads that could block run in a
subprocess with a timeout, so a regression fails rather than hangs).
"""

from __future__ import annotations

import html
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from launch_helpers import REPO, TESTS, cli, read_records, write_checkpoints
from test_trust_boundary import POLL, SMALL, _run

from simeval.checkpoints import CheckpointError, load_checkpoint

PROMPT = 60  # seconds a refusal may take; a read that blocks on a FIFO never returns


def _python(code: str, *args: str, timeout: float = PROMPT) -> subprocess.CompletedProcess:
    """``python -c code args`` in a fresh process, ended after ``timeout`` seconds (a blocked read fails the test)."""
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([REPO, TESTS])},
        stdin=subprocess.DEVNULL,
    )


# -- 1. only regular files are read, judged on the open descriptor ----------------------------------------------

_READ_FIFOS = """
import sys
from simeval.checkpoints import CheckpointError, load_checkpoint, peek_step
from simeval.launch.config import ConfigError
from simeval.launch.suite import load_suite

for read in (load_checkpoint, peek_step):
    try:
        read(sys.argv[1])
    except CheckpointError as exc:
        print(exc)
try:
    load_suite(sys.argv[2])
except ConfigError as exc:
    print(exc)
"""


def test_a_fifo_is_refused_in_one_line_without_blocking(tmp_path):
    """load_checkpoint, peek_step and a suite on a FIFO: refused at once, where a plain open() waits for a writer."""
    fifo, suite = tmp_path / "step_0000100.pt", tmp_path / "suite.yaml"
    os.mkfifo(fifo)
    os.mkfifo(suite)
    proc = _python(_READ_FIFOS, str(fifo), str(suite))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines == [f"{fifo} is not a regular file (a FIFO): a checkpoint and the files read beside it are "
                     "regular files (--watch takes a run directory)."] * 2 + [
                     f"{suite} is not a regular file (a FIFO): a settings file is a regular file."], lines  # fmt: skip


def test_a_fifo_named_like_a_checkpoint_in_a_watched_directory_is_a_failed_line_and_the_watch_goes_on(tmp_path):
    ckpt = tmp_path / "ckpt"
    write_checkpoints(str(ckpt), steps=(1000,))
    os.mkfifo(ckpt / "step_0000100.pt")
    (ckpt / "DONE").touch()
    proc = _run("simeval.launch", "--watch", str(ckpt), *SMALL, "--out", str(tmp_path / "out"), *POLL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    by_name = {r["checkpoint_name"]: r for r in read_records(tmp_path / "out")}
    assert by_name["step_0001000.pt"]["status"] == "ok"
    assert by_name["step_0000100.pt"]["status"] == "failed"
    assert "is not a regular file (a FIFO)" in by_name["step_0000100.pt"]["error"]


_SWAP_AFTER_PEEK = """
import os, sys, threading
from simeval.launch import sources

directory, outside, swap = sys.argv[1:4]
peek = sources.peek_step


def peek_then_swap(path, *args, **kwargs):
    step = peek(path, *args, **kwargs)
    os.remove(path)
    os.mkfifo(path) if swap == "fifo" else os.symlink(outside, path)
    return step


sources.peek_step = peek_then_swap
item = sources.Watcher(directory, set(), threading.Event(), poll_interval=0.1).take()
print(type(item).__name__, getattr(item, "error", ""))
"""


@pytest.mark.parametrize("swap", ["symlink", "fifo"])
def test_a_file_swapped_after_the_watcher_looked_at_it_is_judged_on_the_descriptor(tmp_path, swap):
    """Between the watcher's step peek and its load, the checkpoint becomes a symlink out of the run directory
    (or a FIFO): the load refuses it (a failed line), rather than reading the other file (or blocking)."""
    (inside,) = write_checkpoints(str(tmp_path / "ckpt"), steps=(500,))
    (outside,) = write_checkpoints(str(tmp_path / "elsewhere"), steps=(700,))
    proc = _python(_SWAP_AFTER_PEEK, str(tmp_path / "ckpt"), outside, swap)
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = (f"Unreadable {inside}: a symlink that leads out of the watched directory" if swap == "symlink"
                else f"Unreadable {inside} is not a regular file (a FIFO)")  # fmt: skip
    assert proc.stdout.startswith(expected), proc.stdout


@pytest.mark.parametrize("no_proc", [False, True], ids=["proc-fd", "inode"])
def test_inside_a_watched_directory_a_name_must_lead_inside_it_once_opened(tmp_path, monkeypatch, no_proc):
    """The check is made on the open descriptor: by the kernel's name for it (/proc/self/fd), or where there is
    none by comparing the descriptor's inode with the resolved name's."""
    from simeval.checkpoints.bounds import open_data, watched

    if no_proc:
        real_readlink = os.readlink
        monkeypatch.setattr(os, "readlink", lambda p, *a, **k: (_ for _ in ()).throw(OSError("no /proc"))
                            if str(p).startswith("/proc/self/fd/") else real_readlink(p, *a, **k))  # fmt: skip
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    (run / "sub").mkdir(parents=True)
    elsewhere.mkdir()
    (run / "real.pt").write_bytes(b"inside")
    (elsewhere / "secret.pt").write_bytes(b"outside")
    os.symlink(run / "real.pt", run / "last.pt")
    os.symlink(elsewhere / "secret.pt", run / "out.pt")
    os.symlink(elsewhere, run / "sub" / "dir")
    with watched(str(run)):
        with open_data(str(run / "last.pt")) as f:
            assert f.read() == b"inside"
        for name in ("out.pt", "sub/dir/secret.pt"):
            with pytest.raises(CheckpointError, match=r"a symlink that leads out of the watched directory"):
                open_data(str(run / name))
    with open_data(str(run / "out.pt")) as f:  # not watched: links are followed
        assert f.read() == b"outside"


def test_a_checkpoint_named_through_symlinks_outside_a_watch_still_works(tmp_path):
    """``--checkpoint last.pt -> step_...`` and a cache's links into ``blobs/`` (as Hugging Face's) are followed."""
    (real,) = write_checkpoints(str(tmp_path / "blobs"), steps=(500,))
    snapshot = tmp_path / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    os.symlink(os.path.relpath(real, snapshot), snapshot / "model.pt")
    os.symlink(snapshot / "model.pt", tmp_path / "last.pt")
    assert load_checkpoint(tmp_path / "last.pt").step == 500
    proc = cli("--checkpoint", str(tmp_path / "last.pt"), *SMALL, "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    (record,) = read_records(tmp_path / "out")
    assert record["status"] == "ok" and record["step"] == 500


# -- 2. ONNX: every tensor stored anywhere in the model is checked before onnxruntime sees it -------------------


def _external(name: str, dims=(17,), location: str = "/etc/passwd"):
    from onnx import TensorProto

    tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=list(dims), data_location=TensorProto.EXTERNAL)
    tensor.external_data.add(key="location", value=location)
    return tensor


def _sparse(values, dense=(17,)):
    from onnx import helper, numpy_helper

    indices = numpy_helper.from_array(np.arange(values.dims[0], dtype=np.int64), values.name + "_indices")
    return helper.make_sparse_tensor(values, indices, list(dense))


def _onnx_model(nodes, *, initializers=(), sparse=(), functions=(), training=None):
    """An obs -> actions graph (17 -> 17) with ``nodes`` computing ``actions``, serialised."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        list(nodes),
        "policy",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", 17])],
        [helper.make_tensor_value_info("actions", TensorProto.FLOAT, ["batch", 17])],
        initializer=list(initializers),
        sparse_initializer=list(sparse),
    )
    opsets = [helper.make_opsetid("", 17), *[helper.make_opsetid(f.domain, 1) for f in functions]]
    model = helper.make_model(graph, opset_imports=opsets, functions=list(functions))
    if training is not None:
        model.training_info.append(training)
    return model.SerializeToString()


def _gadget(kind: str) -> bytes:
    import onnx
    from onnx import TensorProto, helper

    add = helper.make_node("Add", ["obs", "c"], ["actions"])
    if kind == "a function's Constant":
        body = [helper.make_node("Constant", [], ["k"], value=_external("k")),
                helper.make_node("Add", ["x", "k"], ["y"])]
        f = helper.make_function("evil", "f", ["x"], ["y"], body, [helper.make_opsetid("", 17)])
        return _onnx_model([helper.make_node("f", ["obs"], ["actions"], domain="evil")], functions=[f])
    if kind == "a function's Loop":
        loop = helper.make_node("Loop", ["", "", "x"], ["y"], body=helper.make_graph([], "body", [], []))
        f = helper.make_function("evil", "g", ["x"], ["y"], [loop], [helper.make_opsetid("", 17)])
        return _onnx_model([helper.make_node("g", ["obs"], ["actions"], domain="evil")], functions=[f])
    if kind == "sparse_tensors":
        node = helper.make_node("Constant", [], ["c"], value=helper.make_tensor("z", TensorProto.FLOAT, [17], [0] * 17))
        attr = node.attribute.add(name="extra", type=onnx.AttributeProto.SPARSE_TENSORS)
        attr.sparse_tensors.append(_sparse(_external("v", dims=(2,))))
        return _onnx_model([node, add])
    if kind == "training_info":
        info = onnx.TrainingInfoProto()
        info.initialization.CopyFrom(helper.make_graph([], "init", [], [], initializer=[_external("t")]))
        return _onnx_model([helper.make_node("Identity", ["obs"], ["actions"])], training=info)
    if kind == "an unused 1e12-element initialiser":
        big = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[10**12])
        return _onnx_model([helper.make_node("Identity", ["obs"], ["actions"])], initializers=[big])
    if kind == "a sparse initialiser densified to 4 TB":
        values = helper.make_tensor("c", TensorProto.FLOAT, [2], [1.0, 2.0])
        return _onnx_model([add], sparse=[_sparse(values, dense=(10**12,))])
    assert kind == "an initialiser declaring more than it holds"
    return _onnx_model([add], initializers=[TensorProto(name="c", data_type=TensorProto.FLOAT, dims=[1000, 17])])


ONNX_GADGETS = {
    "a function's Constant": r"ONNX weights in external files are not supported",
    "a function's Loop": r"the ONNX graph has a Loop \(iterations from data\): refused",
    "sparse_tensors": r"ONNX weights in external files are not supported",
    "training_info": r"ONNX weights in external files are not supported",
    "an unused 1e12-element initialiser": r"the ONNX tensor 'w' declares the shape \[1000000000000\], over 1 GiB",
    "a sparse initialiser densified to 4 TB": r"the ONNX tensor 'c' declares the shape \[1000000000000\], over 1 GiB",
    "an initialiser declaring more than it holds": r"the ONNX tensor 'c' declares the shape \[1000, 17\] but holds "
                                                   r"less data than that",
}  # fmt: skip


@pytest.mark.parametrize("kind", list(ONNX_GADGETS))
def test_onnx_tensors_anywhere_in_the_model_are_checked_before_onnxruntime(tmp_path, monkeypatch, kind):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # reaching onnxruntime would fail another way
    path = tmp_path / "policy.onnx"
    path.write_bytes(_gadget(kind))
    with pytest.raises(CheckpointError, match=f"^{path}: " + ONNX_GADGETS[kind]):
        load_checkpoint(path)


def test_onnx_external_data_already_refused_in_graphs_subgraphs_constants_and_sparse_initialisers(tmp_path):
    """The red team's first list: each was refused before this round too (a regression test)."""
    from onnx import TensorProto, helper, numpy_helper

    add = helper.make_node("Add", ["obs", "c"], ["actions"])
    zeros = numpy_helper.from_array(np.zeros(17, np.float32))
    branch = helper.make_graph([helper.make_node("Constant", [], ["t"], value=_external("k"))], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, [17])])  # fmt: skip
    other = helper.make_graph([helper.make_node("Constant", [], ["e"], value=zeros)], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, [17])])  # fmt: skip
    cond = numpy_helper.from_array(np.array(True), "cond")
    models = {
        "constant": _onnx_model([helper.make_node("Constant", [], ["c"], value=_external("k")), add]),
        "sparse constant": _onnx_model([helper.make_node("Constant", [], ["c"],
                                                         sparse_value=_sparse(_external("v", dims=(2,)))), add]),
        "sparse initialiser": _onnx_model([add], sparse=[_sparse(_external("c", dims=(2,)))]),
        "If branch": _onnx_model([helper.make_node("If", ["cond"], ["c"], then_branch=branch, else_branch=other), add],
                                 initializers=[cond]),
        "relative path": _onnx_model([add], initializers=[_external("c", location="../../etc/passwd")]),
    }  # fmt: skip
    for name, raw in models.items():
        path = tmp_path / f"{name}.onnx"
        path.write_bytes(raw)
        with pytest.raises(CheckpointError, match=r"ONNX weights in external files are not supported"):
            load_checkpoint(path)


# -- 3. LeRobot directories: their JSON checked before safetensors or LeRobot is imported -----------------------


def _lerobot_dir(tmp_path, config: dict | str | None = None, pre: dict | None = None, header: bytes | None = None):
    """A ``pretrained_model/`` directory: ``config.json``, an empty ``model.safetensors`` and processor JSON."""
    folder = tmp_path / "pretrained_model"
    folder.mkdir()
    text = config if isinstance(config, str) else json.dumps({"type": "act", **(config or {})})
    (folder / "config.json").write_text(text)
    meta = b'{"__metadata__":{}}'
    (folder / "model.safetensors").write_bytes(header or len(meta).to_bytes(8, "little") + meta)
    (folder / "policy_preprocessor.json").write_text(json.dumps(pre or {"steps": []}))
    (folder / "policy_postprocessor.json").write_text(json.dumps({"steps": []}))
    return folder


LEROBOT_GADGETS = {
    "a nesting bomb": ('{"type": "act", "x": ' + "[" * 100_000 + "]" * 100_000 + "}", None,
                       r"config.json: nested over 32 levels deep: not a LeRobot config \(refused\)"),
    "deep nesting": ({"x": json.loads("[" * 40 + "]" * 40)}, None, r"config.json: nested over 32 levels deep"),
    "a huge chunk": ({"chunk_size": 10**9, "dim_model": 512}, None,
                     r"config.json: chunk_size 1000000000 x dim_model 512 make LeRobot build a [\d.]+ GiB table before "
                     r"any weight, far more than model.safetensors holds \(27 bytes\): they do not match the weights"),
    "a size as text": ({"dim_model": "512"}, None, r"config.json: dim_model is '512', not a whole number >= 1"),
    "a class by module path": (None, {"steps": [{"class": "os:system", "config": {"command": "id"}}]},
                               r"policy_preprocessor.json: step 0 names the class 'os:system': simeval builds only "
                               r"LeRobot's steps .* \(nothing was imported\)"),
    "a state file elsewhere": (None, {"steps": [{"registry_name": "normalizer_processor", "config": {},
                                                 "state_file": "../../etc/passwd.safetensors"}]},
                               r"step 0's state_file '../../etc/passwd.safetensors' is not a file name in its"),
}  # fmt: skip


@pytest.mark.parametrize("kind", list(LEROBOT_GADGETS))
def test_lerobot_json_is_checked_before_the_weights_are_read(tmp_path, monkeypatch, kind):
    config, pre, refusal = LEROBOT_GADGETS[kind]
    monkeypatch.setitem(sys.modules, "safetensors", None)  # the checks come first, wherever safetensors is installed
    monkeypatch.setitem(sys.modules, "lerobot", None)
    folder = _lerobot_dir(tmp_path, config, pre)
    with pytest.raises(CheckpointError, match=refusal):
        load_checkpoint(folder)


def test_a_safetensors_header_declaring_2_to_the_60_bytes_is_refused_having_read_16(tmp_path):
    folder = _lerobot_dir(tmp_path, header=(1 << 60).to_bytes(8, "little") + b'{"a": 1}')
    with pytest.raises(CheckpointError, match=r"model.safetensors: not a readable checkpoint"):
        load_checkpoint(folder)


# -- 4. a suite is data: launcher and container settings are refused at load ------------------------------------

LAUNCHER_KEYS = ["image", "mounts", "network", "pass_env", "gpus", "launcher", "config", "SIMEVAL_RAY_BASE_PORT"]


@pytest.mark.parametrize("level", ["suite", "task", "condition"])
def test_a_suite_setting_container_or_slurm_keys_is_refused_naming_the_file_and_key(tmp_path, level):
    from simeval.launch.config import ConfigError
    from simeval.launch.suite import load_suite

    for key in LAUNCHER_KEYS:
        value = json.dumps(["/:/host"] if key == "mounts" else "evil")
        top, task, condition = (f"{key}: {value}\n", "", "") if level == "suite" else ("", "", "")
        if level == "task":
            task = f"    {key}: {value}\n"
        if level == "condition":
            condition = f"    conditions:\n      c: {{{key}: {value}}}\n"
        path = tmp_path / f"{level}-{key}.yaml"
        path.write_text(f"name: s\n{top}tasks:\n  - env: HalfCheetah-v5\n{task}{condition}")
        where = {"suite": f"{key}: unknown field", "task": f"tasks[0].{key}: unknown field",
                 "condition": f"tasks[0].conditions.c: unknown setting '{key}'"}[level]  # fmt: skip
        with pytest.raises(ConfigError) as raised:
            load_suite(str(path))
        assert str(raised.value).startswith(f"{path}: {where}"), str(raised.value)


# -- 5. reports: names from results files are shown, never interpreted -------------------------------------------

HOSTILE = "<script>alert(1)</script></table>$\\alpha^$ \x1b[31mred\x1b[0m\x1b]0;title\x07\nsecond line\r\u202e"


def _hostile_runs(tmp_path) -> list[str]:
    """Two suite runs written by simeval's own writers, every name in them hostile, and one failed line."""
    from simeval.metrics import bootstrap_ci
    from simeval.records import append_record, failed_record, make_record

    x = np.random.default_rng(4).normal(100, 10, 16)
    dirs = []
    for name, returns in (("a", x), ("b", x + 5.0)):
        low, high = bootstrap_ci(list(returns))
        result = {"eval/step": 1000, "eval/reward": float(np.mean(returns)), "eval/reward_ci_low": low,
                  "eval/reward_ci_high": high, "eval/num_episodes": 16, "eval/episode_returns": list(returns),
                  "eval/episode_lengths": [1000] * 16, "eval/episode_seeds": list(range(16))}  # fmt: skip
        cell = {"suite": "s", "task": "Task" + HOSTILE, "condition": "cond" + HOSTILE, "prompt": HOSTILE,
                "checkpoint": "/ck/ck" + HOSTILE, "checkpoint_name": "ck" + HOSTILE}  # fmt: skip
        path = str(tmp_path / name / "results.jsonl")
        append_record(path, make_record(result, **cell))
        failed = failed_record("/ck/bad" + HOSTILE, "refused: " + HOSTILE, step=2000, name="bad" + HOSTILE)
        append_record(path, {**failed, "task": cell["task"], "condition": cell["condition"]})
        dirs.append(str(tmp_path / name))
    return dirs


def _report(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simeval.report", *args], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env={**os.environ, "PYTHONPATH": REPO})  # fmt: skip


def _no_control(text: str) -> None:
    """No control character but newlines between lines: escapes, bells, carriage returns, bidi overrides."""
    bad = sorted({c for c in text if (ord(c) < 32 and c != "\n") or 0x7F <= ord(c) < 0xA0 or c == "\u202e"})
    assert not bad, bad
    assert not any(line.lstrip().startswith("second line") for line in text.splitlines())


def test_hostile_names_in_results_are_escaped_in_the_terminal_and_the_html_page(tmp_path):
    a, b = _hostile_runs(tmp_path)
    page = tmp_path / "compare.html"
    proc = _report("compare", a, b, "--html", str(page))
    assert proc.returncode == 0, proc.stderr[-3000:]
    _no_control(proc.stdout)
    assert "\\x1b[31mred" in proc.stdout  # shown, escaped
    markup = page.read_text()
    assert "<script>" not in markup and markup.count("</table>") == 1
    assert html.escape("Task<script>alert(1)</script></table>$\\alpha^$") in markup
    proc = _report(a, b, "--output", str(tmp_path / "curve.png"))  # the table, the failures, the plot
    assert proc.returncode == 0, proc.stderr[-3000:]
    _no_control(proc.stdout)
    assert "\\x1b[31mred" in proc.stdout and (tmp_path / "curve.png").read_bytes()[:4] == b"\x89PNG"


def test_the_rich_table_escapes_hostile_names_too(tmp_path):
    from simeval.report import comparison, runs, text

    a, b = _hostile_runs(tmp_path)
    result = comparison.compare(runs.read_results(a), runs.read_results(b), "a", "b")
    out = io.StringIO()
    text.print_text(result, file=out, use_rich=True)
    _no_control(out.getvalue())
    assert "\\x1b[31mred" in out.getvalue()
