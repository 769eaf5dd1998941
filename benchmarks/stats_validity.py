"""The validity study of simeval's statistics (issue 33): coverage, family-wise error, power and episodes to verdict.

    python benchmarks/stats_validity.py [--reps 1000] [--seed 33] [--quick] [--only SECTION ...]

Every row draws replications of paired episodes from a known distribution of the paired
difference B - A (normal, t(3), lognormal, falls-type, binary), feeds them to the method
under test exactly as a report would, and counts how often its interval misses the true
mean difference (or, for a test, how often it gives a verdict where there is none). Rows
for simeval's fixed-n methods (:func:`simeval.stats.paired`, :func:`simeval.stats.mcnemar`,
Bonferroni families with :func:`simeval.stats.family_confidence` and the aggregate row of
:func:`simeval.stats.mean_of_intervals`) and sequential ones (:class:`simeval.sequential.LookPlan`'s
sequences under continuous monitoring), beside reference rows: scipy's t-interval,
percentile bootstrap and Wilcoxon test, rliable's stratified bootstrap, confseq's betting
confidence sequence (the paper authors' code), STEP (Snyder et al., RSS 2025: the
``sequentialized-barnard-tests`` package), and simeval <= 0.4's own method (percentile
bootstrap + sign-flip permutation test with Holm) for contrast.

Prints Markdown tables, the command line, the date and the machine; docs/statistics.md
holds a full run. Each row has its own generator (``default_rng([seed, row...])``), so a
row's numbers do not depend on which other rows ran. ``--quick`` is a smoke run (few
replications, few sizes); tests/test_validity.py runs seeded slices of the same functions.
The reference packages are optional: a row whose package is missing says so and why.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import math
import os
import platform
import subprocess
import sys
import time
import warnings
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy
from scipy import stats as sst

from simeval.sequential import LookPlan, SequentialMcNemar, SequentialPaired
from simeval.stats import family_confidence, mcnemar, mean_of_intervals, paired, verdict_of

ALPHA = 0.05
CONFIDENCE = 1 - ALPHA
OLD = "simeval <= 0.4 (bootstrap + permutation)"


def rng_for(seed: int, *parts: object) -> np.random.Generator:
    """A generator of its own for one row: the seed and the row's names, hashed stably."""
    return np.random.default_rng([seed, *(zlib.crc32(str(p).encode()) for p in parts)])


def se(p: float, reps: int) -> float:
    """The Monte Carlo standard error of a rate ``p`` from ``reps`` replications."""
    return math.sqrt(max(p * (1 - p), 0.25 / reps) / reps)


# ---------------------------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Scenario:
    """A distribution of the paired difference d = B - A: ``draw(rng, shape) + shift`` has mean ``mean + shift``.

    ``bounds`` are the declared bounds on one episode's return when the scenario has them (the
    difference then lies within ``+-(high - low)``); ``None`` for unbounded data.
    """

    name: str
    draw: Callable[[np.random.Generator, tuple], np.ndarray]
    mean: float
    sd: float
    bounds: tuple[float, float] | None = None


def _truncated(draw: Callable, lo: float, hi: float) -> Callable:
    """``draw`` conditioned on ``lo <= x <= hi`` (rejection)."""

    def sample(rng: np.random.Generator, shape: tuple) -> np.ndarray:
        x = draw(rng, shape)
        bad = (x < lo) | (x > hi)
        while bad.any():
            x[bad] = draw(rng, (int(bad.sum()),))
            bad = (x < lo) | (x > hi)
        return x

    return sample


def _t3_truncated_moments(c: float) -> tuple[float, float]:
    var = sst.t.expect(lambda x: x**2, args=(3,), lb=-c, ub=c, conditional=True)
    return 0.0, math.sqrt(var)


def _lognormal_truncated_moments(c: float) -> tuple[float, float]:
    z = math.log(c)
    p = sst.norm.cdf(z)
    m1 = math.exp(0.5) * sst.norm.cdf(z - 1) / p
    m2 = math.exp(2.0) * sst.norm.cdf(z - 2) / p
    return m1 - math.exp(0.5), math.sqrt(m2 - m1**2)


LN_MEAN = math.exp(0.5)
LN_CUT = 9.0  # the bounded lognormal: L <= 9 (P(L > 9) = 0.014)
_T3_CUT = 8.0


def _falls(rng: np.random.Generator, shape: tuple) -> np.ndarray:
    return np.where(rng.random(shape) < 0.1, 450.0, -50.0)


NORMAL = Scenario("normal", lambda r, s: r.normal(0.0, 1.0, s), 0.0, 1.0)
T3 = Scenario("t(3)", lambda r, s: r.standard_t(3, s), 0.0, math.sqrt(3.0))
LOGNORMAL = Scenario(
    "lognormal(0, 1) - e^0.5", lambda r, s: r.lognormal(0.0, 1.0, s) - LN_MEAN, 0.0, math.sqrt((math.e - 1) * math.e)
)
FALLS = Scenario("falls-type (+450 w.p. 0.1, else -50)", _falls, 0.0, 150.0, (0.0, 1000.0))
BOUNDED = {
    "normal": Scenario("normal, cut at +-4", _truncated(NORMAL.draw, -4, 4), 0.0, 0.9993, (0.0, 10.0)),
    "t(3)": Scenario(
        "t(3), cut at +-8", _truncated(T3.draw, -_T3_CUT, _T3_CUT), *_t3_truncated_moments(_T3_CUT), (0, 10)
    ),
    "lognormal": Scenario(
        "lognormal(0, 1) - e^0.5, L <= 9",
        _truncated(LOGNORMAL.draw, -LN_MEAN, LN_CUT - LN_MEAN),
        *_lognormal_truncated_moments(LN_CUT),
        (0.0, 10.0),
    ),
    "falls": FALLS,
}
UNBOUNDED = {"normal": NORMAL, "t(3)": T3, "lognormal": LOGNORMAL, "falls": FALLS}


def returns(
    d: np.ndarray, bounds: tuple[float, float] | None, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Returns ``(a, b)`` with ``b - a == d``, both within ``bounds`` (any ``a`` when there are none)."""
    if bounds is None:
        a = rng.normal(100.0, 30.0, d.shape)
        return a, a + d
    lo, hi = bounds
    a = lo + np.maximum(0.0, -d) + rng.random(d.shape) * (hi - lo - np.abs(d))
    b = np.clip(a + d, lo, hi)  # clip only undoes rounding at the ends: |d| <= hi - lo
    return a, b


@dataclass(frozen=True)
class Binary:
    """Success of A and B on paired episodes: the probabilities of (A only, B only) and of both."""

    name: str
    a_only: float
    b_only: float
    both: float

    @property
    def diff(self) -> float:
        """The true mean difference of success, P(B) - P(A)."""
        return self.b_only - self.a_only

    @property
    def share(self) -> float:
        """The true share of discordant episodes B won (McNemar's estimand)."""
        return self.b_only / (self.a_only + self.b_only)

    def draw(self, rng: np.random.Generator, shape: tuple) -> tuple[np.ndarray, np.ndarray]:
        """``(a, b)``, 0/1 per episode."""
        u = rng.random(shape)
        a_only = u < self.a_only
        b_only = (u >= self.a_only) & (u < self.a_only + self.b_only)
        both = (u >= self.a_only + self.b_only) & (u < self.a_only + self.b_only + self.both)
        return (a_only | both).astype(np.float64), (b_only | both).astype(np.float64)


def independent(pa: float, pb: float) -> Binary:
    """Two independent arms (STEP's setting)."""
    return Binary(f"independent arms, {pa:g} vs {pb:g}", pa * (1 - pb), (1 - pa) * pb, pa * pb)


PAIRED_NULL = Binary("paired, 0.5 each, same outcome in 70% of episodes", 0.15, 0.15, 0.35)


# ------------------------------------------------------------------ simeval <= 0.4, for contrast


def old_paired(
    a: np.ndarray, b: np.ndarray, seed: int = 0, n_resamples: int = 2000, with_p: bool = True
) -> tuple[float, float, float]:
    """simeval <= 0.4's ``paired`` (git 476ace2): the paired percentile-bootstrap interval of mean(b - a) and the
    two-sided sign-flip permutation p-value (scipy's permutation_test, exact when 2**n <= n_resamples)."""
    d = b - a
    n = d.size
    idx = np.random.default_rng(seed).integers(0, n, size=(n_resamples, n))
    boot = d[idx].mean(axis=1)
    mean = float(d.mean())
    if np.all(boot == boot[0]):
        low = high = mean
    else:
        low, high = (float(v) for v in np.quantile(boot, [ALPHA / 2, 1 - ALPHA / 2]))
    if not with_p or n < 2 or np.all(d == 0):
        p = 1.0
    else:
        res = sst.permutation_test(
            (a, b),
            lambda x, y, axis=-1: np.mean(y - x, axis=axis),
            permutation_type="samples",
            vectorized=True,
            n_resamples=n_resamples,
            alternative="two-sided",
            rng=np.random.default_rng(seed),
        )
        p = float(min(1.0, res.pvalue))
    return low, high, p


def old_holm(p_values: Sequence[float]) -> np.ndarray:
    """simeval <= 0.4's ``holm``: Holm-adjusted p-values in the order given."""
    p = np.asarray(p_values, dtype=np.float64)
    m = p.size
    order = np.argsort(p, kind="stable")
    adjusted = np.empty(m)
    adjusted[order] = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * p[order]))
    return adjusted


def old_verdicts(means: Sequence[float], p_values: Sequence[float]) -> list[str]:
    """simeval <= 0.4's ``verdicts``: Holm over the family, the sign of the mean difference."""
    out = []
    for mean, p in zip(means, old_holm(p_values), strict=True):
        out.append("inconclusive" if p >= ALPHA else "better" if mean > 0 else "worse" if mean < 0 else "inconclusive")
    return out


# ------------------------------------------------------------------------------- reference methods


def scipy_t(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """scipy's paired t-interval (``ttest_rel(b, a).confidence_interval``)."""
    ci = sst.ttest_rel(b, a).confidence_interval(CONFIDENCE)
    return float(ci.low), float(ci.high)


def scipy_bootstrap(d: np.ndarray, seed: int) -> tuple[float, float]:
    """scipy's percentile bootstrap of the mean difference (2000 resamples)."""
    if np.all(d == d[0]):
        return float(d[0]), float(d[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ci = sst.bootstrap(
            (d,), np.mean, n_resamples=2000, method="percentile", confidence_level=CONFIDENCE, rng=seed
        ).confidence_interval
    return float(ci.low), float(ci.high)


def rliable_bootstrap(d: np.ndarray, seed: int) -> tuple[float, float]:
    """rliable's stratified percentile bootstrap (``get_interval_estimates``, one task, 2000 resamples) of the
    mean difference."""
    from rliable import library

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, ci = library.get_interval_estimates(
            {"d": d[:, np.newaxis]},
            lambda x: np.array([np.mean(x)]),
            method="percentile",
            reps=2000,
            confidence_interval_size=CONFIDENCE,
            random_state=np.random.RandomState(seed),
        )
    return float(ci["d"][0, 0]), float(ci["d"][1, 0])


def missing(module: str) -> str | None:
    """None when ``module`` imports, else why not (one line)."""
    try:
        if module == "confseq":
            _confseq()
        elif module == "step":
            _step_module()
        else:
            __import__(module)
    except Exception as exc:  # any failure to import is a row that cannot run
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return None


def _confseq():
    """confseq's betting module (0.0.11 still names np.float_, which NumPy 2 removed: aliased here)."""
    if not hasattr(np, "float_"):
        np.float_ = np.float64  # confseq/misc.py annotates with it at import
    from confseq import betting

    return betting


def _step_module():
    import sequentialized_barnard_tests as step

    return step


def step_test(n_max: int, alpha: float, seed: int):
    """STEP's one-sided test of P(A) < P(B) with its policy for ``n_max`` and ``alpha``: the package ships the
    policies for alpha 0.05 (n_max 200 and 500); others are synthesised once by its own script (seconds)."""
    step = _step_module()
    root = os.path.dirname(step.__file__)
    folder = os.path.join(root, "policies", f"n_max_{n_max}_alpha_{alpha}_shape_parameter_0.0_pnorm_False")
    if not os.path.exists(os.path.join(folder, "policy_compressed.pkl")):
        script = os.path.join(root, "scripts", "synthesize_general_step_policy.py")
        args = [sys.executable, script, "--n_max", str(n_max), "--alpha", str(alpha), "--n_points", "129"]
        args += ["--lambda_value", "2.1", "--major_axis_length", "1.4", "--log_p_norm", "0.0", "--use_p_norm", "False"]
        subprocess.run(args, cwd=os.path.dirname(script), capture_output=True, check=True)
    with contextlib.redirect_stdout(io.StringIO()):
        test = step.StepTest(step.Hypothesis.P0LessThanP1, n_max=n_max, alpha=alpha, random_seed=seed)
        test.load_existing_policy()  # the constructor's own load fails before its seed is set; load it here
    if test.policy is None:
        raise RuntimeError(f"STEP has no policy for n_max={n_max}, alpha={alpha}")
    return test


# ------------------------------------------------------------------------------------ output


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def rate(p: float, reps: int, bad: bool = False) -> str:
    """``p`` with its Monte Carlo error; bold when ``bad`` (a target missed, or an error above nominal)."""
    text = f"{p:.3f} ± {se(p, reps):.3f}"
    return f"**{text}**" if bad else text


# ------------------------------------------------------------------------------ fixed n: coverage


def covers(low: float, high: float, true: float) -> bool:
    """Whether ``[low, high]`` holds ``true``."""
    return low <= true <= high


FIXED_NS = (4, 10, 30, 100, 300)


def fixed_coverage(reps: int, seed: int, ns: Sequence[int] = FIXED_NS, slow_reps: int | None = None) -> dict:
    """Coverage of each fixed-n interval for the mean difference: {(data, method): {n: (coverage, reps)}}.

    Every method of a row sees the same replications; rliable's (slow: ~30 ms a call) sees the
    first ``slow_reps`` of them.
    """
    slow_reps = min(reps, slow_reps if slow_reps is not None else reps)
    out: dict = {}
    for key, sc in UNBOUNDED.items():
        for n in ns:
            rng = rng_for(seed, "fixed", key, n)
            d = sc.draw(rng, (reps, n)) + 0.0
            hits = {m: 0 for m in ("simeval t", "scipy ttest_rel", "scipy bootstrap", "rliable", OLD)}
            for r in range(reps):
                a, b = returns(d[r], None, rng)
                res = paired(a, b, CONFIDENCE)
                hits["simeval t"] += covers(res.diff.low, res.diff.high, sc.mean)
                hits["scipy ttest_rel"] += covers(*scipy_t(a, b), sc.mean) if n > 1 else 1
                hits["scipy bootstrap"] += covers(*scipy_bootstrap(b - a, r), sc.mean)
                low, high, _ = old_paired(a, b, seed=r, with_p=False)
                hits[OLD] += covers(low, high, sc.mean)
                if r < slow_reps and missing("rliable") is None:
                    hits["rliable"] += covers(*rliable_bootstrap(b - a, r), sc.mean)
            for method, h in hits.items():
                count = slow_reps if method == "rliable" else reps
                if method == "rliable" and missing("rliable") is not None:
                    continue
                out.setdefault((sc.name, method), {})[n] = (h / count, count)
        bounded = BOUNDED[key]
        for n in ns:
            rng = rng_for(seed, "fixed-bounded", key, n)
            d = bounded.draw(rng, (reps, n))
            hit = hit_t = 0
            for r in range(reps):
                a, b = returns(d[r], bounded.bounds, rng)
                res = paired(a, b, CONFIDENCE, bounds=bounded.bounds)
                hit += covers(res.diff.low, res.diff.high, bounded.mean)
                res_t = paired(a, b, CONFIDENCE)
                hit_t += covers(res_t.diff.low, res_t.diff.high, bounded.mean)
            label = f"{bounded.name}; bounds {bounded.bounds[0]:g}..{bounded.bounds[1]:g}"
            out.setdefault((label, "simeval betting"), {})[n] = (hit / reps, reps)
            out.setdefault((label, "simeval t"), {})[n] = (hit_t / reps, reps)
    return out


BINARY_FIXED = (independent(0.5, 0.7), independent(0.1, 0.2), PAIRED_NULL)


def binary_coverage(reps: int, seed: int, ns: Sequence[int] = FIXED_NS) -> dict:
    """Coverage on success data: {(data, method): {n: (coverage, reps)}}; McNemar's interval is for the share."""
    out: dict = {}
    for sc in BINARY_FIXED:
        for n in ns:
            rng = rng_for(seed, "binary", sc.name, n)
            a_all, b_all = sc.draw(rng, (reps, n))
            hits = {"simeval betting, bounds (0, 1)": 0, "simeval t": 0, "McNemar, Clopper-Pearson (share)": 0, OLD: 0}
            for r in range(reps):
                a, b = a_all[r], b_all[r]
                res = paired(a, b, CONFIDENCE, bounds=(0, 1))
                hits["simeval betting, bounds (0, 1)"] += covers(res.diff.low, res.diff.high, sc.diff)
                res = paired(a, b, CONFIDENCE)
                hits["simeval t"] += covers(res.diff.low, res.diff.high, sc.diff)
                mc = mcnemar(a, b, CONFIDENCE)
                hits["McNemar, Clopper-Pearson (share)"] += covers(mc.share.low, mc.share.high, sc.share)
                low, high, _ = old_paired(a, b, seed=r, with_p=False)
                hits[OLD] += covers(low, high, sc.diff)
            for method, h in hits.items():
                out.setdefault((sc.name, method), {})[n] = (h / reps, reps)
    return out


def coverage_rows(results: dict, target: Callable[[str, str, int], bool]) -> list[list[str]]:
    """Table rows: data, method, one coverage per n (bold where ``target(data, method, n)`` is missed)."""
    ns = sorted({n for cells in results.values() for n in cells})
    rows = []
    for (data, method), cells in results.items():
        row = [data, method]
        for n in ns:
            if n not in cells:
                row.append("")
                continue
            p, count = cells[n]
            missed = target(data, method, n) and p < 0.94
            row.append(f"**{p:.3f}**" if missed else f"{p:.3f}")
        rows.append(row)
    return rows


# ------------------------------------------------------------------------- fixed n: tests under the null


NULL_NS = (10, 30, 100)


def fixed_null_tests(reps: int, seed: int, ns: Sequence[int] = NULL_NS) -> list[list[str]]:
    """A verdict where the mean difference is 0, per test; and how often the old interval and test disagreed."""
    rows = []
    for key, sc in UNBOUNDED.items():
        for n in ns:
            rng = rng_for(seed, "null", key, n)
            d = sc.draw(rng, (reps, n))
            bounded = BOUNDED[key]
            d_bounded = bounded.draw(rng, (reps, n)) - bounded.mean  # centred: its mean difference is 0 too
            count = {"t": 0, "betting": 0, "perm": 0, "wilcoxon": 0, "disagree": 0}
            for r in range(reps):
                a, b = returns(d[r], None, rng)
                count["t"] += paired(a, b, CONFIDENCE).verdict != "inconclusive"
                low, high, p = old_paired(a, b, seed=r)
                count["perm"] += p < ALPHA
                count["disagree"] += (low > 0 or high < 0) != (p < ALPHA)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    count["wilcoxon"] += float(sst.wilcoxon(d[r]).pvalue) < ALPHA if np.any(d[r] != 0) else 0
                ab = returns(d_bounded[r], bounded.bounds, rng)
                count["betting"] += paired(*ab, CONFIDENCE, bounds=bounded.bounds).verdict != "inconclusive"
            cells = [sc.name, n]
            for k in ("t", "betting", "perm", "wilcoxon"):
                p = count[k] / reps
                cells.append(rate(p, reps, bad=p > ALPHA + 2 * se(ALPHA, reps)))
            cells.append(f"{count['disagree'] / reps:.3f}")
            rows.append(cells)
    return rows


# ------------------------------------------------------------------------------- fixed n: families


def fixed_family(reps: int, seed: int, cells: int, n: int, sc: Scenario, old: bool = True) -> dict:
    """A family of ``cells`` null cells (true difference 0) of ``n`` pairs each, plus one extra cell with a
    difference of one sd (power): Bonferroni t-intervals vs simeval <= 0.4's Holm over permutation p-values.

    Returns the family-wise error of the intervals (any of the null cells' intervals misses 0), the
    aggregate row's miss rate (mean_of_intervals over the null cells, true value 0), and the power on
    the extra cell; the same for the old method (its interval misses, its verdicts wrong) when ``old``.
    """
    rng = rng_for(seed, "family", sc.name, cells, n)
    conf = family_confidence(ALPHA, cells + 1)
    any_miss = agg_miss = power = old_wrong = old_power = 0
    for r in range(reps):
        d = sc.draw(rng, (cells + 1, n)) - sc.mean
        d[cells] += sc.sd
        intervals, means, ps, missed = [], [], [], False
        for c in range(cells + 1):
            a, b = returns(d[c], None, rng)
            res = paired(a, b, conf)
            if c < cells:
                intervals.append(res.diff)
                missed |= not covers(res.diff.low, res.diff.high, 0.0)
            else:
                power += res.verdict == "better"
            if old:
                _, _, p = old_paired(a, b, seed=r * 1000 + c)
                means.append(float(d[c].mean()))
                ps.append(p)
        any_miss += missed
        agg = mean_of_intervals(intervals, [1.0] * cells)
        agg_miss += not covers(agg.low, agg.high, 0.0)
        if old:
            v = old_verdicts(means, ps)
            old_wrong += any(x != "inconclusive" for x in v[:cells])
            old_power += v[cells] == "better"
    out = {"fwer": any_miss / reps, "aggregate": agg_miss / reps, "power": power / reps, "reps": reps}
    if old:
        out.update(old_fwer=old_wrong / reps, old_power=old_power / reps)
    return out


def peeking(reps: int, seed: int, look: int = 10, n_max: int = 300) -> dict:
    """What a fixed-n method claims under continuous monitoring: a t-interval (and the old permutation test)
    read at every look of ``look`` episodes up to ``n_max``, on normal differences of mean 0."""
    rng = rng_for(seed, "peeking", look, n_max)
    t_err = old_err = 0
    looks = range(look, n_max + 1, look)
    for r in range(reps):
        d = rng.normal(0, 1, n_max)
        a, b = returns(d, None, rng)
        t_missed = old_missed = False
        for n in looks:
            res = paired(a[:n], b[:n], CONFIDENCE)
            t_missed |= res.verdict != "inconclusive"
        for n in looks[:10]:  # the permutation test is slow: its first 10 looks (to 100 episodes)
            old_missed |= old_paired(a[:n], b[:n], seed=r, n_resamples=500)[2] < ALPHA
        t_err += t_missed
        old_err += old_missed
    return {"t": t_err / reps, "old": old_err / reps, "reps": reps}


# --------------------------------------------------------------------- sequential: family-wise error


def sequential_family_error(
    sc: Scenario | Binary,
    bounds: tuple[float, float] | None,
    cells: int,
    reps: int,
    seed: int,
    look: int = 10,
    n_max: int = 300,
    mcnemar_seq: bool = False,
) -> tuple[float, float]:
    """Family-wise error under continuous monitoring: ``cells`` null cells, each the sequence of a
    :class:`LookPlan` for that family (``alpha / cells`` each), looked at every ``look`` episodes up to
    ``n_max``; an error when any cell's interval misses its true value at any look. Returns (error,
    median final half-width of the first cell)."""
    plan = LookPlan("until-decided", ALPHA, cells, look, n_max)
    rng = rng_for(seed, "seq", sc.name, bounds, cells, look, n_max, mcnemar_seq)
    errors, widths = 0, []
    for _ in range(reps):
        failed = False
        for c in range(cells):
            if isinstance(sc, Binary):
                a, b = sc.draw(rng, (n_max,))
                true = sc.share if mcnemar_seq else sc.diff
            else:
                d = sc.draw(rng, (n_max,))
                a, b = returns(d, bounds, rng)
                true = sc.mean
            seq = (
                SequentialMcNemar(plan.confidence(), name=f"cell {c}")
                if mcnemar_seq
                else plan.paired(bounds, f"cell {c}")
            )
            for i in range(0, n_max, look):
                seq.update(a[i : i + look], b[i : i + look])
                if not covers(seq.low, seq.high, true):
                    failed = True
                    break
            if c == 0:
                widths.append((seq.high - seq.low) / 2)
            if failed:
                break
        errors += failed
    return errors / reps, float(np.median(widths))


def first_look(sc: Scenario, look: int, reps: int, seed: int, n_max: int = 300) -> float:
    """The t-mixture sequence (no bounds) with its first look, and every later one, ``look`` episodes apart:
    the error over all looks of one cell."""
    return sequential_family_error(sc, None, 1, reps, seed, look=look, n_max=n_max)[0]


def confseq_oracle(sc: Scenario | Binary, bounds: tuple[float, float], reps: int, seed: int, look: int = 10, n_max=300):
    """simeval's betting CS beside confseq's ``betting_cs`` (Waudby-Smith & Ramdas' own code: hedged, predictable
    mixture bets, 1000 grid points, running intersection) on the same data, read at every ``look``.

    Returns {method: (error over all looks, median half-width at n_max, mean half-width at look 3)}.
    """
    betting = _confseq()
    rng = rng_for(seed, "confseq", sc.name, look, n_max)
    span = bounds[1] - bounds[0]
    looks = np.arange(look, n_max + 1, look)
    res = {"simeval": [0, [], []], "confseq": [0, [], []]}
    for _ in range(reps):
        if isinstance(sc, Binary):
            a, b = sc.draw(rng, (n_max,))
            true = sc.diff
        else:
            a, b = returns(sc.draw(rng, (n_max,)), bounds, rng)
            true = sc.mean
        seq = SequentialPaired(CONFIDENCE, bounds)
        missed, lows, highs = False, [], []
        for i in looks:
            seq.update(a[i - look : i], b[i - look : i])
            missed |= not covers(seq.low, seq.high, true)
            lows.append(seq.low)
            highs.append(seq.high)
        res["simeval"][0] += missed
        res["simeval"][1].append((highs[-1] - lows[-1]) / 2)
        res["simeval"][2].append((highs[2] - lows[2]) / 2)
        x = ((b - a) + span) / (2 * span)  # the differences on [0, 1], as simeval rescales them
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lo, hi = betting.betting_cs(x, alpha=ALPHA, breaks=1000, running_intersection=True)
        lo, hi = 2 * span * np.asarray(lo)[looks - 1] - span, 2 * span * np.asarray(hi)[looks - 1] - span
        res["confseq"][0] += bool(np.any((lo > true) | (hi < true)))
        res["confseq"][1].append((hi[-1] - lo[-1]) / 2)
        res["confseq"][2].append((hi[2] - lo[2]) / 2)
    return {k: (v[0] / reps, float(np.median(v[1])), float(np.mean(v[2]))) for k, v in res.items()}


# ------------------------------------------------------------------ power and episodes to verdict


def t_power(n: int, effect: float) -> float:
    """The two-sided paired t-test's power for a verdict of better at standardised ``effect`` (noncentral t)."""
    if n < 2:
        return 0.0
    crit = sst.t.ppf(1 - ALPHA / 2, n - 1)
    return float(sst.nct.sf(crit, n - 1, effect * math.sqrt(n)))


def t_sample_size(effect: float, power: float = 0.8) -> int:
    """The smallest n whose paired t-test reaches ``power`` (a verdict of better)."""
    n = 2
    while t_power(n, effect) < power:
        n += 1
    return n


def mcnemar_power(n: int, sc: Binary) -> float:
    """simeval.stats.mcnemar's exact power for a verdict of better after ``n`` pairs (binomial sums)."""
    p_disc = sc.a_only + sc.b_only
    m = np.arange(n + 1)
    pm = sst.binom.pmf(m, n, p_disc)
    total = 0.0
    for mm in range(1, n + 1):
        k = np.arange(mm + 1)
        # interval above 0.5 <=> exact two-sided p-value < alpha and more than half won (stats.mcnemar)
        p_val = np.minimum(1.0, 2 * np.minimum(sst.binom.cdf(k, mm, 0.5), sst.binom.sf(k - 1, mm, 0.5)))
        reject = (p_val < ALPHA) & (k > mm / 2)
        total += pm[mm] * float(sst.binom.pmf(k[reject], mm, sc.share).sum())
    return total


def mcnemar_sample_size(sc: Binary, power: float = 0.8, start: int = 4) -> int:
    """The smallest n whose exact McNemar test reaches ``power`` (bisection then a walk down; power is nearly
    monotone in n)."""
    lo, hi = start, start
    while mcnemar_power(hi, sc) < power:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if mcnemar_power(mid, sc) < power else (lo, mid)
    return hi


def stopping_times(
    make: Callable[[], object], draw: Callable[[np.random.Generator], tuple], reps: int, rng, look: int, cap: int
) -> np.ndarray:
    """Episodes until each replication's sequence says ``better`` (looks every ``look``, up to ``cap``); inf
    where it never did (or said ``worse``: a wrong verdict ends a run too)."""
    out = np.full(reps, np.inf)
    for r in range(reps):
        a, b = draw(rng)
        seq = make()
        for i in range(0, cap, look):
            seq.update(a[i : i + look], b[i : i + look])
            if seq.verdict == "better":
                out[r] = i + look
                break
            if seq.verdict == "worse":
                break
    return out


def step_stopping_times(draw: Callable, reps: int, rng, n_max: int, alpha: float, seed: int) -> np.ndarray:
    """STEP's episodes to a decision for B (inf where none by ``n_max``)."""
    step = _step_module()
    test = step_test(n_max, alpha, seed)
    out = np.full(reps, np.inf)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for r in range(reps):
            a, b = draw(rng)
            test.random_seed = seed + r  # STEP randomises at its boundary: a stream of its own per replication
            test.reset()
            for i in range(n_max):
                if test.step(int(a[i]), int(b[i])).decision == step.Decision.AcceptAlternative:
                    out[r] = i + 1
                    break
    return out


def equal_power(times: np.ndarray, fixed_power: float, look: int, cap: int) -> tuple[int, float, float] | None:
    """The smallest budget (a multiple of ``look``) at which the sequence's power reaches ``fixed_power``, its
    power there and its mean episodes used (a verdict stops a run, else the budget does); None if the cap
    did not suffice."""
    for budget in range(look, cap + 1, look):
        power = float(np.mean(times <= budget))
        if power >= fixed_power:
            return budget, power, float(np.mean(np.minimum(times, budget)))
    return None


EFFECTS = (0.2, 0.35, 0.5, 0.8)  # standardised: mean / sd of the difference
BUDGET = 200  # about the t-test's n for 80% power at the smallest effect (0.2 sd: 199)


def power_continuous(reps: int, seed: int, effects: Sequence[float] = EFFECTS, look: int = 10) -> list[list[str]]:
    """Fixed-n t-test at 80% power against the sequences at equal power, per effect size.

    The sequences are LookPlan's (``plan_n`` = the look, 10) but for the row that tunes the
    t-mixture at the fixed test's n instead (``SequentialPaired(plan_n=n)``, first look still 10).
    """
    rows = []
    tight = Scenario("normal, cut at +-4", BOUNDED["normal"].draw, 0.0, BOUNDED["normal"].sd, (0.0, 5.0))
    setups = (
        ("normal", NORMAL, "t-mixture CS", "plan"),
        ("normal", NORMAL, "t-mixture CS tuned at the fixed n", "tuned"),
        ("t(3)", T3, "t-mixture CS", "plan"),
        ("normal, cut at +-4; bounds 0..10", BOUNDED["normal"], "betting CS", "plan"),
        ("normal, cut at +-4; bounds 0..5", tight, "betting CS", "plan"),
    )
    for label, sc, method, tuning in setups:
        bounds = sc.bounds
        for effect in effects:
            n_fix = t_sample_size(effect)
            shift = effect * sc.sd
            rng = rng_for(seed, "power", label, method, effect)
            # the fixed test's power measured on the scenario's data with simeval's own t-interval
            d = sc.draw(rng, (reps, n_fix)) + shift
            fixed = np.mean([paired(*returns(d[r], bounds, rng), CONFIDENCE).verdict == "better" for r in range(reps)])
            cap = max(300, int(math.ceil(6 * n_fix / look)) * look)
            plan = LookPlan("until-decided", ALPHA, 1, look, cap)

            def make(plan=plan, bounds=bounds, tuning=tuning, n_fix=n_fix):
                if tuning == "tuned":
                    return SequentialPaired(CONFIDENCE, bounds, plan_n=n_fix)
                return plan.paired(bounds, "cell")

            def draw(g, sc=sc, shift=shift, bounds=bounds, cap=cap):
                return returns(sc.draw(g, (cap,)) + shift, bounds, g)

            times = stopping_times(make, draw, reps, rng, look, cap)
            eq = equal_power(times, fixed, look, cap)
            row = [label, f"{effect:g}", n_fix, f"{fixed:.3f}", method + f" (look every {look})"]
            if eq is None:
                row += [f"> {cap}", f"{np.mean(np.isfinite(times)):.3f} at {cap}", "", ""]
            else:
                budget, power, mean = eq
                median = float(np.median(np.minimum(times, budget)))
                row += [budget, f"{power:.3f}", f"{mean:.1f} (median {median:.0f})", f"{1 - mean / n_fix:+.0%}"]
            # one budget for every effect: the fixed n of the smallest effect of interest (0.2 sd)
            d = sc.draw(rng, (reps, BUDGET)) + shift
            fixed_b = np.mean(
                [paired(*returns(d[r], bounds, rng), CONFIDENCE).verdict == "better" for r in range(reps)]
            )
            used = float(np.mean(np.minimum(times, BUDGET)))
            row += [f"{fixed_b:.3f}", f"{np.mean(times <= BUDGET):.3f}", f"{used:.1f} ({1 - used / BUDGET:+.0%})"]
            rows.append(row)
    return rows


BINARY_EFFECTS = (independent(0.5, 0.6), independent(0.5, 0.7), independent(0.5, 0.8))


def power_binary(reps: int, seed: int, effects: Sequence[Binary] = BINARY_EFFECTS) -> list[list[str]]:
    """Fixed-n McNemar at 80% power against SequentialMcNemar (every episode, every 10) and SequentialPaired with
    bounds (0, 1), at equal power."""
    rows = []
    for sc in effects:
        n_fix = mcnemar_sample_size(sc)
        rng = rng_for(seed, "power-binary", sc.name)
        a_all, b_all = sc.draw(rng, (reps, n_fix))
        fixed = float(np.mean([mcnemar(a_all[r], b_all[r]).verdict == "better" for r in range(reps)]))
        cap = max(300, 6 * n_fix)
        for method, look, make in (
            ("SequentialMcNemar (every episode)", 1, lambda: SequentialMcNemar(CONFIDENCE)),
            ("SequentialMcNemar (look every 10)", 10, lambda: SequentialMcNemar(CONFIDENCE)),
            ("SequentialPaired, bounds (0, 1) (look every 10)", 10, lambda: SequentialPaired(CONFIDENCE, (0, 1))),
        ):
            rng = rng_for(seed, "power-binary", sc.name, method)
            times = stopping_times(make, lambda g, sc=sc, cap=cap: sc.draw(g, (cap,)), reps, rng, look, cap)
            eq = equal_power(times, fixed, look, cap)
            row = [sc.name, f"{sc.diff:g}", n_fix, f"{fixed:.3f}", method]
            if eq is None:
                row += [f"> {cap}", f"{np.mean(np.isfinite(times)):.3f} at {cap}", "", ""]
            else:
                budget, power, mean = eq
                median = float(np.median(np.minimum(times, budget)))
                row += [budget, f"{power:.3f}", f"{mean:.1f} (median {median:.0f})", f"{1 - mean / n_fix:+.0%}"]
            rows.append(row)
    return rows


STEP_NULLS = (independent(0.5, 0.5), independent(0.2, 0.2), independent(0.9, 0.9), PAIRED_NULL)


def step_head_to_head(reps: int, seed: int, n_max: int = 200) -> list[list[str]]:
    """STEP (one-sided at 0.025 and at its shipped 0.05) against simeval's sequences for success at the same
    budget, every episode: false decisions for B under equal success, power and episodes where B is better."""
    cases = list(STEP_NULLS) + list(BINARY_EFFECTS)
    methods: list[tuple[str, Callable]] = [
        ("SequentialMcNemar (two-sided 0.05)", lambda: SequentialMcNemar(CONFIDENCE)),
        ("SequentialPaired, bounds (0, 1) (two-sided 0.05)", lambda: SequentialPaired(CONFIDENCE, (0, 1))),
    ]
    rows = []
    for name, make in methods:
        row = [name]
        for sc in cases:
            rng = rng_for(seed, "step", sc.name, name)
            times = stopping_times(make, lambda g, sc=sc: sc.draw(g, (n_max,)), reps, rng, 1, n_max)
            row.append(_decided(times, sc, reps))
        rows.append(row)
    row = [f"fixed McNemar, n = {n_max} (exact)"]
    for sc in cases:
        power = mcnemar_power(n_max, sc)
        row.append(f"{power:.3f}" if sc.diff == 0 else f"{power:.3f}; {n_max}")
    rows.append(row)
    for alpha in (0.025, 0.05):
        row = [f"STEP (one-sided {alpha:g}, n_max {n_max})"]
        why = missing("step")
        for sc in cases:
            if why is not None:
                row.append("not run")
                continue
            rng = rng_for(seed, "step", sc.name, alpha)
            try:
                times = step_stopping_times(lambda g, sc=sc: sc.draw(g, (n_max,)), reps, rng, n_max, alpha, seed)
            except Exception as exc:  # a policy that cannot be synthesised or loaded: say so in the row
                row.append(f"failed: {type(exc).__name__}")
                continue
            row.append(_decided(times, sc, reps))
        rows.append(row)
    return rows


def _decided(times: np.ndarray, sc: Binary, reps: int) -> str:
    p = float(np.mean(np.isfinite(times)))
    if sc.diff == 0:
        return rate(p, reps, bad=p > 0.025 + 2 * se(0.025, reps))
    done = times[np.isfinite(times)]
    mean_used = float(np.mean(np.where(np.isfinite(times), times, 200)))
    return f"{p:.3f}; {mean_used:.0f} ({np.median(done):.0f} when decided)" if len(done) else f"{p:.3f}"


# ---------------------------------------------------------------------------------------- the study


# ------------------------------------------------------------------ planned looks (group-sequential)


def planned_looks(look: int, n_max: int) -> tuple[int, ...]:
    """The looks of ``LookPlan(design="planned")``: every ``look`` episodes, and the budget."""
    return LookPlan("until-decided", ALPHA, 1, look, n_max, design="planned").looks()


def planned_runs(d: np.ndarray, looks: Sequence[int], confidence: float, true: float) -> tuple[np.ndarray, np.ndarray]:
    """Group-sequential runs over ``d`` (replications x episodes of B - A) at once: for each replication the
    episodes at which its repeated interval first lay above 0 (``inf``: never, or below 0 first) and whether any
    look's interval missed ``true``. Vectorised; tests/test_validity.py checks it against
    :class:`simeval.group_sequential.GroupSequentialMean` one replication at a time."""
    from simeval.group_sequential import boundaries

    spending = tuple(n for n in looks if n >= 2)
    c = dict(zip(spending, boundaries(1 - confidence, spending), strict=True))
    total, squares = np.cumsum(d, axis=1), np.cumsum(d * d, axis=1)
    reps = d.shape[0]
    times = np.full(reps, np.inf)
    open_ = np.ones(reps, dtype=bool)
    missed = np.zeros(reps, dtype=bool)
    for n in looks:
        if not math.isfinite(c.get(n, math.inf)):
            continue
        mean = total[:, n - 1] / n
        sd = np.sqrt(np.maximum(squares[:, n - 1] - n * mean**2, 0.0) / (n - 1))
        half = sst.t.isf(sst.norm.sf(c[n]), n - 1) * sd / math.sqrt(n)
        low, high = mean - half, mean + half
        missed |= (low > true) | (high < true)
        better = open_ & (low > 0)
        times[better] = n
        open_ &= ~(low > 0) & ~(high < 0)
    return times, missed


def planned_family_error(
    sc: Scenario | Binary, cells: int, reps: int, seed: int, look: int, n_max: int
) -> tuple[float, float]:
    """Family-wise error of ``cells`` null cells, each a planned-looks sequence at ``alpha / cells`` (looks every
    ``look`` up to ``n_max``): an error when any look of any cell misses the true mean difference. Returns (error,
    its Monte Carlo standard error)."""
    rng = rng_for(seed, "planned", sc.name, cells, look, n_max)
    looks = planned_looks(look, n_max)
    confidence = family_confidence(ALPHA, cells)
    failed = np.zeros(reps, dtype=bool)
    for _ in range(cells):
        if isinstance(sc, Binary):
            a, b = sc.draw(rng, (reps, n_max))
            d, true = b - a, sc.diff
        else:
            d, true = sc.draw(rng, (reps, n_max)), sc.mean
        failed |= planned_runs(d, looks, confidence, true)[1]
    err = float(failed.mean())
    return err, se(err, reps)


def planned_power(
    sc: Scenario, effect: float, reps: int, seed: int, looks_of: Callable[[int], tuple[int, ...]]
) -> list[object]:
    """Fixed-n t-test at 80% power against the planned-looks design of the smallest budget that reaches the same
    measured power on the same data (common random numbers); ``looks_of(budget)`` gives the looks. Returns the
    table row's cells: fixed n, fixed power, budget, looks, power, mean episodes (median), saving, and the mean
    episodes where the difference is 0 (the design's cost when there is nothing to find)."""
    n_fix = t_sample_size(effect)
    rng = rng_for(seed, "planned-power", sc.name, effect)
    cap = 3 * n_fix + 40
    noise = sc.draw(rng, (reps, cap))
    d = noise + effect * sc.sd
    fixed = float(np.mean([paired(np.zeros(n_fix), d[r, :n_fix], CONFIDENCE).verdict == "better" for r in range(reps)]))
    budget = n_fix
    while True:
        looks = looks_of(budget)
        times, _ = planned_runs(d[:, : looks[-1]], looks, CONFIDENCE, effect * sc.sd)
        power = float(np.mean(np.isfinite(times)))
        if power >= fixed or looks[-1] >= cap:
            break
        budget += 1
    used = np.minimum(times, looks[-1])
    null_times, _ = planned_runs(noise[:, : looks[-1]], looks, CONFIDENCE, 0.0)
    null_used = float(np.mean(np.minimum(null_times, looks[-1])))
    return [
        n_fix,
        f"{fixed:.3f}",
        looks[-1],
        len(looks),
        f"{power:.3f}",
        f"{used.mean():.1f} (median {np.median(used):.0f})",
        f"{1 - used.mean() / n_fix:+.0%}",
        f"{null_used:.1f} ({null_used / n_fix - 1:+.0%})",
    ]


def header(args: argparse.Namespace) -> str:
    """The command line, the date and the machine."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    versions = [f"numpy {np.__version__}", f"scipy {scipy.__version__}"]
    for dist in ("rliable", "sequentialized-barnard-tests", "confseq"):
        try:
            from importlib.metadata import version

            versions.append(f"{dist} {version(dist)}")
        except Exception:
            versions.append(f"{dist}: not installed")
    command = "python benchmarks/stats_validity.py " + " ".join(sys.argv[1:])
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"`{command.strip()}`, {now}; {os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}, "
        + ", ".join(versions)
        + f". Replications: {args.reps} per headline row (fewer where a row says). Nominal error {ALPHA}."
    )


SECTIONS = (
    "fixed",
    "binary",
    "null",
    "family",
    "sequential",
    "firstlook",
    "confseq",
    "power",
    "planned",
    "step",
    "selection",
    "mean",
    "guard",
)


def main(argv: Sequence[str] | None = None) -> None:
    """Run the study and print its tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=1000, help="replications of a headline row")
    parser.add_argument("--seed", type=int, default=33)
    parser.add_argument("--quick", action="store_true", help="a smoke run: few replications and sizes")
    parser.add_argument("--only", nargs="*", choices=SECTIONS, help="run these sections only")
    args = parser.parse_args(argv)
    reps = min(args.reps, 60) if args.quick else args.reps
    args.reps = reps
    small = max(50, reps // 10)  # the 100-cell rows and the slow reference packages
    ns = (10, 30) if args.quick else FIXED_NS
    wanted = set(args.only or SECTIONS)
    start = time.perf_counter()

    def timed(name: str) -> None:
        print(f"\n_{name}: {time.perf_counter() - start:.0f} s since the start._", flush=True)

    print(header(args), flush=True)

    if "fixed" in wanted:
        print("\n### Fixed n: coverage of the 95% interval for the mean difference\n")
        print("Bold: below 0.94 where the target asks for 0.94 (simeval's t on normal and t(3), the betting")
        print(f"interval, n >= 10). rliable's rows use the first {small} replications.\n")
        res = fixed_coverage(reps, args.seed, ns, slow_reps=small)

        def target(data: str, method: str, n: int) -> bool:
            return n >= 10 and (
                method == "simeval betting" or (method == "simeval t" and data.startswith(("normal", "t(3)")))
            )

        print(table(["data (B - A)", "method"] + [f"n={n}" for n in ns], coverage_rows(res, target)))
        timed("fixed")

    if "binary" in wanted:
        print("\n### Fixed n: success (0/1) outcomes\n")
        print("Coverage of the mean difference of success (McNemar's row: of the share of discordant")
        print("episodes B won). Bold: the documented methods below 0.94 at n >= 10.\n")
        res = binary_coverage(reps, args.seed, ns)

        def target_b(data: str, method: str, n: int) -> bool:
            return n >= 10 and method.startswith(("simeval betting", "McNemar"))

        print(table(["data", "method"] + [f"n={n}" for n in ns], coverage_rows(res, target_b)))
        timed("binary")

    if "null" in wanted:
        print("\n### Fixed n: a verdict where the mean difference is 0 (nominal 0.05)\n")
        print("simeval's t and betting verdicts; simeval <= 0.4's sign-flip permutation test and scipy's Wilcoxon")
        print("signed-rank test (both test symmetry about 0, not a mean of 0); the last column: how often the old")
        print("bootstrap interval and the old permutation test disagreed on the same data. Bold: above 0.05 + 2 MC")
        print("errors.\n")
        rows = fixed_null_tests(reps, args.seed, (10, 30) if args.quick else NULL_NS)
        print(
            table(["data", "n", "simeval t", "simeval betting (bounds)", OLD, "scipy wilcoxon", "old disagree"], rows)
        )
        timed("null")

    if "family" in wanted:
        print("\n### Fixed n: a family of cells\n")
        print("Null cells (difference 0) and one cell better by one sd: Bonferroni t-intervals")
        print("(`family_confidence`), the aggregate row (`mean_of_intervals` over the null cells), against")
        print("simeval <= 0.4's Holm over permutation p-values. Error: any null cell's interval misses 0 (old:")
        print("any null cell gets a verdict).\n")
        rows = []
        for sc in (NORMAL, T3, LOGNORMAL, FALLS):
            for cells in (1, 20) if args.quick else (1, 20, 100):
                for n in (10, 30):
                    reps_f = reps if cells == 1 else max(small, reps // (cells // 10 + 1))
                    old = cells <= 20
                    r = fixed_family(reps_f, args.seed, cells, n, sc, old=old)
                    err = r["fwer"]
                    row = [
                        sc.name,
                        cells,
                        n,
                        r["reps"],
                        rate(err, r["reps"], bad=err > ALPHA + 2 * se(ALPHA, r["reps"])),
                    ]
                    row += [f"{r['aggregate']:.3f}", f"{r['power']:.3f}"]
                    if old:
                        oe = r["old_fwer"]
                        row += [rate(oe, r["reps"], bad=oe > ALPHA + 2 * se(ALPHA, r["reps"])), f"{r['old_power']:.3f}"]
                    else:
                        row += ["not run (slow)", ""]
                    rows.append(row)
        header_f = ["data", "null cells", "n", "reps", "simeval family error", "aggregate row misses"]
        header_f += ["power (1 sd cell)", f"{OLD} family error", "old power"]
        print(table(header_f, rows))
        pk = peeking(small if args.quick else max(small, reps // 2), args.seed)
        print(
            f"\nPeeking (normal differences, mean 0, {pk['reps']} replications): simeval's fixed-n t-interval read at"
            f" every 10th episode up to 300 gives a verdict in {pk['t']:.3f} of the runs; simeval <= 0.4's"
            f" permutation test read at every 10th episode up to 100, in {pk['old']:.3f}. Fixed-n methods are"
            " not for monitoring: the sequential rows are."
        )
        timed("family")

    if "sequential" in wanted:
        print("\n### Sequential: family-wise error under continuous monitoring\n")
        print("Every cell of the family is a `LookPlan(alpha=0.05, rows=cells)` sequence (alpha / cells each),")
        print("looked at every 10 episodes up to 300 (and after every episode for one cell); an error when any")
        print("look of any cell misses the true value. Bold: above 0.05 + 2 MC errors. The rows with no promise")
        print("(lognormal and falls-type without bounds) are measured.\n")
        cells_list = (1, 20) if args.quick else (1, 20, 100)
        rows = []
        cases: list[tuple[str, object, object, bool]] = []
        for key in ("normal", "t(3)", "lognormal", "falls"):
            cases.append((BOUNDED[key].name, BOUNDED[key], BOUNDED[key].bounds, False))
        for b in (PAIRED_NULL, independent(0.2, 0.2)):
            cases.append((b.name + " (difference)", b, (0.0, 1.0), False))
            cases.append((b.name + " (SequentialMcNemar)", b, None, True))
        for key in ("normal", "t(3)", "lognormal", "falls"):
            cases.append((UNBOUNDED[key].name, UNBOUNDED[key], None, False))
        for label, sc, bounds, mc in cases:
            declared = "(0, 1)" if isinstance(sc, Binary) else (f"({bounds[0]:g}, {bounds[1]:g})" if bounds else "none")
            promised = bounds is not None or mc or label.startswith(("normal", "t(3)"))
            row = [label, declared, "yes" if promised else "no: measured"]
            width = ""
            per_episode_reps = reps
            e, _ = sequential_family_error(sc, bounds, 1, per_episode_reps, args.seed, look=1, mcnemar_seq=mc)
            row.append(rate(e, per_episode_reps, bad=e > ALPHA + 2 * se(ALPHA, per_episode_reps)))
            for cells in cells_list:
                reps_c = reps if cells == 1 else (max(small, reps // 4) if cells <= 20 else small)
                e, w = sequential_family_error(sc, bounds, cells, reps_c, args.seed, mcnemar_seq=mc)
                row.append(rate(e, reps_c, bad=e > ALPHA + 2 * se(ALPHA, reps_c)) + f" ({reps_c})")
                if cells == 1:
                    width = f"{w:.3g}"
            row.append(width)
            rows.append(row)
            print(f"_{label}: {time.perf_counter() - start:.0f} s_", file=sys.stderr, flush=True)
        header_s = ["data", "declared bounds", "promise", "1 cell, every episode"]
        header_s += [f"{c} cell{'s' if c > 1 else ''}, every 10 (reps)" for c in cells_list]
        header_s += ["1 cell: median half-width at 300"]
        print(table(header_s, rows))
        timed("sequential")

    if "firstlook" in wanted:
        print("\n### Sequential without bounds: the first look\n")
        print("The t-mixture sequence tuned at its first look (`plan_n` = `look_every`), one cell, a look every")
        print("K episodes up to 300: the error over all looks by K. Bold: above 0.05 + 2 MC errors.\n")
        ks = (2, 10, 30) if args.quick else (2, 5, 10, 20, 30, 50)
        rows = []
        for sc in (NORMAL, T3, LOGNORMAL, FALLS):
            row = [sc.name]
            for k in ks:
                e = first_look(sc, k, reps, args.seed)
                row.append(rate(e, reps, bad=e > ALPHA + 2 * se(ALPHA, reps)))
            rows.append(row)
        print(table(["data (no bounds)"] + [f"first look {k}" for k in ks], rows))
        timed("firstlook")

    if "confseq" in wanted:
        print("\n### Oracle: confseq's betting confidence sequence beside simeval's\n")
        why = missing("confseq")
        if why is not None:
            print(f"confseq not run: {why}")
        else:
            reps_o = max(small, reps // 3)
            rows = []
            for label, sc, bounds in (
                (PAIRED_NULL.name, PAIRED_NULL, (0.0, 1.0)),
                (independent(0.5, 0.7).name, independent(0.5, 0.7), (0.0, 1.0)),
                (FALLS.name, FALLS, FALLS.bounds),
                (BOUNDED["normal"].name, BOUNDED["normal"], BOUNDED["normal"].bounds),
            ):
                res = confseq_oracle(sc, bounds, reps_o, args.seed)
                for method, (err, width, early) in res.items():
                    rows.append(
                        [
                            label,
                            f"({bounds[0]:g}, {bounds[1]:g})",
                            method,
                            rate(err, reps_o, bad=err > 0.05 + 2 * se(0.05, reps_o)),
                            f"{early:.3g}",
                            f"{width:.3g}",
                        ]
                    )
            print(f"Same data, a look every 10 episodes up to 300, {reps_o} replications.\n")
            print(
                table(
                    [
                        "data",
                        "bounds",
                        "CS",
                        "error over all looks",
                        "mean half-width at 30",
                        "median half-width at 300",
                    ],
                    rows,
                )
            )
        timed("confseq")

    if "power" in wanted:
        print("\n### Power and episodes to verdict, at equal power\n")
        print("The fixed-n test's n is the smallest with 80% power (paired t: noncentral t; McNemar: exact); its")
        print("power is then measured on the same distribution. The sequence's budget is the smallest multiple")
        print("of its look at which its measured power reaches the fixed test's; episodes used: a verdict stops a")
        print("run, else the budget. Saving: 1 - mean episodes / fixed n. Effect: mean / sd of the difference.")
        print(f"The last three columns give both one budget, {BUDGET} episodes (the t-test's n at 80% power for an")
        print(f"effect of 0.2 sd), whatever the effect: the fixed test always uses {BUDGET}.\n")
        rows = power_continuous(reps, args.seed, (0.35, 0.8) if args.quick else EFFECTS)
        hdr = [
            "data",
            "effect",
            "fixed n (t-test)",
            "fixed power",
            "sequence",
            "budget",
            "power",
            "mean episodes",
            "saving",
        ]
        hdr += [f"n = {BUDGET}: fixed t power", "sequence power", "mean episodes (saving)"]
        print(table(hdr, rows))
        print()
        rows = power_binary(reps, args.seed, BINARY_EFFECTS[1:] if args.quick else BINARY_EFFECTS)
        hdr = ["data", "difference", "fixed n (McNemar)", "fixed power", "sequence", "budget", "power", "mean episodes"]
        print(table(hdr + ["saving"], rows))
        timed("power")

    if "planned" in wanted:
        print("\n### Planned looks (`--design planned`): error, power and episodes against the fixed n\n")
        print("A group-sequential design over the launcher's fixed looks: Lan-DeMets O'Brien-Fleming-type alpha")
        print("spending, the t statistic through its z-equivalent, repeated confidence intervals (module")
        print("`simeval.group_sequential`). Error: any look of any null cell misses the true difference (alpha /")
        print("cells each; bold: above 0.05 + 2 MC errors). No bounds are used: the rows with skewed or binary")
        print("data are measured, not promised.\n")
        rows = []
        schedules = ((4, 16), (10, 100)) if args.quick else ((4, 16), (8, 64), (10, 100), (10, 300))
        cells_list = (1, 20) if args.quick else (1, 20, 100)
        nulls = [NORMAL, T3, LOGNORMAL, FALLS, PAIRED_NULL]
        for sc in nulls:
            for look, n_max in schedules:
                row = [sc.name, f"every {look} to {n_max}"]
                for cells in cells_list:
                    err, _ = planned_family_error(sc, cells, reps, args.seed, look, n_max)
                    row.append(rate(err, reps, bad=err > ALPHA + 2 * se(ALPHA, reps)))
                rows.append(row)
        hdr = ["data (B - A, no bounds)", "looks"] + [f"{c} cell{'s' if c > 1 else ''}" for c in cells_list]
        print(table(hdr, rows))
        print("\nAt equal power: the fixed-n paired t-test's n for 80% power, its power measured, and the planned")
        print("design with the smallest budget whose measured power on the same data (common random numbers) is")
        print("at least as high. Mean episodes: a verdict stops a run, else the budget. Saving: 1 - mean episodes /")
        print("fixed n. Last column: mean episodes when the difference is 0 (no futility stop: the whole budget).\n")
        rows = []
        effects = (0.35, 0.8) if args.quick else EFFECTS
        for sc in (NORMAL, T3):
            for effect in effects:
                for label, looks_of in (
                    ("every 10", lambda n: planned_looks(10, n)),
                    ("5 looks", lambda n: planned_looks(max(1, math.ceil(n / 5)), n)),
                ):
                    rows.append([sc.name, f"{effect:g}", label] + planned_power(sc, effect, reps, args.seed, looks_of))
        hdr = ["data", "effect", "looks", "fixed n", "fixed power", "budget", "looks taken at most", "power"]
        hdr += ["mean episodes", "saving", "difference 0: mean episodes"]
        print(table(hdr, rows))
        timed("planned")

    if "step" in wanted:
        print("\n### Success, head to head with STEP (a look after every episode, at most 200)\n")
        print("STEP tests one direction (B better) at its alpha; simeval's sequences are two-sided at 0.05, so")
        print("their error toward 'better' is at most 0.025: the fair STEP row is one-sided 0.025 (synthesised by")
        print("STEP's own script; the package ships 0.05). Null columns: any decision that B is better (bold: above")
        print("0.025 + 2 MC errors). Effect columns: power; mean episodes (a decision stops a run, else 200).\n")
        reps_s = reps
        rows = step_head_to_head(reps_s, args.seed)
        names = [sc.name for sc in STEP_NULLS] + [sc.name for sc in BINARY_EFFECTS]
        print(table(["method"] + names, rows))
        timed("step")

    if "selection" in wanted:
        selection_section(reps, args.seed, args.quick)
        timed("selection")

    if "guard" in wanted:
        guard_section(max(50, reps // 5), args.seed, args.quick)
        timed("guard")

    if "mean" in wanted:
        mean_section(reps, args.seed, args.quick)
        timed("mean")


# ------------------------------------------------------------ selection (issue 46): SequentialSelection

SELECTION_LOOK = 4  # episodes per look, per arm
SELECTION_MARGIN = 0.2  # the margin, in units of the data's ``unit``
SELECTION_RISE = 1.0  # the training-run spread: best minus first arm, in units of the data's ``unit``
SELECTION_POWER = 0.8  # the probability the sweep and the selection are compared at


@dataclass(frozen=True)
class ArmsData:
    """K checkpoints' values on common episodes: ``draw(rng, n, levels)`` is ``[n, K]`` for the arms' levels (in
    ``unit``s below the best's: 0 is the best), ``means(levels)`` their true means. ``unit``: the sd of the paired
    difference of two arms at the top; ``bounds``: declared bounds, or None."""

    name: str
    draw: Callable[[np.random.Generator, int, np.ndarray], np.ndarray]
    means: Callable[[np.ndarray], np.ndarray]
    unit: float
    bounds: tuple[float, float] | None = None


def _arms_unbounded(own: Callable[[np.random.Generator, tuple], np.ndarray]) -> Callable:
    """Mean ``-level * unit``, a component shared by every arm on an episode (the seed's difficulty, sd 1) and the
    arm's own noise (sd 1): the paired difference has sd sqrt(2)."""

    def draw(rng: np.random.Generator, n: int, levels: np.ndarray) -> np.ndarray:
        return -levels * math.sqrt(2) + rng.normal(0.0, 1.0, (n, 1)) + own(rng, (n, len(levels)))

    return draw


FALL_VALUE, FALL_P, FALL_TOP, FALL_SD = 0.05, 0.1, 0.8, 0.05


def _fall_unit() -> float:
    clipped = sst.truncnorm.var(-3, 3)  # the no-fall value's spread: FALL_SD * a normal clipped at +-3
    mean = FALL_P * FALL_VALUE + (1 - FALL_P) * FALL_TOP
    square = FALL_P * FALL_VALUE**2 + (1 - FALL_P) * (FALL_TOP**2 + FALL_SD**2 * clipped)
    return math.sqrt(2 * (square - mean**2))  # independent falls: the difference of two arms


FALL_UNIT = _fall_unit()
BINARY_TOP = 0.8
BINARY_UNIT = math.sqrt(2 * BINARY_TOP * (1 - BINARY_TOP))


def _falls_arms(rng: np.random.Generator, n: int, levels: np.ndarray) -> np.ndarray:
    level = FALL_TOP - levels * FALL_UNIT / (1 - FALL_P)
    steady = level + FALL_SD * np.clip(rng.normal(0.0, 1.0, (n, len(levels))), -3, 3)
    return np.where(rng.random((n, len(levels))) < FALL_P, FALL_VALUE, steady)


def _binary_arms(rng: np.random.Generator, n: int, levels: np.ndarray) -> np.ndarray:
    return (rng.random((n, len(levels))) < BINARY_TOP - levels * BINARY_UNIT).astype(np.float64)


SELECTION_DATA = (
    ArmsData("normal", _arms_unbounded(lambda r, s: r.normal(0.0, 1.0, s)), lambda v: -v * math.sqrt(2), math.sqrt(2)),
    ArmsData(
        "t(3)",
        _arms_unbounded(lambda r, s: r.standard_t(3, s) / math.sqrt(3)),
        lambda v: -v * math.sqrt(2),
        math.sqrt(2),
    ),
    ArmsData(
        "falls (0.05 w.p. 0.1, else about 0.8), bounds (0, 1)",
        _falls_arms,
        lambda v: FALL_P * FALL_VALUE + (1 - FALL_P) * (FALL_TOP - v * FALL_UNIT / (1 - FALL_P)),
        FALL_UNIT,
        (0.0, 1.0),
    ),
    ArmsData(
        "binary (success 0.8 at the top), bounds (0, 1)",
        _binary_arms,
        lambda v: BINARY_TOP - v * BINARY_UNIT,
        BINARY_UNIT,
        (0.0, 1.0),
    ),
)


SPREADS = {"training, steep": 4.0, "training, gradual": 2.0, "equal": 0.0}


def selection_levels(spread: str, arms: int) -> np.ndarray:
    """Each arm's level below the best, in units: the ``training`` spreads rise like a training run's checkpoints,
    ``1 - exp(-c t)`` over training time ``t`` in [0, 1] scaled to ``SELECTION_RISE`` (steep: c = 4, the last half
    of the arms on a plateau within about 0.2 of the best; gradual: c = 2), the last arm the best; ``equal``: every
    arm the same."""
    c = SPREADS[spread]
    if not c or arms == 1:
        return np.zeros(arms)
    t = np.arange(arms) / (arms - 1)
    rise = (1 - np.exp(-c * t)) / (1 - math.exp(-c))
    return SELECTION_RISE * (1 - rise)


@dataclass
class SelectionRun:
    """One replication: whether the guarantee failed, the episodes spent after each look, and the look (1-based) at
    which the rule stopped on ``one left`` or ``within margin`` (None: it reached the cap)."""

    error: bool
    episodes: list[int]
    stop: int | None


def selection_run(
    data: ArmsData,
    levels: np.ndarray,
    rng: np.random.Generator,
    cap: int,
    late: bool = False,
    plan_n: int = 16,
    rest: bool = True,
    planned: bool = False,
) -> SelectionRun:
    """Run :class:`simeval.stats.SequentialSelection` to a stop or ``cap`` episodes per arm. ``late``: two arms at
    the start and one more every other look, in training order (the best lands last), each replaying the looks
    played before it on their seeds; the selection is then open-ended (no ``max_arms``). Each look the active arms
    play (an arm that rested first plays the looks it missed, on their seeds: counted); ``rest=False``: every
    alive arm plays every look. ``planned``: a group-sequential design over the looks up to ``cap`` (``cap`` is then
    its budget: fixed before the run)."""
    from simeval.stats import SequentialSelection

    arms = len(levels)
    mu = data.means(levels)
    best = int(np.flatnonzero(mu == mu.max())[-1])
    margin = SELECTION_MARGIN * data.unit
    start = 2 if late and arms > 2 else arms
    looks = tuple(range(SELECTION_LOOK, cap + 1, SELECTION_LOOK)) if planned else None
    sel = SequentialSelection(
        start, CONFIDENCE, data.bounds, margin, max_arms=None if late else arms, plan_n=plan_n, rest=rest, looks=looks
    )
    history: list[np.ndarray] = []
    spent, episodes, stop, error, look = 0, [], None, False, 0
    while sel.n < cap:
        look += 1
        for a in sel.active:
            if sel.behind(a):
                missed = np.concatenate(history[sel.looks_played(a) :])[:, a]
                sel.catch_up(a, missed)
                spent += len(missed)
        if late and sel.arms < arms and (sel.done or (look > 1 and look % 2 == 1)):
            past = np.concatenate(history)[:, sel.arms] if history else np.zeros(0)
            sel.add_arm(past)
            spent += len(past)
        x = data.draw(rng, SELECTION_LOOK, levels)
        history.append(x)
        shown = x[:, : sel.arms].copy()
        shown[:, [a for a in range(sel.arms) if a not in sel.active]] = np.nan
        spent += SELECTION_LOOK * len(sel.active)
        sel.update(shown)
        episodes.append(spent)
        if best in sel.eliminated:
            error = True
        if sel.done and sel.arms == arms:
            stop = look
            error = error or mu[sel.best] < mu[best] - margin
            break
    return SelectionRun(error, episodes, stop)


def sweep_n(data: ArmsData, levels: np.ndarray, power: float, seed: int, draws: int = 20000) -> int | None:
    """The smallest common n at which Bonferroni t-intervals over the K - 1 gaps to the best, at the true sd,
    separate every arm outside the margin with probability ``power`` (None: no arm is outside it)."""
    mu = data.means(levels)
    best = int(np.argmax(mu))
    outside = np.flatnonzero(mu < mu[best] - SELECTION_MARGIN * data.unit)
    if not len(outside):
        return None
    rng = rng_for(seed, "sweep", data.name, len(levels), tuple(levels.round(6)))
    sample = data.draw(rng, 200_000, levels)
    d = sample[:, [best]] - sample[:, outside]
    cov = np.atleast_2d(np.cov(d, rowvar=False))
    gap, sd = mu[best] - mu[outside], np.sqrt(np.diag(cov))
    z = rng.multivariate_normal(np.zeros(len(outside)), cov, draws)
    alpha = ALPHA / max(1, len(levels) - 1)

    def separated(n: int) -> float:
        q = sst.t.ppf(1 - alpha / 2, n - 1)
        return float(np.mean(np.all(gap + z / math.sqrt(n) - q * sd / math.sqrt(n) > 0, axis=1)))

    low, high = 2, 4
    while separated(high) < power:
        low, high = high, high * 2
    while low < high:
        mid = (low + high) // 2
        low, high = (mid + 1, high) if separated(mid) < power else (low, mid)
    return low


def selection_row(
    data: ArmsData, arms: int, spread: str, reps: int, seed: int, late: bool = False, plan_n: int = 16
) -> list[str]:
    """One row of the selection table: the guarantee's failure rate, and the episodes against the sweep."""
    levels = selection_levels(spread, arms)
    n_sweep = sweep_n(data, levels, SELECTION_POWER, seed)
    cap = SELECTION_LOOK * math.ceil(min(4000, 6 * (n_sweep or 100)) / SELECTION_LOOK)
    rng = rng_for(seed, "selection", data.name, arms, spread, late)
    runs = [selection_run(data, levels, rng, cap, late, plan_n) for _ in range(reps)]
    errors = float(np.mean([r.error for r in runs]))
    stops = np.array([r.stop if r.stop is not None else math.inf for r in runs])
    row = [data.name, str(arms), spread, "yes" if late else "no", "anytime", str(reps)]
    row.append(rate(errors, reps, bad=errors > ALPHA + 2 * se(ALPHA, reps)))
    used = np.array([r.episodes[-1] for r in runs], dtype=np.float64)
    row.append(f"{np.mean(np.isfinite(stops)):.3f} by {cap}")
    if n_sweep is None:
        row += ["no arm outside the margin", "", f"{used.mean():.0f} (median {np.median(used):.0f})", ""]
        return row
    looks = 1
    while np.mean(stops <= looks) < SELECTION_POWER and looks * SELECTION_LOOK < cap:
        looks += 1
    at = np.array([r.episodes[min(looks, len(r.episodes)) - 1] for r in runs], dtype=np.float64)
    share = at.mean() / (arms * n_sweep)
    bad = arms == 8 and spread.startswith("training") and share > 0.5
    row += [
        f"{n_sweep} x {arms} = {arms * n_sweep}",
        f"{looks * SELECTION_LOOK} ({np.mean(stops <= looks):.2f})",
        f"{at.mean():.0f} (median {np.median(at):.0f}); uncapped {used.mean():.0f}",
        f"**{share:.0%}**" if bad else f"{share:.0%}",
    ]
    return row


PLANNED_BUDGETS = (0.75, 1.0, 1.25, 1.5, 2.0, 3.0)  # a planned selection's budget, in sweeps' n per arm


def planned_selection_row(data: ArmsData, arms: int, spread: str, reps: int, seed: int, late: bool = False) -> list:
    """One row for planned looks (``looks=``): the budget is part of the design, so the row tries the budgets
    :data:`PLANNED_BUDGETS` (times the sweep's n, in whole looks) and reports the smallest at which the selection
    stops (one left or within margin) in :data:`SELECTION_POWER` of the runs: its error, and its episodes."""
    levels = selection_levels(spread, arms)
    n_sweep = sweep_n(data, levels, SELECTION_POWER, seed)
    assert n_sweep is not None, "planned rows are for spreads with arms outside the margin"
    for scale in PLANNED_BUDGETS:
        budget = SELECTION_LOOK * math.ceil(scale * n_sweep / SELECTION_LOOK)
        rng = rng_for(seed, "selection-planned", data.name, arms, spread, late, budget)
        runs = [selection_run(data, levels, rng, budget, late, planned=True) for _ in range(reps)]
        stopped = float(np.mean([r.stop is not None for r in runs]))
        if stopped >= SELECTION_POWER:
            break
    errors = float(np.mean([r.error for r in runs]))
    used = np.array([r.episodes[-1] for r in runs], dtype=np.float64)
    share = used.mean() / (arms * n_sweep)
    bad = arms == 8 and spread.startswith("training") and share > 0.5
    return [
        data.name, str(arms), spread, "yes" if late else "no", "planned", str(reps),
        rate(errors, reps, bad=errors > ALPHA + 2 * se(ALPHA, reps)),
        f"{stopped:.3f} by {budget} (the plan's budget)",
        f"{n_sweep} x {arms} = {arms * n_sweep}",
        f"{budget} ({stopped:.2f})",
        f"{used.mean():.0f} (median {np.median(used):.0f})",
        f"**{share:.0%}**" if bad else f"{share:.0%}",
    ]  # fmt: skip


def selection_floor(data: ArmsData, levels: np.ndarray, seed: int) -> tuple[float, int]:
    """A floor under the episodes of any rule that ends ``within margin`` having chosen the best arm: each other arm
    ``j`` shown worse or within the margin by one fixed-n, one-sided level-``ALPHA`` z-test of power
    :data:`SELECTION_POWER` at the true sd (no multiplicity, no price for looking: a bound no real rule reaches),
    ``n_j = ((z_{1-alpha} + z_power) sd_j / (margin + gap_j))^2``, and the best arm playing the largest ``n_j``.
    Returns (the floor, the sweep's episodes)."""
    mu = data.means(levels)
    best = int(np.flatnonzero(mu == mu.max())[-1])
    rng = rng_for(seed, "floor", data.name, len(levels), tuple(levels.round(6)))
    sample = data.draw(rng, 200_000, levels)
    z = sst.norm.isf(ALPHA) + sst.norm.ppf(SELECTION_POWER)
    margin = SELECTION_MARGIN * data.unit
    need = [
        (z * float(np.std(sample[:, best] - sample[:, j])) / (margin + mu[best] - mu[j])) ** 2
        for j in range(len(levels))
        if j != best
    ]
    n_sweep = sweep_n(data, levels, SELECTION_POWER, seed)
    return sum(need) + max(need), len(levels) * (n_sweep or 0)


SELECTION_HEADER = [
    "data",
    "arms",
    "spread",
    "arms join late",
    "design",
    "reps",
    "error (best eliminated, or a choice outside the margin)",
    "stopped (one left, within margin) by the cap",
    f"sweep: n at {SELECTION_POWER:g} x arms",
    f"selection's budget per arm at {SELECTION_POWER:g} (stopped)",
    "selection's mean episodes",
    "selection / sweep",
]


def selection_section(reps: int, seed: int, quick: bool = False) -> None:
    """Print the selection study: the guarantee and the episodes against a fixed sweep (issue 46)."""
    print("\n### Choosing a checkpoint: `SequentialSelection`\n")
    print(f"K arms on common episodes, a look every {SELECTION_LOOK} episodes, confidence {CONFIDENCE:g}, margin")
    print(f"{SELECTION_MARGIN:g} units (a unit: the sd of the paired difference of two arms at the top), the")
    print("t-mixture sequences tuned at 64 episodes (`plan_n=64`). Spreads: a training run's checkpoints,")
    print(f"`1 - exp(-c t)` over training time scaled to a rise of {SELECTION_RISE:g} unit (steep, c = 4: half the")
    print("arms on a plateau within 0.2 of the best; gradual, c = 2), or all equal. Known arms use `max_arms=K`;")
    print("late rows start with 2 arms and add one every other look in training order (the best last), each")
    print("replaying the looks before it (its episodes counted), open-ended (no `max_arms`). Error: the best arm")
    print("(the last of the equal ones) eliminated at any look, or a stop that chose an arm outside the margin")
    print("(bold: above 0.05 + 2 MC errors). The sweep: the smallest common n at which Bonferroni t-intervals")
    print("over the K - 1 gaps to the best (true sd, normal approximation, 20,000 draws) separate every arm")
    print(f"outside the margin with probability {SELECTION_POWER:g}; the selection's budget is the smallest at which")
    print(f"it stops (one left or within margin) in {SELECTION_POWER:g} of the runs (runs go on to a cap of six")
    print("sweeps, the uncapped mean beside). Arms settled within the margin of the leader rest until the leader")
    print("changes, then play the looks they missed (counted). Planned rows (`looks=`, no bounds): a group-sequential")
    print("design over the looks up to its budget, fixed before the run: the smallest of 0.75, 1, 1.25, 1.5, 2 and 3")
    print(
        f"times the sweep's n at which it stops in {SELECTION_POWER:g} of the runs, every run's episodes counted "
        "to its"
    )
    print("stop or the budget. Bold ratio: the target (<= 50% at K = 8 on a training spread) missed.\n")
    rows = []
    ks = (2, 8) if quick else (2, 8, 32)
    for data in SELECTION_DATA:
        for arms in ks:
            spreads = ("training, gradual", "equal") if arms == 2 else tuple(SPREADS)
            for spread in spreads:
                slow = arms == 32 and data.bounds is not None  # the betting sequences over 496 pairs
                if slow and spread == "equal":
                    continue  # every pair stays alive for hundreds of looks: minutes a replication
                r = max(10, reps // 5) if slow else reps
                rows.append(selection_row(data, arms, spread, r, seed, plan_n=64))
                print(f"_{data.name}, {arms}, {spread}: done_", file=sys.stderr, flush=True)
        rows.append(selection_row(data, 8, "training, gradual", reps, seed, late=True, plan_n=64))
        if data.bounds is None:  # with bounds the betting sequences are kept either way
            for arms in (8,) if quick else (8, 32):
                for spread in ("training, steep", "training, gradual"):
                    rows.append(planned_selection_row(data, arms, spread, reps, seed))
                    print(f"_{data.name}, {arms}, {spread}, planned: done_", file=sys.stderr, flush=True)
            rows.append(planned_selection_row(data, 8, "training, gradual", reps, seed, late=True))
    print(table(SELECTION_HEADER, rows))
    print("\nA floor no rule reaches (`selection_floor`): each checkpoint shown worse than the best or within the")
    print(
        f"margin of it by one fixed-n, one-sided level-{ALPHA:g} z-test of power {SELECTION_POWER:g} at the true "
        "sd, with"
    )
    print("no multiplicity and no price for looking, the best playing the most of them; beside the sweep's episodes.\n")
    floors = []
    for data in SELECTION_DATA:
        for arms in (8,) if quick else (8, 32):
            for spread in ("training, steep", "training, gradual"):
                floor, sweep = selection_floor(data, selection_levels(spread, arms), seed)
                floors.append([data.name, str(arms), spread, f"{floor:.0f}", str(sweep), f"{floor / sweep:.0%}"])
    print(table(["data", "arms", "spread", "floor (episodes)", "sweep (episodes)", "floor / sweep"], floors))


# ------------------------------------------------------------------ one cell: mean_ci's interval (issue 46)


def _cheetah(rng: np.random.Generator, shape: tuple) -> np.ndarray:
    """HalfCheetah-like returns: about 3000 (sd 150), a fall to about 200 (sd 100) with probability 0.1."""
    fall = rng.random(shape) < 0.1
    return np.where(fall, rng.normal(200.0, 100.0, shape), rng.normal(3000.0, 150.0, shape))


ONE_CELL = {
    "normal": (lambda r, s: r.normal(0.0, 1.0, s), 0.0),
    "t(3)": (lambda r, s: r.standard_t(3, s), 0.0),
    "lognormal(0, 1) (skewed)": (lambda r, s: r.lognormal(0.0, 1.0, s), LN_MEAN),
    "binary, p = 0.9": (lambda r, s: (r.random(s) < 0.9).astype(np.float64), 0.9),
    "HalfCheetah-like: ~3000, falls to ~200 w.p. 0.1": (_cheetah, 0.9 * 3000.0 + 0.1 * 200.0),
}
"""One checkpoint's per-episode returns: name -> (draw, true mean)."""
MEAN_NS = (5, 10, 16, 32, 64)


def _collapsed(x: np.ndarray) -> tuple[float, float] | None:
    """The interval of values that are all the same (every method's): the mean; else None."""
    return (float(x[0]), float(x[0])) if np.all(x == x[0]) else None


def scipy_t_interval(x: np.ndarray) -> tuple[float, float]:
    """Student's t-interval of the mean (scipy.stats.t): the reference for simeval's ``t``."""
    same = _collapsed(x)
    if same is not None:
        return same
    n = x.size
    low, high = sst.t.interval(CONFIDENCE, n - 1, loc=x.mean(), scale=x.std(ddof=1) / math.sqrt(n))
    return float(low), float(high)


def scipy_bca(x: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """scipy.stats.bootstrap's BCa interval of the mean (2000 resamples)."""
    same = _collapsed(x)
    if same is not None:
        return same
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = sst.bootstrap((x,), np.mean, method="BCa", n_resamples=2000, random_state=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def studentized_bootstrap(x: np.ndarray, seed: int = 0, n_resamples: int = 2000) -> tuple[float, float]:
    """The studentized (bootstrap-t) interval of the mean: the t statistic's quantiles from resamples.

    scipy has no bootstrap-t; this is the textbook one (Efron & Tibshirani 1993, 12.5). A resample
    with no spread has t = 0 where its mean is the sample's, else +-inf.
    """
    same = _collapsed(x)
    if same is not None:
        return same
    n = x.size
    rng = np.random.default_rng(seed)
    m, s = x.mean(), x.std(ddof=1)
    rows = max(1, 2**22 // n)  # resamples drawn in chunks of about 4M values (memory)
    mb, sb = np.empty(n_resamples), np.empty(n_resamples)
    for start in range(0, n_resamples, rows):
        boot = x[rng.integers(0, n, (min(rows, n_resamples - start), n))]
        mb[start : start + len(boot)], sb[start : start + len(boot)] = boot.mean(axis=1), boot.std(axis=1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(sb > 0, (mb - m) / (sb / math.sqrt(n)), np.sign(mb - m) * np.inf)
    t = np.nan_to_num(t, nan=0.0, posinf=np.inf, neginf=-np.inf)
    q_low, q_high = np.quantile(t, [ALPHA / 2, 1 - ALPHA / 2], method="nearest")  # no inf - inf between ranks
    return float(m - q_high * s / math.sqrt(n)), float(m - q_low * s / math.sqrt(n))


def _mean_methods() -> dict[str, Callable[[np.ndarray], tuple[float, float]]]:
    """The methods of the one-cell study: simeval's by name, beside scipy's and the bootstrap-t."""
    from simeval.stats import mean_ci

    def simeval(method: str) -> Callable[[np.ndarray], tuple[float, float]]:
        def interval(x: np.ndarray) -> tuple[float, float]:
            ci = mean_ci(x, method=method)
            return ci.low, ci.high

        return interval

    return {
        "simeval percentile bootstrap (before)": simeval("percentile bootstrap"),
        "simeval t": simeval("t"),
        "scipy t (reference)": scipy_t_interval,
        "scipy bootstrap BCa": scipy_bca,
        "studentized bootstrap": studentized_bootstrap,
    }


def mean_coverage(reps: int, seed: int, ns: Sequence[int] = MEAN_NS) -> tuple[dict, dict]:
    """Coverage of each one-cell 95% interval for the mean, {(data, method): {n: (coverage, reps)}}, and the
    share of its intervals with an infinite end, {(data, method, n): share} where there are any.

    Every method of a row sees the same replications (one generator per data and n).
    """
    methods = _mean_methods()
    out: dict = {}
    infinite: dict = {}
    for data, (draw, true) in ONE_CELL.items():
        for n in ns:
            x = draw(rng_for(seed, "mean", data, n), (reps, n))
            for method, interval in methods.items():
                ends = np.array([interval(x[r]) for r in range(reps)])
                hits = int(np.sum((ends[:, 0] <= true) & (true <= ends[:, 1])))
                out.setdefault((data, method), {})[n] = (hits / reps, reps)
                share = float(np.mean(~np.isfinite(ends).all(axis=1)))
                if share > 0:
                    infinite[(data, method, n)] = share
    return out, infinite


MEAN_TIMED_NS = (10, 1_000, 163_840)


def mean_timing(ns: Sequence[int] = MEAN_TIMED_NS, budget_s: float = 20.0) -> list[list[str]]:
    """Seconds per call of each one-cell method at each n (the best of 3, normal data; one call where a call
    takes over a second). A method whose call at the previous n took over ``budget_s`` / 100 s per thousand
    episodes squared (BCa's jackknife is quadratic in n) is not run, and says its measured growth."""
    rows = []
    for method, interval in _mean_methods().items():
        row = [method]
        last: tuple[int, float] | None = None
        for n in ns:
            x = np.random.default_rng(n).normal(size=n)
            if last is not None and method.endswith("BCa") and last[1] * (n / last[0]) ** 2 > budget_s:
                row.append(f"not run: ~{last[1] * (n / last[0]) ** 2:.0f} s (n^2 from {last[1]:.2g} s at {last[0]:,})")
                continue
            best = math.inf
            for _ in range(3):
                t0 = time.perf_counter()
                interval(x)
                best = min(best, time.perf_counter() - t0)
                if best > 1.0:
                    break
            row.append(f"{best:.2g} s")
            last = (n, best)
        rows.append(row)
    return rows


def mean_section(reps: int, seed: int, quick: bool) -> None:
    """Print the one-cell study: coverage of each 95% interval of one checkpoint's mean, then time per call."""
    ns = (10, 32) if quick else MEAN_NS
    print("\n### One cell: coverage of the 95% interval of one checkpoint's mean (`mean_ci`, `reward_ci_*`)\n")
    print("Each row draws one checkpoint's per-episode returns; the percentile bootstrap is every round's interval")
    print("before schema 2, `t` after. Bold: below 0.95 - 2 MC errors where another method of the row holds it.")
    print("Binary p = 0.9 and the falls data at n <= 16: 0.9^n of the samples hold no failure or fall, which no")
    print("method can see (0.9^10 = 0.35).\n")
    res, infinite = mean_coverage(reps, seed, ns)
    floor = 0.95 - 2 * se(0.95, reps)
    rows = []
    for (data, method), cells in res.items():
        row = [data, method]
        for n in ns:
            p = cells[n][0]
            held = any(res[(data, m)][n][0] >= floor for d, m in res if d == data)
            cell = f"**{p:.3f}**" if held and p < floor else f"{p:.3f}"
            share = infinite.get((data, method, n))
            row.append(cell + (f" ({share:.0%} infinite)" if share else ""))
        rows.append(row)
    print(table(["data (one checkpoint)", "method"] + [f"n={n}" for n in ns], rows))
    print("\nSeconds per call (the best of 3; normal returns). 163,840 episodes: the round the engine work of")
    print("issue 48 timed (the percentile bootstrap took 2.4 s there, on an H200's host).\n")
    timed_ns = (10, 1_000) if quick else MEAN_TIMED_NS
    print(table(["method"] + [f"n = {n:,}" for n in timed_ns], mean_timing(timed_ns)))


# ------------------------------------------------------------------------------- the skew guard (issue 46)

GUARD_NS = (10, 16, 30)
GUARD_CELLS = 20  # the family


def one_sided_falls(rng: np.random.Generator, shape: tuple) -> tuple[np.ndarray, np.ndarray]:
    """The issue's cell: A returns ~3000 and falls to ~200 one episode in ten, B returns ~2720 and never falls (equal
    means; each return's noise N(0, 50)). Returns lie in [0, 4000], the bounds declared where they are."""
    a = np.where(rng.random(shape) < 0.1, 200.0, 3000.0) + rng.normal(0.0, 50.0, shape)
    return np.clip(a, 0.0, 4000.0), 2720.0 + rng.normal(0.0, 50.0, shape)  # a 4-sd fall below 0 is cut at 0


def guard_cost(reps: int, seed: int, ns: Sequence[int]) -> list[list[str]]:
    """The share of the t verdicts the guard withholds (``skewed: declare bounds``) at an effect of 0.5 sd, one cell
    at 95%: fixed-n t at each n, and the anytime t-mixture sequence looking every 4 episodes up to the largest n."""
    from simeval.stats import SKEWED

    rows = []
    for label, sc in (("normal", NORMAL), ("t(3)", T3)):
        row = [label]
        rng = rng_for(seed, "guard cost", label)
        for n in ns:
            d = sc.draw(rng, (reps, n)) + 0.5 * sc.sd
            decided = withheld = 0
            for x in d:
                p = paired(np.zeros(n), x)
                unguarded = verdict_of(p.diff.low, p.diff.high)
                decided += unguarded != "inconclusive"
                withheld += unguarded != "inconclusive" and p.reason == SKEWED
            row.append(f"{withheld / max(decided, 1):.3f} of {decided}")
        n_max = max(ns)
        d = sc.draw(rng, (reps, n_max)) + 0.5 * sc.sd
        decided = withheld = 0
        for x in d:
            seq = SequentialPaired(plan_n=4)
            ever, ever_guarded = False, False
            for i in range(0, n_max, 4):
                seq.update(np.zeros(len(x[i : i + 4])), x[i : i + 4])
                ever |= verdict_of(seq.low, seq.high) != "inconclusive"
                ever_guarded |= seq.verdict != "inconclusive"
            decided += ever
            withheld += ever and not ever_guarded
        row.append(f"{withheld / max(decided, 1):.3f} of {decided}")
        rows.append(row)
    return rows


def guard_false_verdicts(reps: int, seed: int, ns: Sequence[int]) -> list[list[str]]:
    """Families of 20 one-sided-falls cells (no real difference): the share of families with a false verdict and of
    cells with one, per method, without the guard (the interval's reading), with it, and under declared bounds."""
    confidence = family_confidence(0.05, GUARD_CELLS)
    methods = ("t", "t-mixture, peeking", "group-sequential", "betting (bounds)")
    rows = []
    for n in ns:
        rng = rng_for(seed, "guard falls", n)
        families = {k: np.zeros(2) for k in methods}
        cells = {k: np.zeros(2) for k in methods}
        no_fall = 0
        plan = LookPlan("until-decided", 0.05, GUARD_CELLS, 2, n, design="planned")
        for _ in range(reps):
            a, b = one_sided_falls(rng, (GUARD_CELLS, n))
            no_fall += int(np.sum(np.all(a > 1000.0, axis=1)))
            found = {k: np.zeros((GUARD_CELLS, 2), dtype=bool) for k in methods}
            for j in range(GUARD_CELLS):
                p = paired(a[j], b[j], confidence=confidence)
                found["t"][j] = verdict_of(p.diff.low, p.diff.high) != "inconclusive", p.verdict != "inconclusive"
                for key, seq in (
                    ("t-mixture, peeking", SequentialPaired(confidence, plan_n=4)),
                    ("group-sequential", plan.paired(None, "cell")),
                ):
                    for i in range(0, n, 2):
                        seq.update(a[j, i : i + 2], b[j, i : i + 2])
                        found[key][j, 0] |= verdict_of(seq.low, seq.high) != "inconclusive"
                        found[key][j, 1] |= seq.verdict != "inconclusive"
                bet = paired(a[j], b[j], confidence=confidence, bounds=(0.0, 4000.0))
                found["betting (bounds)"][j] = bet.verdict != "inconclusive"
            for key in methods:
                families[key] += found[key].any(axis=0)
                cells[key] += found[key].mean(axis=0)
        for key in methods:
            fam, cell = families[key] / reps, cells[key] / reps
            bad = key == "betting (bounds)" and fam[1] > 0.05 + 2 * se(0.05, reps)
            rows.append(
                [f"n={n}", key, rate(fam[0], reps), rate(fam[1], reps, bad), f"{cell[0]:.3f}", f"{cell[1]:.3f}",
                 f"{no_fall / (reps * GUARD_CELLS):.3f} ({0.9**n:.3f})"]
            )  # fmt: skip
    return rows


def guard_section(reps: int, seed: int, quick: bool) -> None:
    """Print the skew guard's study: its cost on symmetric data, the false verdicts it leaves on skewed data."""
    ns = (10, 30) if quick else GUARD_NS
    print("\n### The skew guard: a fall observed withholds the verdict of a method that assumes near-symmetry\n")
    print("Share of the t verdicts withheld (`skewed: declare bounds`) at an effect of 0.5 sd, one cell at 95%:")
    print(f"fixed-n t at each n; the anytime t-mixture sequence looking every 4 episodes up to n={max(ns)}.")
    print("Target: <= 0.02 on normal data, <= 0.10 on t(3).\n")
    head = ["data (B - A)"] + [f"t, n={n}" for n in ns] + [f"t-mixture, n<={max(ns)}"]
    print(table(head, guard_cost(reps, seed, ns)))
    cells = GUARD_CELLS
    print(f"\nFamilies of {cells} cells of one-sided falls (A ~3000 falls to ~200 one episode in ten, B ~2720 never")
    print("falls; equal means), each cell at 1 - 0.05/20: the share of families with any false verdict, without the")
    print("guard (the interval's own reading) and with it, then the same per cell; the anytime and planned")
    print("sequences look every 2 episodes. Target with bounds: families <= 0.05.")
    print("Betting: bounds [0, 4000] declared (never guarded). The last column: the share of cells in which no fall")
    print("was observed (0.9^n): there the differences look like a real effect, and no method can tell.\n")
    head = ["n", "method", "families: without guard", "with guard", "cells: without", "with", "cells with no fall"]
    print(table(head, guard_false_verdicts(reps, seed, ns)))


if __name__ == "__main__":
    main()
