"""README.md's ``make demo`` tables against what a run of the demo printed, row by row.

README.md's first demo block ends with the ``machine:`` line the demo prints
(:func:`simeval.demo.fingerprint.fingerprint`). Where this machine's fingerprint is
the same, every row must read digit for digit as README's. Elsewhere HalfCheetah's
chaotic 1000-step returns may move with the CPU and its math libraries, so only what
should hold on any machine is compared: the same rows, the same verdicts, each
cell's episodes within one look, and intervals that overlap.
"""

from __future__ import annotations

import re

README_SECTION = "## `make demo`"
COMPARE = "$ python -m simeval.report compare"
CURVE_LABELS = ("trained, step", "final checkpoint", "untrained policy")
LOOK = 4  # the demo's --look-every


def _blocks(readme: str) -> list[str]:
    """The fenced blocks of README's ``make demo`` section."""
    section = readme.split(README_SECTION, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```[^\n]*\n(.*?)^```", section, flags=re.S | re.M)


def readme_output(readme: str) -> str:
    """README's demo tables as one output text (its curve block, then its suite block)."""
    blocks = [b for b in _blocks(readme) if "untrained policy" in b or COMPARE in b]
    if len(blocks) != 2:
        raise ValueError(f"README.md's make demo section: {len(blocks)} table block(s), expected 2")
    return "\n".join(blocks)


def machine(output: str) -> str | None:
    """The ``machine:`` line's fingerprint, if the output has one."""
    found = re.search(r"^machine: (.+)$", output, flags=re.M)
    return found.group(1).strip() if found else None


def curve_rows(output: str) -> list[str]:
    """The eval curve's rows (and the two reference rows), spaces normalised."""
    return [" ".join(line.split()) for line in output.splitlines() if line.startswith(CURVE_LABELS)]


def compare_rows(output: str) -> list[list[str]]:
    """``report compare``'s table rows, split on spaces."""
    after = output.split(COMPARE, 1)[1] if COMPARE in output else ""
    rows = [line.split() for line in after.splitlines()]
    return [row for row in rows if row and row[0] in ("HalfCheetah-v5", "*") and len(row) > 8]


def exact_lines(output: str) -> list[str]:
    """The suite part's lines README shows: the first look, ``episodes used:``, the compare rows."""
    lines = [" ".join(line.split()) for line in output.splitlines()]
    first_look = [line for line in lines if line.startswith("look ")][:1]
    used = [line for line in lines if line.startswith("episodes used:")]
    return first_look + used + [" ".join(row) for row in compare_rows(output)]


def _interval(text: str) -> tuple[float, float]:
    low, high = re.findall(r"-?\d+(?:\.\d+)?", text.split("[", 1)[1])[:2]
    return float(low), float(high)


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def mismatches(printed: str, readme: str, fingerprint: str) -> list[str]:
    """What in README's demo tables the demo's ``printed`` output contradicts (empty: nothing).

    ``fingerprint`` is this machine's: the same as README's ``machine:`` line, every digit is
    compared; else rows, verdicts, episodes within one look and overlapping intervals.
    """
    shown = readme_output(readme)
    recorded = machine(shown)
    if recorded is None:
        return ["README.md's demo table has no 'machine:' line"]
    if recorded == fingerprint:
        return _row_by_row(curve_rows(shown) + exact_lines(shown), curve_rows(printed) + exact_lines(printed))
    return _consistent(printed, shown)


def _row_by_row(expected: list[str], got: list[str]) -> list[str]:
    pairs = zip(expected, got, strict=False)
    problems = [f"README: {want!r}\n  demo: {have!r}" for want, have in pairs if want != have]
    if len(expected) != len(got):
        problems.append(f"README shows {len(expected)} rows, the demo printed {len(got)}")
    return problems


def _consistent(printed: str, shown: str) -> list[str]:
    """Another machine's run against README's: same rows and verdicts, episodes within a look, overlapping intervals."""
    problems = []
    want, have = curve_rows(shown), curve_rows(printed)
    labels = [row.rsplit(" ", 3)[0] for row in want]
    if labels != [row.rsplit(" ", 3)[0] for row in have]:
        return [f"README's curve rows {want} are not the demo's {have}"]
    for label, a, b in zip(labels, want, have, strict=True):
        if not _overlap(_interval(a), _interval(b)):
            problems.append(f"{label}: README {a!r} and the demo's {b!r}: the intervals do not overlap")
    for a, b in zip(compare_rows(shown), compare_rows(printed), strict=False):
        cell = " ".join(a[:2])
        if a[:2] != b[:2] or a[7] != b[7]:
            problems.append(f"{cell}: README says {a[:2] + [a[7]]}, the demo {b[:2] + [b[7]]}")
        elif a[0] != "*" and abs(int(a[-4]) - int(b[-4])) > LOOK:
            problems.append(f"{cell}: README's {a[-4]} episodes, the demo's {b[-4]}: more than one look apart")
        elif not _overlap(_interval(" ".join(a)), _interval(" ".join(b))):
            problems.append(f"{cell}: B - A intervals do not overlap: README {' '.join(a)!r}, demo {' '.join(b)!r}")
    if len(compare_rows(shown)) != len(compare_rows(printed)):
        problems.append("README's compare table and the demo's have different rows")
    return problems
