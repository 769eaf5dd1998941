"""Results files are opened in place only: no symbolic link followed, regular files only, lines of bounded length.

And whole-file writes (``simeval.atomic``) give the mode any new file of the process gets (the umask's).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest
from launch_helpers import cli

from simeval.launch.config import ConfigError
from simeval.launch.results import ResultsLog
from simeval.records import ResultsFileError, append_record, read_records
from simeval.report import cli as report_cli

PARTIAL = b'{"status": "ok", "step": 1}\n{"status": "ok", "st'  # a partial last line: a repair cuts it


def _elsewhere(tmp_path) -> str:
    """A file outside OUT, ending in a partial line, that a link in OUT points to."""
    target = tmp_path / "elsewhere" / "precious.jsonl"
    target.parent.mkdir()
    target.write_bytes(PARTIAL)
    return str(target)


@pytest.mark.parametrize("name", ["results.jsonl", "attempts.jsonl"])
def test_a_symlink_in_out_is_refused_in_one_line_and_its_target_left_alone(tmp_path, name):
    out = tmp_path / "out"
    out.mkdir()
    target = _elsewhere(tmp_path)
    os.symlink(target, out / name)
    proc = cli("--checkpoint", "/nonexistent/ckpt.pt", "--out", str(out), timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"simeval-launch: error: {out / name} is a symbolic link"), line
    assert "give another --out" in line
    assert open(target, "rb").read() == PARTIAL  # not followed: its last line was not cut


@pytest.mark.parametrize("kind", ["fifo", "directory", "dangling link"])
def test_anything_but_a_regular_file_is_refused_without_blocking(tmp_path, kind):
    out = tmp_path / "out"
    out.mkdir()
    path = out / "results.jsonl"
    if kind == "fifo":
        os.mkfifo(path)  # opening it to read would wait for a writer for ever
    elif kind == "directory":
        path.mkdir()
    else:
        os.symlink(tmp_path / "nowhere.jsonl", path)  # appending would create the file it names
    with pytest.raises(ConfigError) as err:
        ResultsLog(str(out), logger=None)
    message = str(err.value)
    assert message.startswith(str(path)) and "\n" not in message
    assert ("symbolic link" if kind == "dangling link" else "not a regular file") in message
    assert not (tmp_path / "nowhere.jsonl").exists()


def test_a_link_among_the_loggers_files_is_refused(tmp_path):
    out = tmp_path / "out"
    scalars = out / "logs" / "simeval" / "scalars" / "eval"
    scalars.mkdir(parents=True)
    target = _elsewhere(tmp_path)
    os.symlink(target, scalars / "reward.csv")  # torchrl's CSV logger appends there, following links
    with pytest.raises(ConfigError, match=r"reward\.csv is a symbolic link"):
        ResultsLog(str(out), logger="csv")
    assert open(target, "rb").read() == PARTIAL


def test_a_served_evaluators_append_refuses_a_link_too(tmp_path):
    target = _elsewhere(tmp_path)
    os.symlink(target, tmp_path / "results.jsonl")
    with pytest.raises(ResultsFileError, match="is a symbolic link"):
        append_record(str(tmp_path / "results.jsonl"), {"status": "ok", "step": 1})
    assert open(target, "rb").read() == PARTIAL


def _ok_line(step: int, **extra) -> dict:
    return {"status": "ok", "step": step, "metrics": {"reward": 1.0, "num_episodes": 2}, **extra}


def test_report_refuses_a_linked_results_file_and_an_endless_line_in_one_line(tmp_path, capsys):
    linked = tmp_path / "linked"
    linked.mkdir()
    real = tmp_path / "real.jsonl"
    real.write_text(json.dumps(_ok_line(1)) + "\n")
    os.symlink(real, linked / "results.jsonl")
    assert report_cli.main([str(linked)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"simeval-report: error: {linked / 'results.jsonl'} is a symbolic link"), line

    huge = tmp_path / "huge"
    huge.mkdir()
    with open(huge / "results.jsonl", "wb") as f:  # one line of 64 MiB and a byte: valid JSON, never read whole
        f.write(b'{"status": "ok", "step": 1, "pad": "')
        f.write(b"x" * (64 << 20))
        f.write(b'"}\n')
    assert report_cli.main([str(huge)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{huge / 'results.jsonl'}: line 1 is over 64 MiB" in err, err


def test_read_records_bounds_each_line_and_names_a_line_that_is_no_json(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_bytes(b'{"step": 1}\n' + b"[1, 2]\n")
    with pytest.raises(ResultsFileError, match=r"results\.jsonl: line 2 is not a JSON object"):
        list(read_records(str(path)))
    path.write_bytes(b'{"step": 1}\n' + b'{"step": 2, "pad": "' + b"x" * 100 + b'"}\n')
    with pytest.raises(ResultsFileError, match="line 2 is over 0 MiB"):
        list(read_records(str(path), max_line=64))
    path.write_bytes(b'{"step": 1}\n{"step": 2, "pa')  # a partial last line: dropped, as before
    assert list(read_records(str(path))) == [{"step": 1}]


def test_resume_repairs_a_partial_last_line_in_place(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.jsonl").write_bytes(PARTIAL)
    ResultsLog(str(out), logger=None)
    assert (out / "results.jsonl").read_bytes() == b'{"status": "ok", "step": 1}\n'
    partial = len(PARTIAL) - PARTIAL.index(b"\n") - 1
    assert f"dropped a partial last line ({partial} bytes" in capsys.readouterr().out
    (out / "results.jsonl").write_bytes(b'{"status": "ok"')  # no newline at all: nothing is kept
    ResultsLog(str(out), logger=None)
    assert (out / "results.jsonl").read_bytes() == b""


_WRITE = """
import os, sys
os.umask(int(sys.argv[1], 8))
from simeval.atomic import write_atomically
write_atomically(sys.argv[2], lambda f: f.write(b"data"))
"""


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)], ids=["022", "077", "002"])
def test_whole_file_writes_respect_the_umask(tmp_path, umask, mode):
    """A process's umask is process-wide: each case runs in a process of its own."""
    path = tmp_path / "sub" / "file.bin"
    subprocess.run([sys.executable, "-c", _WRITE, oct(umask), str(path)], check=True, timeout=60)
    assert stat.S_IMODE(os.stat(path).st_mode) == mode
    assert path.read_bytes() == b"data" and os.listdir(path.parent) == ["file.bin"]
