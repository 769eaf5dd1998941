"""A simulator's name appears in simeval's code only in its own home and the registry.

Every module under ``simeval/`` is read token by token: identifiers, imports and strings
count; comments and docstrings do not. A token that names a simulator (the spellings
below, case-insensitive) outside that simulator's home (its package under
``simeval/envs/simulators/``) and the registry (``simeval/envs/simulators/__init__.py``)
is reported as ``path:line: <simulator> named outside its home: <token>`` and the run
exits 1. MuJoCo is the physics of five simulators (LeRobot's ALOHA among them): its name may appear in
each of their homes. The exceptions are the assignments :data:`EXCEPTIONS` names (old references in
:data:`simeval.refs.MOVED_REFS`, the demo's fingerprint libraries).

Run by ``make lint``.
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "simeval"
SIMULATORS = "simeval/envs/simulators/"
REGISTRY = SIMULATORS + "__init__.py"

# simulator -> (how code spells it, the homes where it may be spelled)
HOMES: dict[str, tuple[str, tuple[str, ...]]] = {
    "Isaac Lab": (r"isaac", (SIMULATORS + "isaaclab/",)),
    "mjlab": (r"mjlab", (SIMULATORS + "mjlab/",)),
    "MuJoCo Warp": (r"warp", (SIMULATORS + "mujoco_warp/",)),
    "ManiSkill3": (r"maniskill|mani_skill|sapien", (SIMULATORS + "maniskill/", SIMULATORS + "maniskill.py")),
    "MuJoCo": (
        r"mujoco",
        (
            SIMULATORS + "mujoco_native/",
            SIMULATORS + "mujoco_warp/",
            SIMULATORS + "mjlab/",
            SIMULATORS + "gymnasium_vector.py",
            SIMULATORS + "lerobot/",  # ALOHA's physics and cameras
        ),
    ),
}
# MOVED_REFS: the old references profiles written before a move still name; LIBRARIES: the versions the
# demo's HalfCheetah numbers depend on (its fingerprint).
EXCEPTIONS = {("simeval/refs.py", "MOVED_REFS"), ("simeval/demo/fingerprint.py", "LIBRARIES")}


def _docstrings(tree: ast.AST) -> set[tuple[int, int]]:
    """Start positions of the module's, classes' and functions' docstrings."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                if isinstance(body[0].value.value, str):
                    found.add((body[0].lineno, body[0].col_offset))
    return found


def _excepted_lines(rel: str, tree: ast.AST) -> set[int]:
    """Lines of the assignments :data:`EXCEPTIONS` names in this module."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = {t.id for t in targets if isinstance(t, ast.Name)}
            if any((rel, name) in EXCEPTIONS for name in names):
                lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return lines


def check(path: Path) -> list[str]:
    """The lines of ``path`` that name a simulator outside its home."""
    rel = path.relative_to(ROOT).as_posix()
    if rel == REGISTRY:
        return []
    source = path.read_text()
    tree = ast.parse(source)
    docstrings, excepted = _docstrings(tree), _excepted_lines(rel, tree)
    problems = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in (tokenize.NAME, tokenize.STRING) or tok.start[0] in excepted:
            continue
        if tok.type == tokenize.STRING and tok.start in docstrings:
            continue
        for simulator, (pattern, homes) in HOMES.items():
            if re.search(pattern, tok.string, re.IGNORECASE) and not rel.startswith(homes):
                problems.append(f"{rel}:{tok.start[0]}: {simulator} named outside its home: {tok.string[:80]}")
    return problems


def main() -> int:
    """Check every module of the package; print each problem, exit 1 if there is any."""
    problems = [p for path in sorted(PACKAGE.rglob("*.py")) for p in check(path)]
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} simulator names outside their homes (tools/check_simulator_names.py)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
