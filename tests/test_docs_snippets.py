"""Every Python block and every launcher command of README.md and docs/*.md runs as written (Sybil).

One test per example, in page order. A page's Python blocks share one namespace (Sybil's, per document) and run
in a temporary directory of the page's own; its shell blocks run there too. Of a shell block only the commands of
simeval's applications run (``python -m simeval.launch|report|export``, ``.venv/bin/python -m ...``), each with
bash in that directory, the repo's .venv first on PATH; other lines (pip, make, sbatch, git, docker) are not run.
A shell block with no such command runs nothing (the summary names it); a launcher command of another venv
(``.venv-isaaclab/bin/python -m simeval.launch``) fails unless its block carries a skip marker. The directory is a
copy of the workspace that tests/docs_workspace.py builds once per session: the paths the commands name
(``runs/exp1/ckpt``, ``eval/a``, ``runs/baseline``, ``OUT/a``, ...), made small.

Markers, HTML comments just above a block (invisible on a rendered page, explicit in its source):

* ``<!-- shrink: "OLD" -> "NEW"; launch += "FLAGS" -->``: the next block runs with each OLD replaced by NEW and
  FLAGS appended to its launcher commands (fewer episodes, fewer steps, the tiny copy of a suite; ShrinkParser).
  A change that changes nothing fails, so a stale marker fails.
* ``<!-- skip: next "why" -->``: Sybil's skip directive; only where a block needs a GPU, a cluster, root or hours.
  Sybil raises ``unittest.SkipTest`` for a skipped example, which pytest would count as a skip (and
  tests/conftest.py as a failure under SIMEVAL_REQUIRE_ALL=1). Here a marked skip is intentional: the test of that
  example checks that the marker gives a reason and passes, and the session's summary lists every such block
  with its reason ("docs snippets not run, by marker"). A skip without a reason fails.

A page can be left out of collection only by naming it in EXCLUDED with why (none is).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

import pytest
from sybil import Sybil
from sybil.parsers.markdown import SkipParser
from sybil.parsers.markdown.lexers import DirectiveInHTMLCommentLexer, FencedCodeBlockLexer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_BIN = os.path.join(REPO, ".venv", "bin")
PAGES = ["README.md"] + sorted(f"docs/{n}" for n in os.listdir(os.path.join(REPO, "docs")) if n.endswith(".md"))
# Pages left out of collection, each with why (none today: every page's blocks run, or are skipped by a marker).
EXCLUDED: dict[str, str] = {}
COMMAND_TIMEOUT_S = 180
# A command of simeval's applications: python -m simeval.launch / report / export, or the console scripts.
APP_COMMAND = re.compile(
    r"(?:^|\s)(?:\S*python3?\s+-m\s+simeval\.(?:launch|report|export)|simeval-(?:launch|report|export))\b"
)
# ... run with the .venv this suite runs in: plain `python`, or .venv/bin/python.
OWN_PYTHON = re.compile(r"^(?:python3?|\.venv/bin/python3?)\s+-m\s+simeval\.|^simeval-")
QUOTED = r'"((?:[^"\\]|\\.)*)"'
SHRINK_ITEM = re.compile(rf"{QUOTED}\s*->\s*{QUOTED}|launch\s*\+=\s*{QUOTED}")
SHRINK_SPLIT = re.compile(r';(?=(?:[^"]*"[^"]*")*[^"]*$)')  # a ; outside quotes
LAUNCH = re.compile(r"-m\s+simeval\.launch\b|simeval-launch\b")


# -- the markers ------------------------------------------------------------------------------------------------


class ShrinkParser:
    """``<!-- shrink: "OLD" -> "NEW"; launch += "FLAGS" -->``: changes to the next code block of the page.

    ``"OLD" -> "NEW"`` replaces text (each OLD must be in the block); ``launch += "FLAGS"`` appends FLAGS to each
    ``simeval.launch`` command of the block but those with ``--suite`` (a suite file sets its own episodes: shrink
    those with a ``"suites/X.yaml" -> "X-tiny.yaml"`` pair, the workspace's tiny copy).
    """

    def __init__(self) -> None:
        self.lexer = DirectiveInHTMLCommentLexer(directive="shrink", arguments=".+?")

    def __call__(self, document):
        for region in self.lexer(document):
            items = []
            for item in filter(None, (part.strip() for part in SHRINK_SPLIT.split(region.lexemes["arguments"]))):
                match = SHRINK_ITEM.fullmatch(item)
                if match is None:
                    raise ValueError(
                        f'{document.path}: a shrink item is neither "OLD" -> "NEW" nor launch += "FLAGS": {item!r}'
                    )
                old, new, flags = (None if group is None else group.replace('\\"', '"') for group in match.groups())
                items.append(("launch +=", flags) if flags is not None else (old, new))
            region.parsed = items
            region.evaluator = self.evaluate
            yield region

    @staticmethod
    def evaluate(example) -> None:
        if "_shrink" in example.namespace:
            raise AssertionError(f"line {example.line}: a shrink marker after another, with no code block between")
        example.namespace["_shrink"] = (example.line, example.parsed)


def _with_flags(line: str, flags: str) -> str:
    """A launcher command line with flags appended (before its comment); --suite commands are left alone."""
    if not LAUNCH.search(line) or "--suite" in line:
        return line
    command, hash_, comment = line.partition(" #")
    return f"{command.rstrip()} {flags}" + (f"   #{comment}" if hash_ else "")


def _shrunk(example, source: str) -> str:
    """The block's source with the pending shrink marker's changes; a change that changes nothing fails."""
    line, items = example.namespace.pop("_shrink", (None, []))
    for old, new in items:
        if old == "launch +=":
            changed = "\n".join(_with_flags(command, new) for command in source.replace("\\\n", " ").splitlines())
        else:
            changed = source.replace(old, new)
        if changed == source:
            raise AssertionError(
                f"the shrink marker at line {line} ({old} {new!r}) changes nothing in the block at line "
                f"{example.line}: update the marker"
            )
        source = changed
    return source


class CodeBlocks:
    """Fenced ```python and ```bash blocks, each run by its evaluator."""

    def __init__(self) -> None:
        self.lexer = FencedCodeBlockLexer(language=r"python|bash", mapping={"language": "language", "source": "source"})

    def __call__(self, document):
        for region in self.lexer(document):
            language = region.lexemes["language"]
            region.parsed = str(region.lexemes["source"])
            region.evaluator = run_python if language == "python" else run_shell
            yield region


def run_python(example) -> None:
    source = _shrunk(example, example.parsed)
    # the block's own line numbers in tracebacks: the code starts on the line after its fence
    code = compile("\n" * example.line + source, example.path, "exec")
    exec(code, example.namespace)  # noqa: S102 - the docs' own code


def _logical_lines(source: str) -> list[str]:
    """Shell lines, continuation backslashes joined."""
    return [line for line in source.replace("\\\n", " ").splitlines() if line.strip()]


def run_shell(example) -> None:
    source = _shrunk(example, example.parsed)
    commands = [line for line in _logical_lines(source) if APP_COMMAND.search(line)]
    if not commands:  # make, pip, sbatch, a benchmark script ...: not run, and named in the session's summary
        NO_COMMAND.append((os.path.relpath(example.path, REPO), example.line))
        return
    env = dict(os.environ, PATH=VENV_BIN + os.pathsep + os.environ.get("PATH", ""), PYTHONUNBUFFERED="1")
    env.pop("PYTHONPATH", None)
    for command in commands:
        if not OWN_PYTHON.match(command.strip()):
            raise AssertionError(
                f"line {example.line}: {command.strip()!r} runs in another venv than this suite's .venv: mark the "
                'block <!-- skip: next "why" --> (its own lane tests it)'
            )
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=example.namespace["_cwd"],
            env=env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )
        if done.returncode != 0:
            output = (done.stdout + done.stderr)[-4000:]
            raise AssertionError(f"$ {command.strip()}\nexit {done.returncode}:\n{textwrap.indent(output, '  ')}")


SYBIL = Sybil(parsers=[CodeBlocks(), ShrinkParser(), SkipParser()], patterns=["*.md"])


# -- the tests -------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _documents():
    return {page: SYBIL.parse(Path(REPO, page)) for page in PAGES if page not in EXCLUDED}


def _examples():
    for page, document in _documents().items():
        for example in document.examples():
            kind = {run_python: "python", run_shell: "bash", ShrinkParser.evaluate: "shrink"}.get(
                example.region.evaluator, "skip"
            )
            yield pytest.param(page, example, id=f"{page}:{example.line}:{kind}")


SKIPPED: list[tuple[str, int, str]] = []  # (page, line, reason): blocks not run, by their marker
NO_COMMAND: list[tuple[str, int]] = []  # (page, line): shell blocks without a launcher, report or export command


class _Summary:
    @staticmethod
    def pytest_terminal_summary(terminalreporter):
        if SKIPPED:
            terminalreporter.section("docs snippets not run, by marker (intentional)")
            for page, line, reason in SKIPPED:
                terminalreporter.write_line(f"{page}:{line}: {reason}")
        if NO_COMMAND:
            terminalreporter.write_line(
                "shell blocks with no launcher, report or export command (nothing in them is run): "
                + ", ".join(f"{page}:{line}" for page, line in NO_COMMAND)
            )
        if EXCLUDED:
            terminalreporter.write_line(
                "docs pages not collected: " + "; ".join(f"{page} ({why})" for page, why in EXCLUDED.items())
            )


@pytest.fixture(scope="module")
def workspace(request, tmp_path_factory):
    """The session's workspace (tests/docs_workspace.py), built once; each page runs in a copy of it."""
    request.config.pluginmanager.register(_Summary(), "docs-snippets-summary")
    where = str(tmp_path_factory.mktemp("docs") / "workspace")
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [sys.executable, os.path.join(REPO, "tests", "docs_workspace.py"), where],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    yield where


_PAGE_DIRS: dict[str, str] = {}


def _enter(page: str, document, workspace: str) -> str:
    """The page's directory (a copy of the workspace), made at its first example."""
    if page not in _PAGE_DIRS:
        where = tempfile.mkdtemp(prefix="docs-" + page.replace("/", "-").removesuffix(".md") + "-")
        shutil.copytree(workspace, where, symlinks=True, dirs_exist_ok=True)
        _PAGE_DIRS[page] = where
        document.namespace["_cwd"] = where
    return _PAGE_DIRS[page]


def _close(namespace: dict) -> None:
    """Shut down what a page's blocks left running (Evaluators, envs)."""
    from simeval import Evaluator

    for value in list(namespace.values()):
        if isinstance(value, Evaluator):
            value.shutdown()


@pytest.fixture(scope="module", autouse=True)
def _close_pages():
    yield
    for page, document in _documents().items():
        _close(document.namespace)
        shutil.rmtree(_PAGE_DIRS.pop(page, ""), ignore_errors=True)


@pytest.mark.parametrize(("page", "example"), list(_examples()))
def test_doc_snippet(page, example, workspace):
    where = _enter(page, example.document, workspace)
    before = os.getcwd()
    os.chdir(where)
    try:
        example.evaluate()
    except unittest.SkipTest as skip:
        reason = str(skip).strip()
        assert reason, f"{page}:{example.line}: a skip marker must say why the block is not run"
        SKIPPED.append((page, example.line, reason))
    finally:
        os.chdir(before)
