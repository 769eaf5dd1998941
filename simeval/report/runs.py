"""Reading run directories: their results.jsonl lines that count, and a label for each directory.

An adaptive run (the launcher's ``--until-decided`` / ``--until-precise``) writes one line per
look of a (checkpoint, cell), each with ``look`` (0, 1, ...) and the run's look plan
(``sequential``): :func:`read_results` keeps every look, and :func:`merge_looks` makes them the
one row per (checkpoint, cell) that the eval curves show.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from simeval.records import read_records
from simeval.sequential import LookPlan, SequentialMean

# Per-episode lists an adaptive run's looks each hold part of, in look order.
_EPISODE_LISTS = (
    "episode_returns",
    "episode_lengths",
    "episode_seeds",
    "episode_env_seeds",
    "episode_success_once",
    "episode_success_at_end",
    "episode_sub_envs",
    "episode_ordinals",
)
# Metrics recomputed over the joined episodes: metric -> the per-episode list it is the mean of.
_SUCCESS_METRICS = (("success_once", "episode_success_once"), ("success_at_end", "episode_success_at_end"))


def read_results(out_dir: str) -> list[dict]:
    """The successful records in ``out_dir``'s results.jsonl, by step: the newest line of each evaluation.

    An evaluation is a checkpoint (``checkpoint_name``) and, for a suite, a cell
    (``task``, ``condition``), and for an adaptive run a look (``look``): when it has
    several lines (a failure, then an ok line from a resume or ``--retry-failed``), the
    newest (last written) is the one that counts. Lines without ``checkpoint_name`` (a served evaluator's) are
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


def holds_run_of(out_dir: str, field: str) -> bool:
    """Whether ``out_dir``'s results.jsonl holds a line with the mapping ``field`` (the plan a strategy writes on
    each of its lines: ``selection``, ``search``)."""
    path = os.path.join(out_dir, "results.jsonl")
    if not os.path.isfile(path):
        return False
    return any(isinstance(r.get(field), dict) for r in read_records(path))


def read_failures(out_dir: str) -> list[dict]:
    """The failed lines of ``out_dir``'s results.jsonl that still stand, in file order.

    A failed line stands unless an ok line written after it evaluates the same thing: the
    same ``checkpoint_name`` and, where the failed line names them, the same ``task`` and
    ``condition`` (a checkpoint that could not be read fails without a cell; an adaptive
    cell's later looks are ok lines of their own). Of several failed lines of one
    evaluation, the newest is kept. A failed line without ``checkpoint_name`` stands.

    Raises:
        FileNotFoundError: there is no results.jsonl.
        ResultsFileError: as :func:`read_results`.
    """
    path = os.path.join(out_dir, "results.jsonl")
    if not os.path.lexists(path):
        raise FileNotFoundError(f"{out_dir}: no results.jsonl (is it a simeval.launch --out directory?)")
    records = list(read_records(path))
    ok_after: list[tuple[int, Mapping[str, Any]]] = [
        (k, r) for k, r in enumerate(records) if r.get("status") == "ok" and "checkpoint_name" in r
    ]

    def redone(k: int, failed: Mapping[str, Any]) -> bool:
        return any(
            j > k
            and r["checkpoint_name"] == failed["checkpoint_name"]
            and all(failed.get(f) is None or r.get(f) == failed.get(f) for f in ("task", "condition"))
            for j, r in ok_after
        )

    newest: dict[object, dict] = {}
    for k, r in enumerate(records):
        if r.get("status") != "failed":
            continue
        if "checkpoint_name" not in r:
            newest[k] = dict(r)
            continue
        key = (r["checkpoint_name"], r.get("task"), r.get("condition"))
        newest.pop(key, None)  # the newest failed line of an evaluation, where it was written
        if not redone(k, r):
            newest[key] = dict(r)
    return list(newest.values())


def newest_lines(records: Iterable[dict]) -> list[dict]:
    """The last line of each (checkpoint name, task, condition, look), in file order; a line without a name is kept."""
    newest: dict[object, tuple[int, dict]] = {}
    for k, r in enumerate(records):
        key = (r["checkpoint_name"], r.get("task"), r.get("condition"), r.get("look")) if "checkpoint_name" in r else k
        newest[key] = (k, r)
    return [r for _, r in sorted(newest.values(), key=lambda item: item[0])]


def merge_looks(rows: Sequence[Mapping[str, Any]]) -> list[dict]:
    """``rows`` with each adaptive evaluation's looks made one row, where its first look was; other rows as they are.

    The looks of one (checkpoint, cell) are those with the same ``checkpoint_name``, step, task
    and condition. The merged row is its last look's line (less its ``round``) with every look's per-episode
    lists joined in look order, ``looks`` (how many), and ``metrics`` ``reward`` (the mean of all the
    episodes), ``num_episodes``, and ``reward_ci_low``/``reward_ci_high``: the 95% confidence
    sequence of the mean (:class:`simeval.sequential.SequentialMean`, with the line's ``bounds``
    when it declares them, tuned for its plan's first look) replayed look by look, which holds
    however the run chose when to stop (a bootstrap of the joined episodes would not).

    Raises:
        ValueError: a look's episode lies outside its declared bounds, or is not finite (one line).
    """
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for r in rows:
        if "look" in r:
            key = (r.get("checkpoint_name"), int(r["step"]), r.get("task"), r.get("condition"), r.get("env"))
            groups.setdefault(key, []).append(r)
    out, done = [], set()
    for r in rows:
        if "look" not in r:
            out.append(dict(r))
            continue
        key = (r.get("checkpoint_name"), int(r["step"]), r.get("task"), r.get("condition"), r.get("env"))
        if key not in done:
            done.add(key)
            out.append(_merged(sorted(groups[key], key=lambda line: int(line["look"]))))
    return out


def _merged(looks: list[Mapping[str, Any]]) -> dict:
    """One row from an evaluation's looks (sorted by look)."""
    row = dict(looks[-1])
    row.pop("round", None)  # each look was a round of its own: the merged row is none of them
    for key in _EPISODE_LISTS:
        if all(isinstance(line.get(key), list) for line in looks):
            row[key] = [v for line in looks for v in line[key]]
        else:
            row.pop(key, None)
    bounds = row.get("bounds")
    bounds = (float(bounds["low"]), float(bounds["high"])) if isinstance(bounds, Mapping) else None
    try:
        plan_n = LookPlan.from_data(row.get("sequential")).look_every
    except ValueError:  # no plan recorded: tuned for the first look's episodes
        plan_n = max(2, len(looks[0].get("episode_returns") or []))
    name = f"{row.get('checkpoint_name')}: {row.get('task') or row.get('env')} / {row.get('condition') or 'nominal'}"
    seq = SequentialMean(0.95, bounds, plan_n=plan_n, name=name)
    for line in looks:
        seq.update(line.get("episode_returns") or [])
    returns = row.get("episode_returns") or []
    metrics = dict(row.get("metrics") or {})
    metrics.update(
        reward=seq.mean,
        reward_ci_low=seq.low if math.isfinite(seq.low) else None,
        reward_ci_high=seq.high if math.isfinite(seq.high) else None,
        num_episodes=len(returns),
    )
    for metric, key in (("episode_length", "episode_lengths"), *_SUCCESS_METRICS):
        values = row.get(key)
        if values:
            metrics[metric] = sum(float(v) for v in values) / len(values)
    row.pop("look", None)
    row.update(metrics=metrics, looks=len(looks))
    return row


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
