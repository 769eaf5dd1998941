"""Sphinx hooks that tie simeval's docs to its code, run at every build.

- The launcher's flag table in ``launcher.md`` (between ``FLAGS_START`` and
  ``FLAGS_END``), made from the parser that ``python -m simeval.launch`` uses
  (``simeval.launch.cli.build_parser``, itself made from ``LaunchConfig``'s
  fields): flag, profile key, default and help text. It is written into the page
  itself, so the page read on a code host has it; a build that finds it out of
  date rewrites it and warns (an error under ``-W``: commit the rewritten page).
- Drift checks for two hand-written tables: the results.jsonl schema
  (``launcher.md``) and the Evaluator's metrics (``evaluator.md``). Each table
  follows a MyST comment line ``% simeval-docs: <name>``; the keys in its first
  column must be exactly the keys the code writes. A difference is a warning,
  which ``make docs`` (``-W``) turns into an error naming the keys.
- The README's Evaluator example must be evaluator.md's complete example, verbatim.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re
import types
from typing import Any

from sphinx.util import logging

log = logging.getLogger(__name__)

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>|#$~])")
_CODE = re.compile(r"`([^`]+)`")


def _md(text: str) -> str:
    """Plain text as Markdown that renders as written (no emphasis, HTML or table breaks)."""
    return _MD_SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


def _code(text: str) -> str:
    return "`" + str(text).replace("|", "\\|") + "`"


# -- the launcher's flag table ------------------------------------------------------------------


def flag_rows() -> list[tuple[str, str, str, str]]:
    """(flag, profile key, default, help) for every flag of ``python -m simeval.launch``, in --help order."""
    from simeval.launch.cli import build_parser
    from simeval.launch.config import FIELDS

    rows = []
    for action in build_parser()._actions:
        if not action.option_strings or action.dest == "help":
            continue
        flag = " ".join(action.option_strings)
        metavar = action.metavar or action.dest.upper()
        if action.nargs == "+":
            flag += f" {metavar} [{metavar} ...]"
        elif action.nargs != 0 and metavar != action.dest.upper():  # a value kind worth showing (JSON)
            flag += f" {metavar}"
        field = FIELDS.get(action.dest)
        if field is None:  # --config, --debug: the command line's own flags
            rows.append((_code(flag), "", "", _md(action.help or "")))
            continue
        meta = field.metadata
        default = field.default_factory() if field.default is dataclasses.MISSING else field.default
        if action.nargs == 0:
            shown = "off"  # a switch: absent unless given
        elif default in (None, {}, []) or not meta.get("show_default", True):
            shown = ""
        else:
            shown = _code(default)
        key = field.name
        if action.nargs == 0:  # what the switch sets, as a profile says it
            key += f": {'true' if action.const else 'false'}"
        rows.append((_code(flag), _code(key), shown, _md(meta["help"])))
    return rows


FLAGS_START = "<!-- flags: generated from simeval.launch.cli.build_parser() by docs/_ext/simeval_docs.py -->"
FLAGS_END = "<!-- /flags -->"


def flag_table() -> str:
    lines = [
        "| flag | profile key | default | what it sets |",
        "|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in flag_rows()]
    return "\n".join(lines) + "\n"


def sync_flag_table(app) -> None:
    """Keep launcher.md's flag table the parser's: rewrite it where it differs, and warn (commit the page)."""
    path = os.path.join(app.srcdir, "launcher.md")
    with open(path) as f:
        page = f.read()
    start, end = page.find(FLAGS_START), page.find(FLAGS_END)
    if start < 0 or end < start:
        log.warning("launcher.md has no flag table between its flags markers", location=("launcher", None))
        return
    block = f"{FLAGS_START}\n\n{flag_table()}\n{FLAGS_END}"
    if page[start : end + len(FLAGS_END)] == block:
        return
    with open(path, "w") as f:
        f.write(page[:start] + block + page[end + len(FLAGS_END) :])
    log.warning(
        "launcher.md's flag table was out of date with the launcher's parser: rewritten; commit docs/launcher.md",
        location=("launcher", None),
    )


# -- drift checks for hand-written tables ----------------------------------------------------------


def documented_keys(path: str, marker: str) -> list[str]:
    """The backticked names in the first column of the table after ``% simeval-docs: <marker>``."""
    with open(path) as f:
        lines = f.read().splitlines()
    tag = f"% simeval-docs: {marker}"
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == tag) + 1
    except StopIteration:
        raise LookupError(f"no line {tag!r} in {path}") from None
    while start < len(lines) and not lines[start].strip():
        start += 1
    keys = []
    for n, line in enumerate(lines[start:]):
        if not line.startswith("|"):
            break
        if n < 2:  # header and separator
            continue
        first = line.split("|")[1]
        keys += _CODE.findall(first)
    return keys


def _modules(root: str):
    """(module name, parsed source) of every module of the simeval package."""
    for folder, _, files in os.walk(os.path.join(root, "simeval")):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                module = os.path.relpath(path, root)[: -len(".py")].replace(os.sep, ".").removesuffix(".__init__")
                with open(path) as f:
                    yield module, ast.parse(f.read())


def _function(root: str, name: str):
    """The module-level function ``name``, wherever in simeval it lives."""
    import importlib

    for module, tree in _modules(root):
        if any(isinstance(n, ast.FunctionDef) and n.name == name for n in tree.body):
            return getattr(importlib.import_module(module), name)
    raise LookupError(f"no function {name} in simeval")


def _make_record_keywords(root: str) -> set[str]:
    """Every keyword the code passes to ``make_record`` (and string keys of dicts it unpacks into it)."""
    found: set[str] = set()
    for _, tree in _modules(root):
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "make_record"):
                continue
            for kw in node.keywords:
                if kw.arg is not None:
                    found.add(kw.arg)
                    continue
                for sub in ast.walk(kw.value):
                    if isinstance(sub, ast.Dict):
                        found.update(k.value for k in sub.keys if isinstance(k, ast.Constant))
    return found


def _strategy_fields(root: str) -> set[str]:
    """The keys a strategy adds to its lines: the constant keys of each ``fields = {...}`` and ``fields.update(...)``
    in ``simeval/strategies/`` (a :class:`~simeval.strategies.Write`'s ``fields``)."""
    found: set[str] = set()
    for module, tree in _modules(root):
        if not module.startswith("simeval.strategies"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "fields" for t in node.targets):
                if isinstance(node.value, ast.Dict):
                    found.update(k.value for k in node.value.keys if isinstance(k, ast.Constant))
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "update":
                if getattr(node.func.value, "id", None) == "fields":
                    found.update(kw.arg for kw in node.keywords if kw.arg is not None)
    return found


def results_keys(root: str) -> set[str]:
    """The top-level keys a results.jsonl line can have, from the code that writes them."""
    from simeval.records import failed_record, make_record

    record_context = _function(root, "record_context")  # what every line says about the run

    result = {
        "eval/step": 1,
        "eval/reward": 0.0,
        "eval/episode_returns": [0.0],
        "eval/episode_lengths": [1],
        "eval/episode_success_at_end": [0.0],
        "eval/episode_success_once": [1.0],
        "eval/workers": [{"node_id": "n", "host": "h", "pid": 1}],
        "eval/episode_seeds": [1],
        "eval/episode_env_seeds": [1],
        "eval/episode_conditions/SETTING": [1.0],
        "eval/episode_sub_envs": [0],
        "eval/episode_ordinals": [0],
        "eval/round": {"num_envs": 1, "quotas": [1], "seed": 0, "shards": [[0, 1]], "device": None},
    }
    cfg = types.SimpleNamespace(backend="thread")
    plan = types.SimpleNamespace(env="HalfCheetah-v5")
    keys = set(make_record(result)) | set(failed_record("x.pt", "error", step=1))
    keys |= set(record_context(cfg, plan, "native"))
    checkpoint_fields = _function(root, "checkpoint_fields")  # which checkpoint a line evaluated
    ck = types.SimpleNamespace(path="x.pt", sha256="0" * 64, meta={"format": "rsl_rl", "architecture": "params"})
    keys |= set(checkpoint_fields(ck, None))
    from simeval.conditions import Condition
    from simeval.launch.suite import Cell, SuiteTask

    task = SuiteTask("HalfCheetah-v5", 1, 0, 1, 10, {"nominal": Condition()}, reference=(0.0, 1.0), bounds=(0.0, 1.0))
    keys |= set(Cell(task, "nominal", Condition()).context("SUITE"))  # a suite's lines (--suite)
    return keys | _make_record_keywords(root) | _strategy_fields(root)


def metric_keys() -> set[str]:
    """An Evaluator result's keys (``log_prefix="eval"``, ``keep_episodes=True``), with names standing for kinds."""
    from simeval import metrics

    raw: dict[str, Any] = dict(metrics.summarize([1.0, 2.0], [10, 12], 22, 1.0))
    info = {"is_success": [1.0, 0.0], "log/LOG": [1.0, float("nan")]}
    raw["end_metrics"] = metrics.end_metrics([True, False], [False, True], info, info_keys=[("is_success",)])
    raw.update(
        episode_returns=[1.0, 2.0],
        episode_lengths=[10, 12],
        episode_terminated=[True, False],
        episode_truncated=[False, True],
        episode_success_at_end=[1.0, 0.0],
        episode_success_once=[1.0, 1.0],
        episode_info={"is_success": [1.0, 0.0]},
        custom={"CUSTOM": 1.0},
        video=[[0]],
        workers=[{"node_id": "n"}],
        episode_sub_envs=[0, 1],
        episode_ordinals=[0, 0],
        round={"num_envs": 2, "quotas": [1, 1], "seed": 0, "shards": [[0, 2]], "device": None},
        step=1,
    )
    names = {
        "eval/is_success": "eval/<info key>",
        "eval/episode_info/is_success": "eval/episode_info/<name>",
        "eval/log/LOG": "eval/log/<name>",
        "eval/CUSTOM": "eval/<metrics_fn key>",
    }
    out = {names.get(key, key) for key in metrics.prefixed(raw, "eval", keep_episodes=True)}
    return out


def _line_of(path: str, text: str) -> int | None:
    with open(path) as f:
        return next((n for n, line in enumerate(f, 1) if line.strip() == text), None)


def check_table(app, page: str, marker: str, expected: set[str]) -> None:
    path = os.path.join(app.srcdir, page)
    documented = set(documented_keys(path, marker))
    missing, extra = sorted(expected - documented), sorted(documented - expected)
    if missing or extra:
        log.warning(
            "%s table out of date with the code: undocumented %s; documented but not written by the code %s",
            marker,
            missing or "none",
            extra or "none",
            location=(page.removesuffix(".md"), _line_of(path, f"% simeval-docs: {marker}")),
        )


def check_same_example(app, root: str) -> None:
    """The README's Evaluator example is evaluator.md's complete example, verbatim (both claim it runs)."""
    fence = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
    with open(os.path.join(root, "README.md")) as f:
        readme = fence.findall(f.read())
    with open(os.path.join(app.srcdir, "evaluator.md")) as f:
        page = fence.findall(f.read())
    if not readme or not page or readme[0] != page[0]:
        log.warning(
            "README.md's first Python example differs from evaluator.md's first (its complete example): "
            "keep them the same",
            location=("evaluator", None),
        )


def on_builder_inited(app) -> None:
    root = os.path.dirname(os.path.abspath(app.srcdir))
    steps = (
        ("flag table", lambda: sync_flag_table(app)),
        ("results.jsonl check", lambda: check_table(app, "launcher.md", "results-schema", results_keys(root))),
        ("metrics check", lambda: check_table(app, "evaluator.md", "metrics", metric_keys())),
        ("example check", lambda: check_same_example(app, root)),
    )
    for what, step in steps:
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - reported as a build warning (an error under -W)
            log.warning("simeval docs: the %s failed: %s: %s", what, type(exc).__name__, exc)


def setup(app) -> dict[str, Any]:
    app.connect("builder-inited", on_builder_inited)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
