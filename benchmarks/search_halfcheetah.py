"""Where does the shipped HalfCheetah policy fail? The search against a brute-force uniform grid (docs/search.md).

    python benchmarks/search_halfcheetah.py [--out runs/search-halfcheetah] [--quick]

Runs, through the launcher as a user would, on the shipped final checkpoint (1000-step episodes, 16 sub-envs):

1. ``--search body_mass_scale=0.5:3.0`` (one axis) and ``--search body_mass_scale=0.5:3.0 --search push=0:10``
   (two axes), failure = a return below half the nominal return, ``--evidence 2`` on the two-axis map;
2. the brute-force grid a user would write instead: a suite with one cell per finest region of the search's
   resolution (each cell's settings drawn per episode within it), a fixed number of episodes per cell.

Prints, in Markdown: each map (the launcher's table), the episodes each method spent and its wall time, and how the
search's classes agree with the grid's failure rates cell by cell (a region called ``fail``/``pass`` beside the
grid's cells inside it). The nominal return is measured first, on the same seeds as ``report`` would.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from simeval.checkpoints.shipped import SHIPPED_RUN  # noqa: E402
from simeval.machine import cpu_model  # noqa: E402

FINAL = os.path.join(SHIPPED_RUN, "step_001001472.pt")
COMMON = ["--checkpoint", FINAL, "--env", "HalfCheetah-v5", "--num-envs", "16", "--seed", "0"]


def launch(*args: str) -> tuple[str, float]:
    """Run the launcher; its stdout and wall seconds (a failure stops the benchmark with the launcher's error)."""
    start = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "simeval.launch", *args], capture_output=True, text=True, cwd=REPO)
    if run.returncode != 0:
        raise SystemExit(f"launcher failed: {' '.join(args)}\n{run.stderr[-2000:]}")
    return run.stdout, time.monotonic() - start


def lines(out: str) -> list[dict]:
    with open(os.path.join(out, "results.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def nominal_return(out: str, episodes: int) -> float:
    launch(*COMMON, "--episodes", str(episodes), "--out", out)
    return float(lines(out)[-1]["metrics"]["reward"])


def grid_suite(path: str, axes: list[tuple[str, float, float]], cells: int, episodes: int) -> list[dict]:
    """A suite of one cell per grid box (each axis cut in ``cells``); the boxes."""
    boxes: list[dict] = [{}]
    for name, lo, hi in axes:
        width = (hi - lo) / cells
        boxes = [{**b, name: [lo + i * width, lo + (i + 1) * width]} for b in boxes for i in range(cells)]
    conditions = "\n".join(f"      c{i}: {json.dumps(b)}" for i, b in enumerate(boxes))
    with open(path, "w") as f:
        f.write(f"name: grid\nepisodes: {episodes}\nseed: 0\nnum_envs: 16\nmax_steps: 1000\ntasks:\n"
                f"  - env: HalfCheetah-v5\n    conditions:\n{conditions}\n")  # fmt: skip
    return boxes


def grid_rates(out: str, threshold: float) -> dict[str, tuple[float, int]]:
    """Each grid cell's failure rate and episodes."""
    found = {}
    for r in lines(out):
        if r.get("status") == "ok":
            returns = r["episode_returns"]
            found[r["condition"]] = (sum(x < threshold for x in returns) / len(returns), len(returns))
    return found


def agreement(final: dict, boxes: list[dict], rates: dict[str, tuple[float, int]], level: float) -> str:
    """For each decided region of the map: the grid cells inside it and how many of their rates sit on its side."""
    rows = ["| region | class | grid cells inside | on its side of the level |", "|---|---|---|---|"]
    for region in final["map"]["regions"]:
        if region["class"] == "uncertain":
            continue
        inside = [
            rates[f"c{i}"][0]
            for i, b in enumerate(boxes)
            if all(region["bounds"][n][0] <= lo and hi <= region["bounds"][n][1] + 1e-9 for n, (lo, hi) in b.items())
            and f"c{i}" in rates
        ]
        side = sum((x >= level) == (region["class"] == "fail") for x in inside)
        box = " x ".join(f"{n} [{lo:.3g}, {hi:.3g}]" for n, (lo, hi) in region["bounds"].items())
        rows.append(f"| {box} | {region['class']} | {len(inside)} | {side} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join("runs", "search-halfcheetah"))
    parser.add_argument("--quick", action="store_true", help="small budgets (a smoke run)")
    args = parser.parse_args()
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    budget1, budget2, per_cell = ("128", "256", 4) if args.quick else ("512", "1024", 16)
    print(f"`python benchmarks/search_halfcheetah.py{' --quick' if args.quick else ''}`, "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; {os.cpu_count()} CPUs ({cpu_model()}), "
          f"Python {platform.python_version()}\n")  # fmt: skip
    nominal = nominal_return(os.path.join(out, "nominal"), 64)
    threshold = round(nominal / 2, 1)
    print(f"nominal return (64 episodes, 1000 steps): {nominal:.1f}; failure: a return below {threshold}\n")
    runs = {
        "one axis": (["--search", "body_mass_scale=0.5:3.0"], budget1, [("body_mass_scale", 0.5, 3.0)], 16),
        "two axes": (["--search", "body_mass_scale=0.5:3.0", "--search", "push=0:10", "--resolution", "0.3125",
                      "--resolution", "1.25", "--evidence", "2"], budget2,
                     [("body_mass_scale", 0.5, 3.0), ("push", 0.0, 10.0)], 8),
    }  # fmt: skip
    table = ["| map | method | episodes | wall s |", "|---|---|---|---|"]
    for name, (flags, budget, axes, cells) in runs.items():
        where = os.path.join(out, name.replace(" ", "-"))
        shown, seconds = launch(*COMMON, *flags, "--fail-below", str(threshold), "--max-episodes", budget,
                                "--out", where)  # fmt: skip
        final = lines(where)[-1]
        spent = sum(len(r["episode_returns"]) for r in lines(where) if r.get("status") == "ok")
        print(f"### {name}: the search\n\n```text\n{shown[shown.index('failure map'):].strip()}\n```\n")
        suite = os.path.join(out, f"grid-{name.replace(' ', '-')}.yaml")
        boxes = grid_suite(suite, axes, cells, per_cell)
        grid_out = os.path.join(out, f"grid-{name.replace(' ', '-')}")
        _, grid_seconds = launch("--checkpoint", FINAL, "--suite", suite, "--out", grid_out)
        rates = grid_rates(grid_out, threshold)
        print(f"### {name}: the brute-force grid ({len(boxes)} cells x {per_cell} episodes)\n")
        print(agreement(final, boxes, rates, 0.5) + "\n")
        table.append(f"| {name} | search (stopped: {final.get('stop')}) | {spent} | {seconds:.0f} |")
        table.append(f"| {name} | brute-force grid | {sum(n for _, n in rates.values())} | {grid_seconds:.0f} |")
    print("### Episodes spent\n\n" + "\n".join(table))


if __name__ == "__main__":
    main()
