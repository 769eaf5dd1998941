"""`make lint`: scripts beside the package (examples, benchmarks, tools) use the library, never the launcher.

Nor the applications beside it that run it (the Docker launcher, the demo).

lint-imports checks the package itself (pyproject's [tool.importlinter]); this
checks the files outside it that a user copies from. Running the launcher as a
program (``python -m simeval.launch``) is how they use it, not an import.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

FOLDERS = ("examples", "benchmarks", "tools")
APPLICATIONS = ("simeval.launch", "simeval.containers", "simeval.demo")


def launcher_imports(path: Path) -> list[str]:
    """``file:line: import`` for each import of the launcher in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        if any(name == app or name.startswith(app + ".") for name in names for app in APPLICATIONS):
            found.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
    return found


def main(root: str = ".") -> int:
    """Print every launcher import outside the package; exit 1 if there is one."""
    paths = [path for folder in FOLDERS for path in sorted(Path(root, folder).rglob("*.py"))]
    found = [hit for path in paths for hit in launcher_imports(path)]
    for hit in found:
        print(f"{hit}  <- outside the applications: use the library (simeval.checkpoints, simeval.policies, ...)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
