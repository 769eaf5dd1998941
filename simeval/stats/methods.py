"""The interval methods, by the name a results line (``ci_method``) and a comparison's ``method`` record.

One registry that the report (its legend and JSON) and the launcher's strategies share: a method's
one-line description, and whether its coverage rests on the values being near-symmetric (a method
that does withholds its verdict where the data show a fall: :data:`SKEWED`).
"""

from __future__ import annotations

from dataclasses import dataclass

from simeval.metrics import PERCENTILE_METHOD, T_METHOD
from simeval.stats.verdicts import SKEWED  # noqa: F401 - the reason a symmetric method withholds with


@dataclass(frozen=True)
class Method:
    """One way of computing an interval.

    Attributes:
        name: the name results lines and comparisons record.
        description: one line for people (the report's legend).
        assumes_symmetry: whether its coverage rests on near-symmetric values (t based: fixed-n t,
            the t-mixture sequence, the group-sequential design's repeated t intervals); bounded
            methods (betting) and exact ones (McNemar) hold for any distribution.
        sequential: whether its intervals hold over looks (an adaptive run's), not at one n only.
    """

    name: str
    description: str
    assumes_symmetry: bool
    sequential: bool = False


_ALL = (
    Method(T_METHOD, "Student's t-interval on the paired differences", True),
    Method("betting", "betting interval under the declared bounds (finite-sample)", False),
    Method(
        "t-mixture CS",
        "the adaptive run's t-mixture confidence sequence, replayed over its looks",
        True,
        sequential=True,
    ),
    Method(
        "betting CS",
        "the adaptive run's betting confidence sequence (declared bounds), replayed over its looks",
        False,
        sequential=True,
    ),
    Method(
        "group-sequential",
        "the adaptive run's planned looks: a group-sequential design's repeated intervals "
        "(O'Brien-Fleming-type spending), replayed over its looks",
        True,
        sequential=True,
    ),
    Method("mcnemar", "McNemar's exact test on success: the share of discordant episodes B won", False),
    Method(PERCENTILE_METHOD, "percentile bootstrap of one checkpoint's mean", False),
    Method("stratified bootstrap", "rliable's stratified percentile bootstrap across tasks", False),
)
METHODS: dict[str, Method] = {m.name: m for m in _ALL}


def method(name: str) -> Method:
    """The registered method called ``name``; ValueError naming the known ones when there is none."""
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown interval method {name!r}: one of {', '.join(METHODS)}.") from None


def descriptions(names: tuple[str, ...] | list[str] | None = None) -> dict[str, str]:
    """Method name -> its one-line description, for ``names`` (every registered method when None), in order."""
    return {m.name: m.description for m in _ALL if names is None or m.name in names}
