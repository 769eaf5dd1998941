"""Monte Carlo validity of simeval's sequential statistics: the error over every look, power and episodes used.

    python benchmarks/stats_validity.py [--reps 500] [--seed 7]

Each row draws ``reps`` replications of paired (or single) episodes from a known
distribution, feeds them to the sequence a look at a time, and counts a replication as an
error when any look's interval misses the true value (for the McNemar rows: when any look
gives a verdict under the null). Prints a Markdown table (docs/statistics.md holds it with
its date). The fixed-n methods' study is still to come (issue 33).
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable

import numpy as np

from simeval.stats import SequentialMcNemar, SequentialMean, SequentialPaired


def falls(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """A robot that falls: B - A is +450 with probability 0.1, else -50 (mean 0); returns in [400, 950]."""
    a = rng.uniform(400, 500, n)
    return a, a + np.where(rng.random(n) < 0.1, 450.0, -50.0)


PAIRED: dict[str, tuple[Callable, float, dict]] = {
    "binary success, no effect | bounds (0, 1)": (
        lambda r, n: (r.binomial(1, 0.5, n), r.binomial(1, 0.5, n)),
        0.0,
        {"bounds": (0, 1)},
    ),
    "binary success, 0.3 vs 0.6 | bounds (0, 1)": (
        lambda r, n: (r.binomial(1, 0.3, n), r.binomial(1, 0.6, n)),
        0.3,
        {"bounds": (0, 1)},
    ),
    "uniform returns, difference 5 | bounds (0, 100)": (
        lambda r, n: (r.uniform(0, 100, n), r.uniform(10, 100, n)),
        5.0,
        {"bounds": (0, 100)},
    ),
    "normal differences | no bounds": (lambda r, n: (np.zeros(n), r.normal(1, 2, n)), 1.0, {}),
    "t(3) differences | no bounds": (lambda r, n: (np.zeros(n), r.standard_t(3, n)), 0.0, {}),
    "falls-type, mean 0 | no bounds": (falls, 0.0, {}),
    "falls-type, mean 0 | bounds (0, 1000)": (falls, 0.0, {"bounds": (0, 1000)}),
}
SINGLE: dict[str, tuple[Callable, float, dict]] = {
    "success rate 0.2 | bounds (0, 1)": (lambda r, n: r.binomial(1, 0.2, n), 0.2, {"bounds": (0, 1)}),
    "normal returns | no bounds": (lambda r, n: r.normal(300, 40, n), 300.0, {}),
    "lognormal(0, 1) returns | no bounds": (lambda r, n: r.lognormal(0, 1, n), math.exp(0.5), {}),
}


def paired_row(gen: Callable, true: float, kwargs: dict, reps: int, seed: int) -> tuple[float, float]:
    """(error over all looks, median final width): 120 pairs, a look every 4."""
    rng, misses, widths = np.random.default_rng(seed), 0, []
    for _ in range(reps):
        a, b = gen(rng, 120)
        seq, missed = SequentialPaired(**kwargs), False
        for i in range(0, 120, 4):
            seq.update(a[i : i + 4], b[i : i + 4])
            missed |= not (seq.low <= true <= seq.high)
        misses += missed
        widths.append(seq.high - seq.low)
    return misses / reps, float(np.median(widths))


def single_row(gen: Callable, true: float, kwargs: dict, reps: int, seed: int) -> tuple[float, float]:
    """(error over all looks, median final width): 160 episodes, a look every 8."""
    rng, misses, widths = np.random.default_rng(seed), 0, []
    for _ in range(reps):
        x = gen(rng, 160)
        seq, missed = SequentialMean(**kwargs), False
        for i in range(0, 160, 8):
            seq.update(x[i : i + 8])
            missed |= not (seq.low <= true <= seq.high)
        misses += missed
        widths.append(seq.high - seq.low)
    return misses / reps, float(np.median(widths))


def mcnemar_rows(reps: int, seed: int) -> tuple[float, float, float, float, float]:
    """(false verdicts under equal success, power at 0.5 vs 0.8, median episodes to it, the same two for
    SequentialPaired with bounds (0, 1)): 200 pairs, a look every 10."""
    rng = np.random.default_rng(seed)
    false = power_m = power_p = 0
    used_m, used_p = [], []
    for _ in range(reps):
        a = rng.binomial(1, 0.5, 200)
        b_null = np.where(rng.random(200) < 0.7, a, rng.binomial(1, 0.5, 200))
        b_better = rng.binomial(1, 0.8, 200)
        null, mc, pd = SequentialMcNemar(), SequentialMcNemar(), SequentialPaired(bounds=(0, 1))
        flagged, at_m, at_p = False, 200, 200
        for i in range(0, 200, 10):
            null.update(a[i : i + 10], b_null[i : i + 10])
            mc.update(a[i : i + 10], b_better[i : i + 10])
            pd.update(a[i : i + 10], b_better[i : i + 10])
            flagged |= null.verdict != "inconclusive"
            at_m = min(at_m, i + 10) if mc.verdict == "better" else at_m
            at_p = min(at_p, i + 10) if pd.verdict == "better" else at_p
        false += flagged
        power_m += mc.verdict == "better"
        power_p += pd.verdict == "better"
        used_m.append(at_m)
        used_p.append(at_p)
    return false / reps, power_m / reps, float(np.median(used_m)), power_p / reps, float(np.median(used_p))


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=500, help="replications per row")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    start = time.perf_counter()
    print(f"nominal error 0.05; {args.reps} replications per row, seed {args.seed}\n")
    print("| sequence | data | declared | error over all looks | median final width |")
    print("|---|---|---|---|---|")
    for name, (gen, true, kwargs) in PAIRED.items():
        data, declared = name.split(" | ")
        error, width = paired_row(gen, true, kwargs, args.reps, args.seed)
        print(f"| SequentialPaired (120 pairs, a look every 4) | {data} | {declared} | {error:.3f} | {width:.3g} |")
    for name, (gen, true, kwargs) in SINGLE.items():
        data, declared = name.split(" | ")
        error, width = single_row(gen, true, kwargs, args.reps, args.seed)
        print(f"| SequentialMean (160 episodes, a look every 8) | {data} | {declared} | {error:.3f} | {width:.3g} |")
    false, power_m, used_m, power_p, used_p = mcnemar_rows(args.reps, args.seed)
    print(
        "\nSequentialMcNemar (200 pairs, a look every 10): false verdicts with equal success (0.5, B equal to A "
        f"in 70% of episodes) {false:.3f}; 0.5 against 0.8 decided in {power_m:.3f}, median {used_m:.0f} episodes "
        f"(SequentialPaired, bounds (0, 1): {power_p:.3f}, median {used_p:.0f})."
    )
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
