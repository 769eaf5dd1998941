"""Reading run directories: their results.jsonl lines that count, and a label for each directory."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from simeval.records import read_records


def read_results(out_dir: str) -> list[dict]:
    """The successful records in ``out_dir``'s results.jsonl, by step: the newest line of each evaluation.

    An evaluation is a checkpoint (``checkpoint_name``) and, for a suite, a cell
    (``task``, ``condition``): when it has several lines (a failure, then an ok
    line from a resume or ``--retry-failed``), the newest (last written) is the
    one that counts. Lines without ``checkpoint_name`` (a served evaluator's) are
    each their own evaluation.

    Raises:
        FileNotFoundError: there is no results.jsonl.
        ResultsFileError: it is a symbolic link or no regular file, or holds a line over 64 MiB or not JSON.
    """
    path = os.path.join(out_dir, "results.jsonl")
    if not os.path.lexists(path):
        raise FileNotFoundError(f"{out_dir}: no results.jsonl (is it a simeval.launch --out directory?)")
    rows = [r for r in newest_lines(read_records(path)) if r.get("status") == "ok"]
    return sorted(rows, key=lambda r: r["step"])


def newest_lines(records: Iterable[dict]) -> list[dict]:
    """The last line of each (checkpoint name, task, condition), in file order; a line without a name is kept."""
    newest: dict[object, tuple[int, dict]] = {}
    for k, r in enumerate(records):
        key = (r["checkpoint_name"], r.get("task"), r.get("condition")) if "checkpoint_name" in r else k
        newest[key] = (k, r)
    return [r for _, r in sorted(newest.values(), key=lambda item: item[0])]


def labels(dirs: Sequence[str]) -> list[str]:
    """A label per results directory: the fewest trailing path parts that tell it from every other one.

    Directories are compared as absolute paths, so two different directories
    never share a label (``seed0/out``, ``seed1/out``); the same directory
    given twice gets the same label.
    """
    parts = [tuple(os.path.abspath(d).split(os.sep)) for d in dirs]
    distinct = set(parts)
    out = []
    for path in parts:
        k = 1
        while k < len(path) and any(other[-k:] == path[-k:] for other in distinct if other != path):
            k += 1
        out.append(os.sep.join(path[-k:]) or os.sep)
    return out
