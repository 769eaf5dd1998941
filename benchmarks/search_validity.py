"""The validity study of the failure-region search (issue 47): the crossing covered, no region misclassed, and the
episodes it spends against the uniform grid.

    python benchmarks/search_validity.py [--reps 200] [--seed 47] [--quick]

Every row is a synthetic response of known failure probability ``p(x)`` over one or two condition
axes: episodes fail ~ Bernoulli(p(x)) at their drawn values, or (``returns``) an episode's return
is ``mu(x)`` plus heavy-tailed noise (t with 2 degrees of freedom) and it fails when the return is
below ``R``, so that ``p(x) = F_t2((R - mu(x)) / scale)``. Each replication drives
:class:`simeval.stats.failure_map.FailureMap` exactly as the launcher does (four rounds in flight at
a time, each round's values uniform within its region, then :meth:`observe`), until it is
finished, and :class:`simeval.stats.failure_map.UniformGrid` (the same sequences on the grid of
the finest cells) the same way. Counted per replication:

* a wrong class: any region the search ever decided (refined ones too) classed ``pass`` while its
  true mean failure probability (the integral of ``p`` over the region, numerically: scipy's
  ``quad`` on one axis, a 64 x 64 midpoint rule per finest cell on two) is >= P, or ``fail``
  while it is < P. The rate over replications is the family-wise error; the target is <= alpha.
* one axis, monotone responses: whether :meth:`FailureMap.boundary` holds the true crossing
  ``x*`` (``p(x*) = P``); target >= 0.90 of the replications where it gives an interval.
* the episodes to finish, against the grid's at the same resolution, confidence and cap
  (target <= 50%), and whether the resolution was reached at the boundary: every leaf that is
  ``uncertain`` or shares a face with a leaf of another class is a finest cell.

Prints Markdown tables, the command line, the date and the machine; docs/search.md holds a run.
Each row has its own generators (``default_rng([seed, row, kind])``). tests/test_failure_map.py
runs a seeded slice of :func:`search_row`.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy
from scipy import integrate
from scipy import stats as sst

from simeval.stats.failure_map import FailureMap, SearchAxis, UniformGrid

P = 0.5  # the failure rate that defines the failure region
CONFIDENCE = 0.95
ALPHA = 1 - CONFIDENCE
ROUND = 8
CAP = 128
PARALLEL = 4  # rounds in flight at a time
MASS = SearchAxis("body_mass_scale", 0.5, 3.0, 0.05)  # 64 finest cells of 0.039
FRICTION = SearchAxis("friction_scale", 0.2, 2.0, 0.05)  # 64 finest cells of 0.028
MASS_2D = SearchAxis("body_mass_scale", 0.5, 3.0, 0.1)  # 32 x 32 finest cells on two axes
FRICTION_2D = SearchAxis("friction_scale", 0.2, 2.0, 0.1)


def rng_for(seed: int, *parts: object) -> np.random.Generator:
    """A generator of its own for one row: the seed and the row's names, hashed stably."""
    return np.random.default_rng([seed, *(zlib.crc32(str(p).encode()) for p in parts)])


def se(p: float, reps: int) -> float:
    """The Monte Carlo standard error of a rate ``p`` from ``reps`` replications."""
    return math.sqrt(max(p * (1 - p), 0.25 / reps) / max(reps, 1))


# ---------------------------------------------------------------------------------------------- responses


def logistic(z: np.ndarray) -> np.ndarray:
    """The logistic function."""
    return 0.5 * (1.0 + np.tanh(0.5 * z))


@dataclass(frozen=True)
class Response:
    """A synthetic response: the failure probability ``prob(x)`` at points ``x`` (shape ``[n, axes]``), and how one
    episode's failure is drawn at ``x`` (``Bernoulli``, or a ``returns`` model thresholded).

    ``crossing``: the true ``x*`` of a monotone response on one axis (``p(x*) = P``); ``breaks``: where ``p`` jumps
    (for the integration); ``mu``, ``scale``, ``threshold``: the returns model (``prob`` is then its CDF).
    """

    name: str
    axes: tuple[SearchAxis, ...]
    prob: Callable[[np.ndarray], np.ndarray]
    crossing: float | None = None
    breaks: tuple[float, ...] = ()
    mu: Callable[[np.ndarray], np.ndarray] | None = None
    scale: float = 0.0
    threshold: float = 0.0
    pocket: tuple[float, float] | None = None
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def data(self) -> str:
        """How an episode's failure is drawn, in words."""
        if self.mu is None:
            return "Bernoulli"
        return f"returns + {self.scale:g}·t(2) < {self.threshold:g}"

    def draw(self, rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
        """Whether each episode at ``x`` fails."""
        if self.mu is None:
            return rng.random(len(x)) < self.prob(x)
        returns = self.mu(x) + self.scale * rng.standard_t(2, len(x))
        return returns < self.threshold

    def truth(self, bounds: dict[str, tuple[float, float]]) -> float:
        """The region's mean failure probability under uniform draws in it (numerical integration, cached)."""
        box = tuple(bounds[a.name] for a in self.axes)
        if box not in self._cache:
            self._cache[box] = self._integrate(box)
        return self._cache[box]

    def _integrate(self, box: tuple[tuple[float, float], ...]) -> float:
        if len(box) == 1:
            (lo, hi), inside = box[0], [b for b in self.breaks if box[0][0] < b < box[0][1]]
            value, _ = integrate.quad(
                lambda v: float(self.prob(np.array([[v]]))[0]), lo, hi, points=inside or None, limit=200
            )
            return value / (hi - lo)
        if "integral image" not in self._cache:
            self._cache["integral image"] = self._integral_image()
        s, npix = self._cache["integral image"]
        corners = []
        for axis, (lo, hi) in zip(self.axes, box, strict=True):
            span = axis.high - axis.low
            corners.append((round((lo - axis.low) / span * npix), round((hi - axis.low) / span * npix)))
        (i0, i1), (j0, j1) = corners
        total = s[i1, j1] - s[i0, j1] - s[i1, j0] + s[i0, j0]
        return float(total / ((i1 - i0) * (j1 - j0)))

    def _integral_image(self) -> tuple[np.ndarray, int]:
        """Cumulative sums of ``p`` at the midpoints of a grid of 64 x 64 points per finest cell."""
        npix = 64 * max(4 << a.depth(4) for a in self.axes)
        mids = [a.low + (np.arange(npix) + 0.5) * (a.high - a.low) / npix for a in self.axes]
        s = np.zeros((npix + 1, npix + 1))
        for start in range(0, npix, 256):
            xs, ys = np.meshgrid(mids[0][start : start + 256], mids[1], indexing="ij")
            s[start + 1 : start + 1 + len(xs), 1:] = self.prob(np.column_stack([xs.ravel(), ys.ravel()])).reshape(
                xs.shape
            )
        return s.cumsum(0).cumsum(1), npix


def ramp(centre: float, width: float) -> Callable[[np.ndarray], np.ndarray]:
    """A logistic ramp from 0.05 to 0.95 crossing 0.5 at ``centre``."""
    return lambda x: 0.05 + 0.9 * logistic((x[:, 0] - centre) / width)


def _t2_cdf(z: np.ndarray) -> np.ndarray:
    return sst.t.cdf(z, 2)


def returns_response(name: str, axes: tuple[SearchAxis, ...], mu: Callable, scale: float, threshold: float, **kw):
    """A response whose episodes fail when ``mu(x) + scale * t(2) < threshold``."""
    return Response(
        name, axes, lambda x: _t2_cdf((threshold - mu(x)) / scale), mu=mu, scale=scale, threshold=threshold, **kw
    )


STEP = Response("step at 1.73 (0.1 -> 0.8)", (MASS,), lambda x: np.where(x[:, 0] >= 1.73, 0.8, 0.1), 1.73, (1.73,))
STEEP = Response("logistic ramp, steep (width 0.03)", (MASS,), ramp(1.73, 0.03), 1.73)
GENTLE = Response("logistic ramp, gentle (width 0.25)", (MASS,), ramp(1.73, 0.25), 1.73)
# Return falls as friction falls; failure decreases along the axis; x* where mu = R: 0.2 + 1.8 * 0.55 = 1.19.
FRICTION_RETURNS = returns_response(
    "returns vs friction (failure decreasing)",
    (FRICTION,),
    lambda x: 400.0 * (x[:, 0] - 0.2) / 1.8,
    scale=40.0,
    threshold=220.0,
    crossing=0.2 + 1.8 * 220.0 / 400.0,
)
MASS_RETURNS = returns_response(
    "returns vs mass (failure increasing)",
    (MASS,),
    lambda x: 300.0 - 150.0 * (x[:, 0] - 0.5),
    scale=15.0,
    threshold=100.0,
    crossing=0.5 + 200.0 / 150.0,
)
ONE_AXIS = (STEP, STEEP, GENTLE, MASS_RETURNS, FRICTION_RETURNS)

U_SHAPED = Response(
    "U-shaped: fail below 0.9 and above 2.6",
    (MASS,),
    lambda x: np.where((x[:, 0] < 0.9) | (x[:, 0] >= 2.6), 0.8, 0.1),
    breaks=(0.9, 2.6),
)
POCKET = Response(
    "narrow pocket: 0.9 on [1.6, 1.7], else 0.05",
    (MASS,),
    lambda x: np.where((x[:, 0] >= 1.6) & (x[:, 0] < 1.7), 0.9, 0.05),
    breaks=(1.6, 1.7),
    pocket=(1.6, 1.7),
)


def _unit(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mass and friction on [0, 1], friction reversed (low friction is the hard end)."""
    return (x[:, 0] - 0.5) / 2.5, (2.0 - x[:, 1]) / 1.8


def _half_plane(x: np.ndarray) -> np.ndarray:
    a, b = _unit(x)
    return 0.05 + 0.9 * logistic((a + b - 1.1) / 0.02)


def _disc(x: np.ndarray) -> np.ndarray:
    a, b = _unit(x)
    return np.where((a - 0.5) ** 2 + (b - 0.45) ** 2 < 0.3**2, 0.8, 0.05)


def _mu_plane(x: np.ndarray) -> np.ndarray:
    a, b = _unit(x)
    return 200.0 + 400.0 * (1.1 - a - b)


TWO_AXES = (
    Response("half-plane: heavy mass + low friction (a + b > 1.1)", (MASS_2D, FRICTION_2D), _half_plane),
    Response("disc: 0.8 inside radius 0.3, else 0.05", (MASS_2D, FRICTION_2D), _disc),
    returns_response("half-plane, returns", (MASS_2D, FRICTION_2D), _mu_plane, scale=40.0, threshold=200.0),
)


# ---------------------------------------------------------------------------------------------- runs


def drive(m: FailureMap | UniformGrid, response: Response, rng: np.random.Generator) -> None:
    """Run ``m`` to its end as the launcher would: ``PARALLEL`` rounds at a time, values uniform in each region."""
    names = [a.name for a in m.axes]
    while m.finished is None:
        keys = m.next_regions(PARALLEL)
        for key in keys:
            bounds = m.bounds(key)
            lows, highs = zip(*(bounds[n] for n in names), strict=True)
            x = rng.uniform(lows, highs, size=(m.round_episodes, len(names)))
            failed = response.draw(rng, x)
            m.observe(key, [dict(zip(names, row, strict=True)) for row in x.tolist()], failed.tolist())


def wrong_class(m: FailureMap | UniformGrid, response: Response) -> bool:
    """Whether any region ``m`` ever decided (refined ones too) has the wrong class for its true mean."""
    for r in m.regions(include_split=True):
        truth = response.truth(r.bounds)
        if (r.klass == "pass" and truth >= P) or (r.klass == "fail" and truth < P):
            return True
    return False


def _touch(a: dict, b: dict, names: Sequence[str]) -> bool:
    """Whether two boxes share a face (touch along one axis, overlap with positive length along the other)."""
    touching = overlapping = 0
    for n in names:
        (alo, ahi), (blo, bhi) = a[n], b[n]
        if math.isclose(ahi, blo) or math.isclose(bhi, alo):
            touching += 1
        elif min(ahi, bhi) - max(alo, blo) > 1e-12:
            overlapping += 1
    return touching == 1 and overlapping == len(names) - 1


def at_resolution(m: FailureMap) -> bool:
    """Whether every leaf at the boundary (``uncertain``, or sharing a face with a leaf of another class) is a
    finest cell."""
    leaves, names, finest = m.regions(), [a.name for a in m.axes], m.depth
    for r in leaves:
        if r.key[0] == finest:
            continue
        if r.klass == "uncertain" or any(
            o.klass != r.klass and _touch(r.bounds, o.bounds, names) for o in leaves if o is not r
        ):
            return False
    return True


@dataclass
class Row:
    """One row's counts over its replications."""

    response: Response
    cap: int
    reps: int = 0
    grid_reps: int = 0
    episodes: list[int] = field(default_factory=list)
    grid_episodes: list[int] = field(default_factory=list)
    wrong: int = 0
    grid_wrong: int = 0
    found: int = 0
    covered: int = 0
    widths: list[float] = field(default_factory=list)
    refused: dict[str, int] = field(default_factory=dict)
    resolution: int = 0
    leaves: list[int] = field(default_factory=list)
    pocket_found: int = 0
    grid_pocket_found: int = 0
    seconds: float = 0.0

    @property
    def ratio(self) -> float:
        """The search's mean episodes over the grid's."""
        return float(np.mean(self.episodes) / np.mean(self.grid_episodes))


def _pocket_found(m: FailureMap | UniformGrid, pocket: tuple[float, float], name: str) -> bool:
    lo, hi = pocket
    return any(r.klass == "fail" and r.bounds[name][0] < hi and r.bounds[name][1] > lo for r in m.regions())


def search_row(response: Response, reps: int, seed: int, grid_reps: int, cap: int = CAP) -> Row:
    """``reps`` searches and ``grid_reps`` grids on ``response``, counted (the module says what)."""
    row, start = Row(response, cap, reps, grid_reps), time.perf_counter()
    rng = rng_for(seed, response.name, cap, "search")
    one_axis = len(response.axes) == 1
    name = response.axes[0].name
    for _ in range(reps):
        m = FailureMap(response.axes, P, CONFIDENCE, ROUND, max_region_episodes=cap)
        drive(m, response, rng)
        row.episodes.append(m.episodes)
        row.wrong += wrong_class(m, response)
        row.resolution += at_resolution(m)
        row.leaves.append(len(m.regions()))
        if one_axis:
            b = m.boundary()
            if b.found:
                row.found += 1
                row.widths.append(b.high - b.low)
                row.covered += response.crossing is not None and b.low <= response.crossing <= b.high
            else:
                row.refused[b.reason] = row.refused.get(b.reason, 0) + 1
        if response.pocket is not None:
            row.pocket_found += _pocket_found(m, response.pocket, name)
    rng = rng_for(seed, response.name, cap, "grid")
    for _ in range(grid_reps):
        g = UniformGrid(response.axes, P, CONFIDENCE, ROUND, max_region_episodes=cap)
        drive(g, response, rng)
        row.grid_episodes.append(g.episodes)
        row.grid_wrong += wrong_class(g, response)
        if response.pocket is not None:
            row.grid_pocket_found += _pocket_found(g, response.pocket, name)
    row.seconds = time.perf_counter() - start
    return row


# ---------------------------------------------------------------------------------------------- output


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def rate(k: int, n: int, bad: bool = False) -> str:
    """``k / n`` as a rate with its Monte Carlo error; bold when ``bad`` (a target missed)."""
    if not n:
        return "-"
    p = k / n
    text = f"{p:.3f} ± {se(p, n):.3f} ({k}/{n})"
    return f"**{text}**" if bad else text


def mean_se(x: Sequence[float]) -> str:
    """A mean with its standard error."""
    a = np.asarray(x, dtype=float)
    return f"{a.mean():.0f} ± {a.std(ddof=1) / math.sqrt(len(a)) if len(a) > 1 else 0:.0f}"


def ratio_text(row: Row) -> str:
    """The search's episodes as a share of the grid's; bold above the 50% target."""
    text = f"{row.ratio:.0%}"
    return f"**{text}**" if row.ratio > 0.5 else text


def one_axis_rows(rows: Sequence[Row]) -> list[list[str]]:
    """The one-axis table's rows."""
    out = []
    for r in rows:
        finest = (r.response.axes[0].high - r.response.axes[0].low) / (4 << r.response.axes[0].depth(4))
        coverage = r.covered / r.found if r.found else math.nan
        out.append(
            [
                r.response.name,
                r.response.data,
                rate(r.found, r.reps),
                rate(r.covered, r.found, bad=coverage < 0.9),
                f"{np.median(r.widths) / finest:.1f}" if r.widths else "-",
                rate(r.wrong, r.reps, bad=r.wrong / r.reps > ALPHA),
                mean_se(r.episodes),
                mean_se(r.grid_episodes),
                ratio_text(r),
                rate(r.resolution, r.reps, bad=r.resolution < r.reps),
                rate(r.grid_wrong, r.grid_reps, bad=r.grid_wrong / max(r.grid_reps, 1) > ALPHA),
            ]
        )
    return out


def two_axis_rows(rows: Sequence[Row]) -> list[list[str]]:
    """The two-axis table's rows."""
    return [
        [
            r.response.name,
            r.response.data,
            rate(r.wrong, r.reps, bad=r.wrong / r.reps > ALPHA),
            mean_se(r.episodes),
            mean_se(r.grid_episodes),
            ratio_text(r),
            f"{np.mean(r.leaves):.0f} (grid {math.prod(4 << a.depth(4) for a in r.response.axes)})",
            rate(r.resolution, r.reps, bad=r.resolution < r.reps),
            rate(r.grid_wrong, r.grid_reps, bad=r.grid_wrong / max(r.grid_reps, 1) > ALPHA),
        ]
        for r in rows
    ]


def split_table(m: FailureMap) -> str:
    """The alpha split of a map: every depth's possible cells and the error level of each."""
    rows = [
        [
            lv.depth,
            " x ".join(str(c) for c in lv.per_axis),
            " x ".join(f"{w:.4g}" for w in lv.widths),
            f"{lv.alpha:.4g}",
            f"{lv.alpha_each:.3g}",
        ]
        for lv in m.alpha_split()
    ]
    total = sum(lv.alpha for lv in m.alpha_split())
    rows.append(["all", sum(lv.cells for lv in m.alpha_split()), "", f"{total:.4g}", ""])
    return table(["depth", "cells", "width", "alpha of the depth", "alpha per cell"], rows)


def cpu() -> str:
    """The CPU model (simeval.machine's, when there is one)."""
    try:
        from simeval.machine import cpu_model

        return cpu_model()
    except ImportError:  # an older simeval
        return platform.processor() or platform.machine()


def header(args: argparse.Namespace) -> str:
    """The command line, the date and the machine."""
    command = "python benchmarks/search_validity.py " + " ".join(sys.argv[1:])
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"`{command.strip()}`, {now}; {os.cpu_count()} CPUs ({cpu()}), Python {platform.python_version()}, "
        f"numpy {np.__version__}, scipy {scipy.__version__}. P = {P}, confidence {CONFIDENCE}, rounds of "
        f"{ROUND} episodes, {PARALLEL} rounds in flight, cap {CAP} episodes a region (unless a row says), "
        f"initial grid 4 cells an axis."
    )


def main(argv: Sequence[str] | None = None) -> None:
    """Run the study and print its tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=200, help="replications of a one-axis search row")
    parser.add_argument("--seed", type=int, default=47)
    parser.add_argument("--quick", action="store_true", help="a smoke run (about a minute): few replications")
    args = parser.parse_args(argv)
    if args.quick:
        args.reps = min(args.reps, 20)
    reps = args.reps
    reps_2d, grid_1d, grid_2d = max(2, reps // 2), max(2, reps // 4), max(2, reps // 20)
    if args.quick:
        reps_2d = min(reps_2d, 5)
    start = time.perf_counter()

    def timed() -> None:
        print(f"\n_{time.perf_counter() - start:.0f} s since the start._", flush=True)

    print(header(args), flush=True)
    print(
        f"\nReplications: {reps} searches a one-axis row ({grid_1d} grids), {reps_2d} searches a two-axis row "
        f"({grid_2d} grids: its episodes vary little from run to run, and one grid run takes seconds).",
        flush=True,
    )

    print("\n### The alpha split\n")
    print(f"One axis ({MASS.name} {MASS.low}..{MASS.high}, resolution {MASS.resolution}):\n")
    print(split_table(FailureMap((MASS,), P, CONFIDENCE)))
    print(f"\nTwo axes ({MASS_2D.name} and {FRICTION_2D.name}, resolution 0.1 each):\n")
    print(split_table(FailureMap((MASS_2D, FRICTION_2D), P, CONFIDENCE)))
    print(
        f"\nThe uniform grid at the same resolution splits alpha over its {4 << MASS.depth(4)} "
        f"(one axis) or {(4 << MASS_2D.depth(4)) * (4 << FRICTION_2D.depth(4))} (two axes) cells: "
        f"{ALPHA / (4 << MASS.depth(4)):.3g} and {ALPHA / ((4 << MASS_2D.depth(4)) * (4 << FRICTION_2D.depth(4))):.3g}"
        " a cell."
    )

    print("\n### One axis: the crossing, the classes, the episodes\n")
    print(
        "Boundary: the share of runs with an interval; coverage of the true x* among them (target >= 0.90); its "
        "median width in finest cells.\nWrong class: runs with any region ever classed wrongly (target <= "
        f"{ALPHA:.2f}). Episodes: mean ± s.e. per run; search/grid: target <= 50%.\nAt resolution: runs whose "
        "boundary leaves are all finest cells.\n"
    )
    rows = [search_row(r, reps, args.seed, grid_1d) for r in ONE_AXIS]
    head = [
        "response",
        "episodes",
        "boundary given",
        "covers x*",
        "width (cells)",
        "wrong class (FWER)",
        "search episodes",
        "grid episodes",
        "search / grid",
        "at resolution",
        "grid: wrong class",
    ]
    print(table(head, one_axis_rows(rows)))
    for r in rows:
        if r.refused:
            reasons = ", ".join(f"{k} ({v})" for k, v in sorted(r.refused.items()))
            print(f"\n{r.response.name}: no boundary in {sum(r.refused.values())} runs: {reasons}.")
    timed()

    print("\n### Two axes\n")
    rows2 = [search_row(r, reps_2d, args.seed, grid_2d) for r in TWO_AXES]
    head = [
        "response",
        "episodes",
        "wrong class (FWER)",
        "search episodes",
        "grid episodes",
        "search / grid",
        "leaves",
        "at resolution",
        "grid: wrong class",
    ]
    print(table(head, two_axis_rows(rows2)))
    timed()

    print("\n### The cap: the gentle ramp's undecided band costs the cap in both\n")
    print(
        "Cells whose failure probability is near P cannot be decided within the cap; both the search and the grid "
        "sample them at the finest resolution\nuntil the cap or until futile, so the band's share of the episodes, "
        "and with it the ratio, grows with the cap.\n"
    )
    caps = (64, 128, 256) if not args.quick else (64, 256)
    cap_rows = [search_row(GENTLE, reps, args.seed, grid_1d, cap=c) if c != CAP else rows[2] for c in caps]
    print(
        table(
            ["cap", "search episodes", "grid episodes", "search / grid", "covers x*", "width (cells)"],
            [
                [
                    r.cap,
                    mean_se(r.episodes),
                    mean_se(r.grid_episodes),
                    ratio_text(r),
                    rate(r.covered, r.found),
                    f"{np.median(r.widths) / (2.5 / 64):.1f}" if r.widths else "-",
                ]
                for r in cap_rows
            ],
        )
    )
    timed()

    print("\n### Limits: a response that is not monotone, a pocket narrower than the coarse cells\n")
    limit_rows = [search_row(r, reps, args.seed, grid_1d) for r in (U_SHAPED, POCKET)]
    u, pocket = limit_rows
    refused = ", ".join(f"{k}: {v}" for k, v in sorted(u.refused.items())) or "none"
    print(
        table(
            [
                "response",
                "wrong class (FWER)",
                "boundary refused",
                "pocket classed fail: search",
                "grid",
                "search / grid",
            ],
            [
                [
                    u.response.name,
                    rate(u.wrong, u.reps),
                    f"{sum(u.refused.values())}/{u.reps} ({refused})",
                    "-",
                    "-",
                    ratio_text(u),
                ],
                [
                    pocket.response.name,
                    rate(pocket.wrong, pocket.reps),
                    "-",
                    rate(pocket.pocket_found, pocket.reps),
                    rate(pocket.grid_pocket_found, pocket.grid_reps),
                    ratio_text(pocket),
                ],
            ],
        )
    )
    timed()


if __name__ == "__main__":
    main()
