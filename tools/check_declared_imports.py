"""`make lint`: every third-party module simeval imports is declared in pyproject.toml, where its users get it.

Each import in simeval/ (ast; ``if TYPE_CHECKING:`` blocks left out: they never run) of a module outside the
standard library is mapped to the distributions that provide it (``importlib.metadata.packages_distributions()``:
run it in the dev venv, where every extra is installed). A module of OPTIONAL is imported lazily, inside the
functions of one feature, and must be declared in each extra named there; a simulator's (SIMULATORS) comes with
its own venv and no extra; every other module must be a core dependency (a module that arrives only through
another package breaks the day that package drops it). A core dependency no file imports is flagged too, unless
RUNTIME_ONLY says what loads it.

One line per missing declaration (the file, the module, where to declare it); exit 1 if there is one.

    python tools/check_declared_imports.py [--pyproject FILE]
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "simeval"
TOOL = "tools/check_declared_imports.py"

# Module -> the extras that must declare its distribution (the feature's extra first; `test` and `libs` stand in for
# it in the dev venv, which installs .[test,libs,...]).
OPTIONAL: dict[str, tuple[str, ...]] = {
    "ray": ("ray", "test"),
    "docker": ("docker", "test"),
    "requests": ("docker", "test"),
    "urllib3": ("docker", "test"),
    "websockets": ("remote", "test"),
    "msgpack": ("remote", "test"),
    "onnx": ("onnx", "libs"),
    "onnxruntime": ("onnx", "libs"),
    "onnxscript": ("onnx", "libs"),
    "google": ("onnx", "libs"),  # google.protobuf: reading ONNX files
    "mujoco_warp": ("warp",),
    "warp": ("warp",),
    "stable_baselines3": ("libs",),  # simeval.integrations.sb3: imported by SB3 training code only
}
# Simulators with venvs of their own (make isaaclab, mjlab, maniskill, lerobot), and what only they bring.
SIMULATORS = {"isaaclab", "isaaclab_tasks", "isaacsim", "mjlab", "mani_skill", "lerobot", "draccus", "safetensors"}
# Core dependencies that no file of simeval imports, and what loads them.
RUNTIME_ONLY = {"imageio-ffmpeg": "imageio's ffmpeg plugin (--video)"}


def normalize(name: str) -> str:
    """A distribution's name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    """``gymnasium[mujoco]>=1.1`` -> ``gymnasium``."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if not match:
        raise ValueError(f"cannot read the requirement {requirement!r}")
    return normalize(match.group(1))


def declared(pyproject: Path) -> tuple[set[str], dict[str, set[str]]]:
    """(core dependencies, extra -> its dependencies), distribution names normalized."""
    project = tomllib.loads(pyproject.read_text())["project"]
    core = {requirement_name(r) for r in project.get("dependencies", [])}
    optional = project.get("optional-dependencies", {})
    extras = {name: {requirement_name(r) for r in reqs} for name, reqs in optional.items()}
    return core, extras


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, module) of each absolute import in ``tree``, in line order, but those in ``if TYPE_CHECKING:``."""
    found, todo = [], [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and _type_checking(node):
            todo.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        todo.extend(ast.iter_child_nodes(node))
    return sorted(found)


def third_party(module: str) -> bool:
    top = module.split(".")[0]
    return top not in sys.stdlib_module_names and top not in ("simeval", "__future__")


def missing(top: str, dists: set[str], core: set[str], extras: dict[str, set[str]]) -> list[str]:
    """Where the module ``top`` (provided by ``dists``) must be declared and is not: "core" or extras' names."""
    if top not in OPTIONAL:
        return [] if dists & core else ["core"]
    return [extra for extra in OPTIONAL[top] if not dists & extras.get(extra, set())]


def where_to(place: str) -> str:
    """``pyproject.toml's [project] dependencies`` or ``... [project.optional-dependencies] EXTRA``."""
    if place == "core":
        return (
            "not a core dependency: add it to pyproject.toml's [project] dependencies (or, for one feature's lazy "
            f"import, to its extra and to OPTIONAL of {TOOL})"
        )
    return f"not in the {place} extra: add it to pyproject.toml's [project.optional-dependencies] {place}"


def problems(pyproject: Path) -> list[str]:
    """One line per missing declaration, and per core dependency imported nowhere."""
    core, extras = declared(pyproject)
    providers = {m: {normalize(d) for d in ds} for m, ds in packages_distributions().items()}
    lines, seen, used = [], set(), set()
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, module in imports(ast.parse(path.read_text(), filename=str(path))):
            top = module.split(".")[0]
            if not third_party(module) or top in SIMULATORS or (path, top) in seen:
                continue
            seen.add((path, top))
            where = f"{path.relative_to(ROOT)}:{line}: imports {module}"
            dists = providers.get(top)
            if not dists:
                lines.append(f"{where}, not installed here: declare it (core or an extra), or name it in SIMULATORS "
                             f"of {TOOL}")  # fmt: skip
                continue
            used |= dists
            shown = "/".join(sorted(dists))
            lines += [f"{where} ({shown}), {where_to(place)}" for place in missing(top, dists, core, extras)]
    for dist in sorted(core - used - set(RUNTIME_ONLY)):
        lines.append(f"pyproject.toml: the core dependency {dist} is imported nowhere in simeval/: drop it, or say "
                     f"what loads it in RUNTIME_ONLY of {TOOL}")  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pyproject", type=Path, default=ROOT / "pyproject.toml")
    args = parser.parse_args(argv)
    lines = problems(args.pyproject)
    for line in lines:
        print(line)
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
