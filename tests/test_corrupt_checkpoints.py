"""A damaged checkpoint file gets one line that names it and says what is wrong, never an internal error.

Files are damaged the ways disks, copies and killed writers damage them: bit
flips, truncation, a zip whose directory is garbage, a tensor of the wrong
shape. hypothesis draws the damage (derandomized: the same cases every run).
"""

from __future__ import annotations

import sys

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


def test_a_checkpoint_in_torchs_legacy_pickle_format_loads_with_the_same_weights(tmp_path):
    # torch.save before 1.6 (and _use_new_zipfile_serialization=False) writes a pickle stream, not a zip.
    data = torch.load(shipped_checkpoint(), weights_only=True)
    path = str(tmp_path / "legacy.pt")
    torch.save(data, path, _use_new_zipfile_serialization=False)
    assert open(path, "rb").read(2) == b"\x80\x02"
    legacy, current = load_checkpoint(path), load_checkpoint(shipped_checkpoint())
    assert legacy.step == current.step == peek_step(path)
    assert set(legacy.policy.keys(True, True)) == set(current.policy.keys(True, True))
    assert all(torch.equal(legacy.policy[k], current.policy[k]) for k in current.policy.keys(True, True))


def test_a_zip_that_is_no_checkpoint_is_named_so_by_the_watchers_peek_and_by_load(tmp_path):
    import zipfile

    path = tmp_path / "notes.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("notes.txt", "not weights")
    for read in (load_checkpoint, peek_step):
        with pytest.raises(CheckpointError, match="not a checkpoint format simeval knows"):
            read(path=str(path), format=None)


def test_a_nesting_deeper_than_python_recursion_is_walked_within_a_bound():
    from simeval.checkpoints.bounds import check_tensors

    nested: list = [torch.zeros(2)]
    for _ in range(5 * sys.getrecursionlimit()):
        nested = [nested]
    check_tensors("deep.pt", {"policy": nested})  # no RecursionError: the walk stops at a fixed depth
    with pytest.raises(CheckpointError, match=r"tensor 'policy\.a\[0\]\[0\]' of shape \(50, 50\)"):
        check_tensors("deep.pt", {"policy": {"a": [(torch.zeros(1).expand(50, 50),)]}})  # within it: each is checked
