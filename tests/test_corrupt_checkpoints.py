"""A damaged checkpoint file gets one line that names it and says what is wrong, never an internal error.

Files are damaged the ways disks, copies and killed writers damage them: bit
flips, truncation, a zip whose directory is garbage, a tensor of the wrong
shape. hypothesis draws the damage (derandomized: the same cases every run).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from launch_helpers import cli

from simeval import CheckpointError, load_checkpoint
from simeval.checkpoints import peek_step
from simeval.checkpoints.shipped import shipped_checkpoint

RAW = open(shipped_checkpoint(), "rb").read()
# No health check suppressed: the fixture the fuzzers use, tmp_path_factory, is session-scoped.
FUZZ = settings(max_examples=300, derandomize=True, deadline=None)


def _flip(raw: bytes, flips: list[tuple[int, int]]) -> bytes:
    out = bytearray(raw)
    for position, bit in flips:
        out[position % len(out)] ^= 1 << bit
    return bytes(out)


def _loads_or_names_the_file(path: str) -> None:
    for read in (load_checkpoint, peek_step):
        try:
            read(path)
        except CheckpointError as exc:
            message = str(exc)
            assert message.startswith(f"{path}: "), message
            assert "\n" not in message and "local variable" not in message, message


@FUZZ
@given(flips=st.lists(st.tuples(st.integers(0, len(RAW) - 1), st.integers(0, 7)), min_size=1, max_size=4))
def test_bit_flipped_checkpoints_load_or_fail_in_one_line_naming_the_file(tmp_path_factory, flips):
    path = str(tmp_path_factory.mktemp("flip") / "step_0000001.pt")
    with open(path, "wb") as f:
        f.write(_flip(RAW, flips))
    _loads_or_names_the_file(path)


@FUZZ
@given(size=st.integers(0, len(RAW) - 1))
def test_truncated_checkpoints_say_they_are_truncated(tmp_path_factory, size):
    path = str(tmp_path_factory.mktemp("cut") / "step_0000001.pt")
    with open(path, "wb") as f:
        f.write(RAW[:size])
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    assert ("empty file" if size == 0 else "truncated or corrupt") in message, message


def test_a_zip_directory_that_is_not_utf8_is_a_corrupt_file_not_an_internal_error(tmp_path):
    # The case the launcher printed as "cannot access local variable 'name'": a flip inside the
    # zip's central directory makes a member name undecodable, and a reader's recognise() raised.
    at = RAW.rindex(b"PK\x01\x02") + 46  # the first byte of the last member's name in the central directory
    path = str(tmp_path / "step_0000001.pt")
    with open(path, "wb") as f:
        f.write(RAW[:at] + b"\xb7" + RAW[at + 1 :])
    with pytest.raises(CheckpointError, match=r"truncated or corrupt") as caught:
        load_checkpoint(path)
    assert str(caught.value).startswith(f"{path}: ")


def test_the_launcher_names_a_bit_flipped_checkpoint_in_one_line(tmp_path):
    at = RAW.rindex(b"PK\x01\x02") + 46
    path = str(tmp_path / "step_0000001.pt")
    with open(path, "wb") as f:
        f.write(RAW[:at] + b"\xb7" + RAW[at + 1 :])
    proc = cli("--checkpoint", path, "--out", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"simeval-launch: error: {path}: "), proc.stderr
    assert "truncated or corrupt" in lines[0]


def test_a_tensor_of_the_wrong_shape_is_named_with_the_file_and_both_shapes(tmp_path):
    data = torch.load(shipped_checkpoint(), weights_only=True)
    key = next(k for k, v in data["policy"].items() if v.ndim == 2)
    data["policy"][key] = data["policy"][key][:, :-1].clone()  # one input column short
    path = str(tmp_path / "step_0000001.pt")
    torch.save(data, path)
    proc = cli("--checkpoint", path, "--episodes", "2", "--num-envs", "2", "--out", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("simeval-launch: error:")]  # torchrl may warn too
    assert line.startswith(f"simeval-launch: error: {path}: "), line
    given, wanted = tuple(data["policy"][key].shape), (data["policy"][key].shape[0], data["policy"][key].shape[1] + 1)
    assert "shape mismatch" in line and f"{given} vs {wanted}" in line, line
    results = tmp_path / "out" / "results.jsonl"
    assert not results.exists() or '"status": "ok"' not in results.read_text()
