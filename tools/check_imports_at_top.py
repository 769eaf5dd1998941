"""`make lint`: an import of simeval inside a function must be one the import-order rule needs deferred.

The rule (docs/ARCHITECTURE.md, "Imports"): NumPy, torch, tensordict, torchrl, ray, MuJoCo, Warp,
gymnasium, Isaac Lab, mjlab, matplotlib and SciPy are imported where they are used, so that
``import simeval`` stays light and an Isaac Lab worker can run its ``init_fn`` before torch
is imported. A module of simeval that imports none of them at its top (itself or through
other simeval modules) is *light*: importing it inside a function defers nothing, so it is
imported at the top of the module that uses it, unless that would make the two modules
import each other at their tops (then the deferral is needed, and allowed).

Computed from the source alone (ast): no module is imported. Prints each import to move,
``file:line``; exit 1 if there is one.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "simeval"
HEAVY = ("numpy", "torch", "tensordict", "torchrl", "ray", "mujoco", "mujoco_warp", "warp", "gymnasium", "isaaclab",
         "isaaclab_tasks", "isaacsim", "mjlab", "matplotlib", "scipy", "onnx", "onnxruntime")  # fmt: skip


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _names(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]) -> list[str]:
    """The modules an import statement loads (for ``from M import x``: M, and M.x when that is a module)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    target = _resolve(node, module, is_package)
    return [target, *(f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in known)]


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def top_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Imports that run when the module is imported: at its top, in top-level try/if (not TYPE_CHECKING)."""
    found, todo = [], list(tree.body)
    while todo:
        node = todo.pop(0)
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If) and not _type_checking(node):
            todo.extend(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            todo.extend(node.body + node.orelse + node.finalbody + [n for h in node.handlers for n in h.body])
    return found


def main() -> int:
    files = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    known = set(files)
    trees = {m: ast.parse(p.read_text(), filename=str(p)) for m, p in files.items()}
    package = {m: files[m].name == "__init__.py" for m in files}
    top: dict[str, set[str]] = {}
    for m, tree in trees.items():
        deps = set()
        for node in top_level_imports(tree):
            deps.update(_names(node, m, package[m], known))
        parents = {".".join(m.split(".")[:k]) for k in range(1, m.count(".") + 1)}
        top[m] = deps | parents  # importing a module runs its packages' __init__ first

    heavy_memo: dict[str, bool] = {}

    def heavy(m: str, seen: frozenset = frozenset()) -> bool:
        if m in heavy_memo:
            return heavy_memo[m]
        if m.split(".")[0] in HEAVY:
            return True
        if m not in top or m in seen:
            return False
        result = any(heavy(d, seen | {m}) for d in top[m] if d.split(".")[0] in (*HEAVY, "simeval"))
        heavy_memo[m] = result
        return result

    def reaches(start: str, goal: str) -> bool:
        todo, seen = [start], set()
        while todo:
            m = todo.pop()
            if m == goal:
                return True
            if m in seen or m not in top:
                continue
            seen.add(m)
            todo.extend(d for d in top[m] if d in known)
        return False

    problems = []
    for m, tree in trees.items():
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if not isinstance(node, ast.Import | ast.ImportFrom):
                    continue
                targets = _names(node, m, package[m], known)
                if not all(t.startswith("simeval") and t in known for t in targets):
                    continue  # a third-party import, or a name that is no module of simeval
                if isinstance(node, ast.ImportFrom) and len(targets) < 1 + len(node.names):
                    continue  # a package's lazy export (simeval.Evaluator): what it loads is not in the source
                if any(heavy(t) for t in targets) or any(reaches(t, m) for t in targets):
                    continue  # deferred for the rule, or at the top the two would import each other
                problems.append(f"{files[m].relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    for line in problems:
        print(line)
    if problems:
        print(
            f"{len(problems)} import(s) of light simeval modules inside functions: import them at the top "
            "(tools/check_imports_at_top.py says why)",
            file=sys.stderr,
        )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
