"""--watch's source of work: every checkpoint once, in step order, loaded once, robust to rotation."""

from __future__ import annotations

import os
import shutil
import threading
import time

import pytest
from launch_helpers import write_checkpoints

from simeval.checkpoints import file_hash, load_checkpoint
from simeval.launch import sources
from simeval.launch.sources import Unreadable, Watcher


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    """Checkpoints at steps 3000, 1000, 2000 (written in that order)."""
    return write_checkpoints(str(tmp_path_factory.mktemp("ckpts")), steps=(3000, 1000, 2000))


def _run_dir(tmp_path, paths, done: bool = True) -> str:
    directory = tmp_path / "run"
    directory.mkdir()
    for p in paths:
        shutil.copy(p, directory)
    if done:
        (directory / "DONE").write_text("")
    return str(directory)


@pytest.fixture
def load_counts(monkeypatch):
    """How often each file is loaded in full (the real loader runs)."""
    counts: dict[str, int] = {}

    def counting(path, format=None, **bounds):
        counts[os.path.basename(path)] = counts.get(os.path.basename(path), 0) + 1
        return load_checkpoint(path, format, **bounds)

    monkeypatch.setattr(sources, "load_checkpoint", counting)
    return counts


def test_each_checkpoint_once_in_step_order_each_loaded_once(three, tmp_path, load_counts):
    directory = _run_dir(tmp_path, three)
    items = list(Watcher(directory, seen=set(), stop=threading.Event(), poll_interval=0.05))
    assert [ck.step for ck in items] == [1000, 2000, 3000]
    # A backlog is ordered by a cheap peek at each file's step, not by loading every file on every pass.
    assert load_counts == {"step_0001000.pt": 1, "step_0002000.pt": 1, "step_0003000.pt": 1}
    assert all(ck.sha256 == file_hash(ck.path) for ck in items)


def test_names_already_recorded_are_not_yielded_again(three, tmp_path):
    directory = _run_dir(tmp_path, three)
    items = list(Watcher(directory, seen={"step_0002000.pt"}, stop=threading.Event(), poll_interval=0.05))
    assert [ck.step for ck in items] == [1000, 3000]


def test_a_file_rotated_away_before_its_turn_is_skipped(three, tmp_path, monkeypatch):
    directory = _run_dir(tmp_path, three)

    def rotate_then_load(path, format=None, **bounds):
        if path.endswith("step_0002000.pt"):
            os.unlink(path)  # training's checkpoint rotation, between the peek and the load
        return load_checkpoint(path, format, **bounds)

    monkeypatch.setattr(sources, "load_checkpoint", rotate_then_load)
    items = list(Watcher(directory, seen=set(), stop=threading.Event(), poll_interval=0.05))
    assert [ck.step for ck in items] == [1000, 3000]


def test_an_unreadable_file_is_yielded_as_such_once(three, tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "SETTLE_SECONDS", 0.0)  # an old file: nobody is writing it any more
    directory = _run_dir(tmp_path, three[:1])
    with open(os.path.join(directory, "step_0000500.pt"), "wb") as f:
        f.write(b"not a checkpoint")
    items = list(Watcher(directory, seen=set(), stop=threading.Event(), poll_interval=0.05))
    assert isinstance(items[0], Unreadable) and "not a readable checkpoint" in items[0].error
    assert [ck.step for ck in items[1:]] == [3000]


def test_a_checkpoint_written_in_place_is_read_once_complete_not_failed(three, tmp_path):
    """rsl_rl, skrl and rl_games torch.save straight into the final name: a scan can see half a file."""
    directory = _run_dir(tmp_path, [], done=False)
    data = open(three[0], "rb").read()
    target = os.path.join(directory, "model_7.pt")
    with open(target, "wb") as f:
        f.write(data[: len(data) // 2])
    stop, items = threading.Event(), []
    thread = threading.Thread(target=lambda: items.extend(Watcher(directory, set(), stop, poll_interval=0.05)))
    thread.start()
    try:
        thread.join(0.5)  # several scans see the truncated file
        assert items == []
        with open(target, "wb") as f:
            f.write(data)
        open(os.path.join(directory, "DONE"), "w").close()
        thread.join(20)
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()
    assert [type(i).__name__ for i in items] == ["Checkpoint"] and items[0].step == 3000


def test_a_truncated_file_left_at_done_is_recorded_as_unreadable(tmp_path):
    directory = _run_dir(tmp_path, [])
    with open(os.path.join(directory, "model_9.pt"), "wb") as f:
        f.write(b"PK\x03\x04 truncated")
    (item,) = list(Watcher(directory, seen=set(), stop=threading.Event(), poll_interval=0.05))
    assert isinstance(item, Unreadable) and item.path.endswith("model_9.pt")


def test_the_recorded_hash_is_of_the_bytes_that_were_evaluated(three, tmp_path):
    path = str(tmp_path / "ckpt.pt")
    shutil.copy(three[0], path)
    before = file_hash(path)
    ck = load_checkpoint(path)
    shutil.copy(three[1], path)  # overwritten after loading
    assert ck.sha256 == before != file_hash(path)


def test_stop_ends_the_watch_while_waiting_for_checkpoints(tmp_path):
    stop = threading.Event()
    items = []
    thread = threading.Thread(target=lambda: items.extend(Watcher(str(tmp_path), set(), stop, poll_interval=0.05)))
    thread.start()
    stop.set()
    thread.join(10)
    assert not thread.is_alive() and items == []


def test_a_checkpoint_written_just_before_done_is_still_evaluated(three, tmp_path):
    """Training writes its last checkpoint, then DONE, between two of the watcher's looks."""
    directory = _run_dir(tmp_path, [], done=False)
    watcher = Watcher(directory, seen=set(), stop=threading.Event(), poll_interval=0.05)
    real = watcher._candidates
    calls = []

    def candidates():
        found = real()
        if not calls:  # right after the first (empty) listing
            shutil.copy(three[0], directory)
            open(os.path.join(directory, "DONE"), "w").close()
        calls.append(len(found))
        return found

    watcher._candidates = candidates
    assert [ck.step for ck in watcher] == [3000]


@pytest.mark.parametrize("kind", ["missing", "a file"])
def test_a_watch_path_that_is_no_directory_fails_at_once_in_one_line(tmp_path, kind):
    """A typo in --watch is visible at once: exit 2 and one line naming the path, never a silent wait."""
    from launch_helpers import cli

    path = str(tmp_path / "runs" / "exp1")
    if kind == "a file":
        os.makedirs(os.path.dirname(path))
        open(path, "w").close()
    proc = cli("--watch", path, "--out", str(tmp_path / "out"), timeout=60)  # it used to wait for ever
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"simeval-launch: error: --watch {path}: "), line
    assert ("no such directory" if kind == "missing" else "not a directory") in line
    assert not os.path.exists(tmp_path / "out" / "results.jsonl")


SHIPPED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "simeval", "data",
                       "halfcheetah_ppo", "step_001001472.pt")  # fmt: skip
SMALL = ("--episodes", "2", "--num-envs", "2", "--max-steps", "30", "--poll-interval", "0.2")
JUNK = b"PK\x03\x04 torn by a training crash"


def _crashed_run(tmp_path, junk: str, age_s: float = -60.0) -> str:
    """A watched directory: the shipped checkpoint (step 1001472) and ``junk``, a torn file a crash left.

    ``age_s`` is how long ago the junk was last written: negative keeps it settling for the whole run.
    """
    directory = tmp_path / "run"
    directory.mkdir()
    shutil.copy(SHIPPED, directory)
    (directory / junk).write_bytes(JUNK)
    _age(directory / junk, age_s)
    return str(directory)


def _age(path, seconds: float) -> None:
    stamp = time.time() - seconds
    os.utime(path, (stamp, stamp))


def _watch(directory: str, out, *flags: str):
    from launch_helpers import cli

    proc = cli("--watch", directory, "--until-step", "1001472", "--out", str(out), *SMALL, *flags, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_a_file_still_settling_when_the_watch_ends_is_handed_back_as_unsettled(three, tmp_path):
    directory = _run_dir(tmp_path, three[1:2], done=False)
    junk = os.path.join(directory, "step_0000500.pt")
    with open(junk, "wb") as f:
        f.write(JUNK)
    watcher = Watcher(directory, seen=set(), stop=threading.Event(), poll_interval=0.05)
    assert watcher.take().step == 1000  # the junk is skipped while it settles
    assert watcher.left(until=1000) == [sources.Unsettled(junk)]
    assert watcher.left(until=1000) == []  # handed back once


def test_a_file_that_settled_after_the_watch_ended_is_judged_at_the_end(three, tmp_path, monkeypatch):
    """Read once it stopped changing: a checkpoint below --until-step is handed out, a torn file is unreadable."""
    directory = _run_dir(tmp_path, [], done=False)
    data = open(three[2], "rb").read()
    late, junk = os.path.join(directory, "step_0000700.pt"), os.path.join(directory, "step_0000500.pt")
    for path, content in ((late, data[: len(data) // 2]), (junk, JUNK)):
        with open(path, "wb") as f:
            f.write(content)
    watcher = Watcher(directory, seen=set(), stop=threading.Event(), poll_interval=0.05)
    assert watcher.take() is None  # both are still being written
    with open(late, "wb") as f:
        f.write(data)  # step 2000, written whole after the run reached --until-step
    monkeypatch.setattr(sources, "SETTLE_SECONDS", 0.0)
    unreadable, ck = watcher.left(until=5000)
    assert isinstance(unreadable, Unreadable) and unreadable.path == junk and ck.step == 2000


@pytest.mark.parametrize("junk", ["step_000876544.pt", "step_001100000.pt"], ids=["below", "named-past"])
def test_a_corrupt_checkpoint_still_settling_when_the_run_ends_is_reported_and_retried(tmp_path, junk):
    """Issue 45 item 6: a torn file written just before the run, still settling when --until-step is reached,
    is in the summary and results.jsonl, and the next run judges it again (here, an hour later: failed)."""
    from launch_helpers import read_records

    directory, out = _crashed_run(tmp_path, junk), tmp_path / "out"
    proc = _watch(directory, out)
    assert "summary: 2 evaluation(s), 0 failed, 1 unsettled" in proc.stdout, proc.stdout
    assert f"checkpoint {junk}: {sources.UNSETTLED}" in proc.stdout, proc.stdout
    (line,) = [r for r in read_records(out) if r["checkpoint_name"] == junk]
    assert (line["status"], line["error"], line["retry"]) == ("failed", sources.UNSETTLED, "resume")
    if junk != "step_000876544.pt":
        return
    _age(os.path.join(directory, junk), 3600)
    again = _watch(directory, out)  # the unsettled line is no done checkpoint: the plain rerun reads the file
    assert "1 checkpoint(s) failed before: evaluating them again" in again.stdout, again.stdout
    assert "summary: 1 evaluation(s), 1 failed" in again.stdout and "--retry-failed" in again.stdout, again.stdout
    newest = [r for r in read_records(out) if r["checkpoint_name"] == junk][-1]
    assert (newest["status"], newest["retry"]) == ("failed", "--retry-failed") and "corrupt" in newest["error"]
