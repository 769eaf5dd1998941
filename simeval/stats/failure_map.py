"""Where a policy fails: an adaptive search of one or two condition axes for the regions of failure probability >= P.

A condition parameter (``body_mass_scale`` over 0.5..3.0, optionally a second axis) is a range to
search. An episode fails when its return is below a threshold, or when it is not a success: the
launcher says which. The *failure region* is where the probability of failure is at least
``failure_rate`` (P). The search runs *rounds*: a round is ``round_episodes`` episodes on one
region (a box of the axes), each episode's searched values drawn uniformly within that box from
the episode's own seed. A region's estimand is its **mean failure probability under uniform
draws within it**, ``p(R) = (1 / |R|) * integral over R of p(x) dx``; every region carries an
anytime-valid confidence sequence for it (the betting CS of
:class:`simeval.stats.sequential.SequentialMean`, bounds (0, 1)), and a class: ``pass`` (its
upper end below P), ``fail`` (its lower end at or above P) or ``uncertain``.

How regions are placed (:class:`FailureMap`). The regions form a dyadic tree: the initial grid
has ``initial_cells`` cells per axis (depth 0); a cell of depth ``k`` halves every axis not yet
at its resolution into a child of depth ``k + 1`` (2 children on one axis, 4 on two). A leaf
splits when

* it is ``uncertain``, has ``split_after`` episodes or more, and its estimate is nearer P than a
  quarter of the way to its interval's end beyond P (an interval narrowing as ``1 / sqrt(n)``
  would need some 16 times its episodes to decide it: the crossing is likely inside it; a
  region whose estimate is far from P keeps sampling until it is decided), or it reached
  ``max_region_episodes`` undecided, or
* it is decided and borders (shares a face with) a leaf of the other class or an ``uncertain``
  leaf that can no longer change (at the resolution, at the cap or futile): the crossing may lie just
  inside it, and the map is refined on both sides of it down to the resolution. A decided
  leaf with neighbours of its own class (or still-sampling ones) is not refined.

Leaves at the resolution are not split; an ``uncertain`` one samples until ``max_region_episodes``,
or until more episodes could not decide it (*futile*: after two rounds, its estimate lies nearer P
than the half-width its interval would have at the cap, narrowing as ``1 / sqrt(n)``), and then stays
``uncertain``. So episodes go to the cells around the
crossing (level-set estimation: Gotovos et al. 2013; the thresholding bandit: Locatelli,
Gutzeit & Carpentier 2016; probabilistic bisection: Horstein 1963, Waeber, Frazier & Henderson
2013), and a region far from P is decided once, at the coarsest depth that shows it.

Reuse. A parent's episodes whose drawn values fall in a child are uniform draws within that
child (a uniform draw in a box, given that it lands in a sub-box, is uniform in the sub-box),
so they open the child's stream, in the order they were observed; the child's own rounds
follow.

Why every interval holds, whatever the splitting rule decides. Fix a region ``C`` the tree could
create. Every episode that ever lands in ``C`` (from a round on ``C`` or on any ancestor, at any
time) has its values uniform in ``C`` and fails with probability ``p(C)``, independently of
everything observed before it: its values and outcome come from its own seed, and which region
its round was run on, and when, was decided from earlier episodes only. So ``C``'s stream, in
observation order, has conditional mean ``p(C)`` given the whole past at every step, and the
betting CS's capital for the true mean is a nonnegative martingale with respect to that past
(Waudby-Smith & Ramdas 2024, JRSS-B): by Ville's inequality its interval excludes ``p(C)`` at
*some* number of episodes with probability at most ``C``'s error level. Sampling a region or not,
splitting it or not, stopping it: all are decisions from the past (optional sampling and
stopping), which the martingale argument allows; reading the running intersection at any look
is covered by the "some number of episodes" of the event.

The family-wise error. ``alpha = 1 - confidence`` is split over **every** region the tree could
ever create, not the ones it does: half of it (:data:`FINEST_SHARE`) to the finest depth ``D``
(the one the resolutions allow), the other half evenly over the coarser depths (all of it where
``D`` is 0), each depth's share divided evenly among its ``N_k`` cells
(:meth:`FailureMap.alpha_split`). The error levels of all possible regions sum to ``alpha``, so
with probability at least ``confidence`` every interval of every region created holds at every
look, whatever the adaptive path: no region is ever classed ``pass`` with mean >= P nor ``fail``
with mean < P.

The boundary (one axis, :meth:`FailureMap.boundary`) **assumes that the failure probability is
monotone along the axis**. If it increases, with the crossing ``x* = inf {x : p(x) >= P}``: a
``pass`` region ``[a, b]`` (mean < P) puts ``x*`` above ``a`` (were ``x* < a``, ``p >= P`` on all
of ``(a, b]`` and the mean with it), and a ``fail`` region ``[c, d]`` puts ``x*`` below ``d``; so
``x*`` lies in ``[max a over pass, min d over fail]`` whenever every interval holds, with
probability at least ``confidence`` (the mirror, ``[max c over fail, min b over pass]``, for a
decreasing response; the direction is the one the decided regions fit). Every decided region
counts, refined ones too. A non-monotone response shows as several ``fail`` regions separated by
``pass`` ones (or the reverse), which fit neither direction: the boundary is then refused, with
the reason. One whose second failure region was never found (a pocket, below) is not detected.

Limits. A region's class is about its mean: a small pocket of failure inside a region whose
mean stays below P is classed ``pass`` with it and is not split out. The map finds the
regions whose mean crosses P at some depth of the tree.

:class:`UniformGrid` is the non-adaptive peer: the same sequences on the grid of the finest
cells, ``alpha`` split evenly over them, each cell sampled round by round until decided, at
the cap or futile (the same rule). Both are deterministic functions of the observations in the
order given, so a resumed run that replays its results lines through ``observe`` rebuilds the
same map.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from simeval.stats.sequential import SequentialMean

CLASSES = ("pass", "fail", "uncertain")
FINISHED = ("every region decided", "resolution reached")
MAX_CELLS = 1 << 20  # finest cells per axis: beyond, each cell's share of alpha is uselessly small
# An uncertain region splits when its estimate is nearer P than 1 / SPLIT_REACH of the way to its interval's end beyond
# P: an interval narrowing as 1 / sqrt(n) would need about SPLIT_REACH^2 times its episodes to decide it.
SPLIT_REACH = 4
FINEST_SHARE = 0.5
"""The finest depth's share of alpha (the coarser depths split the rest): the finest cells are where the regions near
P end, sampled the most; a coarse cell decides a region far from P, where a smaller level costs a round or two."""
_ROUNDING = 1e-9  # a width this close to the resolution (relatively) is at it: floats of (high - low) / cells

Key = tuple[int, ...]


@dataclass(frozen=True)
class SearchAxis:
    """One searched condition: its name, its range ``[low, high]`` and the widest a region may be at the finest
    depth (``resolution``).

    Attributes:
        name: the condition's name (the key of every episode's values).
        low: the range's lower end (finite).
        high: the range's upper end (finite, above ``low``).
        resolution: the finest cells' width is at most this, in the axis's units (``0 < resolution <= high - low``).
    """

    name: str
    low: float
    high: float
    resolution: float

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"SearchAxis name must be a non-empty string, got {self.name!r}.")
        for field in ("low", "high", "resolution"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
                raise ValueError(f"SearchAxis {self.name}: {field} must be a finite number, got {value!r}.")
            object.__setattr__(self, field, float(value))
        if not self.low < self.high:
            raise ValueError(f"SearchAxis {self.name}: low must be below high, got [{self.low}, {self.high}].")
        if not 0 < self.resolution <= self.high - self.low:
            raise ValueError(
                f"SearchAxis {self.name}: resolution must be in (0, high - low = {self.high - self.low:g}], "
                f"got {self.resolution!r}."
            )

    def depth(self, initial_cells: int) -> int:
        """The splits below an initial grid of ``initial_cells`` cells until a cell is at most ``resolution`` wide."""
        if isinstance(initial_cells, bool) or not isinstance(initial_cells, numbers.Integral) or initial_cells < 1:
            raise ValueError(f"initial_cells must be a whole number >= 1, got {initial_cells!r}.")
        k, width = 0, self.high - self.low
        while width / (initial_cells << k) > self.resolution * (1 + _ROUNDING):
            k += 1
        return k


@dataclass(frozen=True)
class Level:
    """One depth of the tree and its share of alpha: ``cells`` possible regions (``per_axis`` along each axis),
    each of width ``widths`` and error level ``alpha_each``."""

    depth: int
    per_axis: tuple[int, ...]
    widths: tuple[float, ...]
    alpha_each: float

    @property
    def cells(self) -> int:
        """The regions of this depth the tree could create."""
        return math.prod(self.per_axis)

    @property
    def alpha(self) -> float:
        """The depth's share of alpha: ``cells * alpha_each``."""
        return self.cells * self.alpha_each


@dataclass(frozen=True)
class Region:
    """One region of a map, as a report shows it.

    Attributes:
        key: ``(depth, i)`` or ``(depth, i, j)``: the cell's depth and its index along each axis at that depth.
        bounds: axis name -> ``(low, high)``.
        n: episodes in the region (its own rounds' and those reused from its ancestors).
        failures: how many of them failed.
        estimate: the failure rate ``failures / n`` (NaN before any episode).
        low: the anytime-valid interval's lower end for the region's mean failure probability.
        high: its upper end.
        klass: ``pass`` (``high < P``), ``fail`` (``low >= P``) or ``uncertain``.
    """

    key: Key
    bounds: dict[str, tuple[float, float]]
    n: int
    failures: int
    estimate: float
    low: float
    high: float
    klass: str

    def as_data(self) -> dict:
        """The region as plain data (JSON: NaN as None, the key as a list)."""
        return {
            "key": list(self.key),
            "bounds": {name: [lo, hi] for name, (lo, hi) in self.bounds.items()},
            "n": self.n,
            "failures": self.failures,
            "estimate": None if math.isnan(self.estimate) else self.estimate,
            "low": self.low,
            "high": self.high,
            "class": self.klass,
        }


@dataclass(frozen=True)
class Boundary:
    """The crossing point of a monotone response along one axis: ``x*`` lies in ``[low, high]`` (``direction``:
    whether failure increases or decreases along the axis), or ``low``/``high`` None and ``reason`` saying why
    there is none."""

    low: float | None
    high: float | None
    direction: str | None
    reason: str = ""

    @property
    def found(self) -> bool:
        """Whether the map gave an interval."""
        return self.low is not None

    def as_data(self) -> dict:
        """The boundary as plain data."""
        return {"low": self.low, "high": self.high, "direction": self.direction, "reason": self.reason}


class _Cell:
    """A region of the tree: its CS, its episodes while it is a leaf (for its children), its children once split."""

    __slots__ = ("key", "box", "seq", "episodes", "failures", "children")

    def __init__(self, key: Key, box: tuple[tuple[float, float], ...], alpha: float) -> None:
        self.key, self.box = key, box
        self.seq = SequentialMean(1.0 - alpha, bounds=(0.0, 1.0), name=f"region {key_text(key)}")
        self.episodes: list[tuple[tuple[float, ...], bool]] = []
        self.failures = 0
        self.children: tuple[Key, ...] = ()

    @property
    def depth(self) -> int:
        return self.key[0]

    @property
    def n(self) -> int:
        return self.seq.n

    def add(self, episodes: Sequence[tuple[tuple[float, ...], bool]]) -> None:
        if not episodes:
            return
        self.episodes.extend(episodes)
        outcomes = [1.0 if failed else 0.0 for _, failed in episodes]
        self.failures += int(sum(outcomes))
        self.seq.update(outcomes)

    def interval(self) -> tuple[float, float]:
        return max(0.0, self.seq.low), min(1.0, self.seq.high)

    def klass(self, level: float) -> str:
        low, high = self.interval()
        return "pass" if high < level else "fail" if low >= level else "uncertain"


def depth_shares(depths: int) -> list[float]:
    """Each depth's share of alpha: :data:`FINEST_SHARE` to the finest, the rest evenly over the coarser ones (all
    of it to a tree of one depth, the grid)."""
    if depths == 1:
        return [1.0]
    return [(1.0 - FINEST_SHARE) / (depths - 1)] * (depths - 1) + [FINEST_SHARE]


def key_text(key: Sequence[int]) -> str:
    """A region key as text: ``(2, 5, 3)`` -> ``"2:5:3"`` (depth, then the index along each axis)."""
    return ":".join(str(int(k)) for k in key)


class _Tree:
    """What the search and the grid share: the cells, their sequences, rounds and observations, the report."""

    def __init__(
        self,
        axes: Sequence[SearchAxis],
        failure_rate: float,
        confidence: float,
        round_episodes: int,
        max_region_episodes: int,
        per_axis: Sequence[tuple[int, ...]],
    ) -> None:
        self.axes = tuple(axes)
        self.failure_rate, self.confidence = float(failure_rate), float(confidence)
        self.alpha = 1.0 - self.confidence
        self.round_episodes, self.max_region_episodes = int(round_episodes), int(max_region_episodes)
        self._per_axis = tuple(tuple(p) for p in per_axis)
        shares = depth_shares(len(self._per_axis))
        self._levels = tuple(
            Level(
                k,
                cells,
                tuple((a.high - a.low) / c for a, c in zip(self.axes, cells, strict=True)),
                self.alpha * shares[k] / math.prod(cells),
            )
            for k, cells in enumerate(self._per_axis)
        )
        self._cells: dict[Key, _Cell] = {}
        for index in _indices(self._per_axis[0]):
            self._make((0, *index))

    # ----------------------------------------------------------------------------------------- the tree

    @property
    def depth(self) -> int:
        """The finest depth the resolutions allow (0 for the grid: its cells are the finest)."""
        return len(self._per_axis) - 1

    def alpha_split(self) -> tuple[Level, ...]:
        """Every depth's possible regions and the error level of each: the levels sum to ``alpha``."""
        return self._levels

    def _box(self, key: Key) -> tuple[tuple[float, float], ...]:
        depth, index = key[0], key[1:]
        box = []
        for axis, cells, i in zip(self.axes, self._per_axis[depth], index, strict=True):
            width = axis.high - axis.low
            box.append(
                (axis.low + width * i / cells, axis.high if i + 1 == cells else axis.low + width * (i + 1) / cells)
            )
        return tuple(box)

    def _make(self, key: Key) -> _Cell:
        cell = _Cell(key, self._box(key), self._levels[key[0]].alpha_each)
        self._cells[key] = cell
        return cell

    def _splittable(self, cell: _Cell) -> bool:
        return cell.depth < self.depth

    def _child_index(self, depth: int, index: tuple[int, ...]) -> list[tuple[int, ...]]:
        """The indices of the children (depth + 1) of a cell: each axis halved unless at its resolution."""
        options = []
        for a, i in enumerate(index):
            halved = self._per_axis[depth + 1][a] > self._per_axis[depth][a]
            options.append((2 * i, 2 * i + 1) if halved else (i,))
        return list(_product(options))

    def _parent(self, key: Key) -> Key:
        depth, index = key[0], key[1:]
        halved = [self._per_axis[depth][a] > self._per_axis[depth - 1][a] for a in range(len(index))]
        return (depth - 1, *(i // 2 if h else i for i, h in zip(index, halved, strict=True)))

    def _split(self, cell: _Cell) -> None:
        depth, index = cell.depth, cell.key[1:]
        children = [self._make((depth + 1, *child)) for child in self._child_index(depth, index)]
        cell.children = tuple(c.key for c in children)
        for child, episodes in zip(children, self._route(cell, cell.episodes), strict=True):
            child.add(episodes)
        cell.episodes = []  # the children hold them now

    def _route(self, cell: _Cell, episodes: Iterable[tuple[tuple[float, ...], bool]]) -> list[list]:
        """``episodes`` (inside ``cell``) split among its children by where their values lie (a value on a
        midpoint goes above it), each child's in the order given."""
        kids = {self._cells[c].key[1:]: at for at, c in enumerate(cell.children)}
        halved = [self._per_axis[cell.depth + 1][a] > self._per_axis[cell.depth][a] for a in range(len(self.axes))]
        parts: list[list] = [[] for _ in cell.children]
        for episode in episodes:
            index = []
            for a, (v, i) in enumerate(zip(episode[0], cell.key[1:], strict=True)):
                if halved[a]:
                    middle = self._cells[cell.children[-1]].box[a][0]  # the last child is the upper half on each
                    index.append(2 * i + (v >= middle))
                else:
                    index.append(i)
            parts[kids[tuple(index)]].append(episode)
        return parts

    def _leaves(self) -> list[_Cell]:
        return [c for c in self._cells.values() if not c.children]

    def _leaf_holding(self, key: Key) -> _Cell | None:
        """The leaf that covers the (possibly not created) cell ``key``: the cell itself or its nearest created
        ancestor, when that is a leaf; None when the cell was split (its leaves are below it)."""
        while key not in self._cells:
            key = self._parent(key)
        cell = self._cells[key]
        return None if cell.children else cell

    def _face_leaves(self, cell: _Cell, axis: int, side: int) -> list[_Cell]:
        """The leaves across ``cell``'s face on ``axis`` (``side`` -1: below it, +1: above it)."""
        depth, index = cell.depth, list(cell.key[1:])
        index[axis] += side
        if not 0 <= index[axis] < self._per_axis[depth][axis]:
            return []
        key = (depth, *index)
        holder = self._leaf_holding(key)
        if holder is not None:
            return [holder]
        found, stack = [], [self._cells[key]]
        while stack:  # descend to the leaves of the neighbour that touch the shared face
            node = stack.pop()
            if not node.children:
                found.append(node)
                continue
            i = node.key[1 + axis]
            if self._per_axis[node.depth + 1][axis] > self._per_axis[node.depth][axis]:
                i = 2 * i + (side < 0)  # the lower half touches a face below it, the upper half one above
            stack.extend(self._cells[c] for c in node.children if c[1 + axis] == i)
        return found

    def _neighbours(self, cell: _Cell) -> list[_Cell]:
        return [n for axis in range(len(self.axes)) for side in (-1, 1) for n in self._face_leaves(cell, axis, side)]

    # ---------------------------------------------------------------------------------------- rounds

    def _settled(self, cell: _Cell) -> bool:
        """Whether a leaf samples no more: decided, or ``uncertain`` at the resolution and at the cap or futile."""
        return cell.klass(self.failure_rate) != "uncertain" or (
            not self._splittable(cell) and (cell.n >= self.max_region_episodes or self._futile(cell))
        )

    def _futile(self, cell: _Cell) -> bool:
        """Whether an ``uncertain`` leaf would still be undecided at the cap, were its estimate to stay: after two
        rounds, its estimate lies nearer P than the half-width its interval would have at the cap, narrowing as
        ``1 / sqrt(n)``. More episodes would then buy no class, only cost the cap."""
        if cell.n < 2 * self.round_episodes:
            return False
        low, high = cell.interval()
        at_cap = (high - low) / 2 * math.sqrt(cell.n / self.max_region_episodes)
        return abs(cell.failures / cell.n - self.failure_rate) < at_cap

    def _wants_round(self, cell: _Cell) -> bool:
        return not cell.children and not self._settled(cell)

    def next_regions(self, k: int, pending: Iterable[Sequence[int]] = ()) -> list[Key]:
        """Up to ``k`` region keys that want a round now, none of ``pending`` (rounds in flight): the least sampled
        first, then the estimate nearest P, then the key."""
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 0:
            raise ValueError(f"k must be a whole number >= 0, got {k!r}.")
        busy = {self._key(p, "pending") for p in pending}
        wanting = [c for c in self._leaves() if c.key not in busy and self._wants_round(c)]

        def order(c: _Cell) -> tuple:
            distance = abs(c.failures / c.n - self.failure_rate) if c.n else -1.0
            return (c.n, distance, c.key)

        return [c.key for c in sorted(wanting, key=order)[: int(k)]]

    def bounds(self, key: Sequence[int]) -> dict[str, tuple[float, float]]:
        """Axis name -> ``(low, high)`` of the region ``key``: where a round on it draws its episodes' values."""
        box = self._cells[self._key(key)].box
        return {axis.name: lohi for axis, lohi in zip(self.axes, box, strict=True)}

    def observe(self, key: Sequence[int], values: Sequence[Mapping[str, float]], failed: Sequence[bool]) -> None:
        """Take a round on region ``key``: each episode's drawn values (axis name -> value) and whether it failed,
        in seed order. A region split since its round began passes the episodes to its leaves (they are uniform
        draws within each). ValueError for an unknown key, a value outside the region, or a length mismatch."""
        cell = self._cells[self._key(key)]
        if isinstance(values, Mapping) or isinstance(failed, (str, bytes)):
            raise ValueError("observe: values and failed must be lists, one item per episode.")
        values, failed = list(values), list(failed)
        if len(values) != len(failed):
            raise ValueError(f"observe: {len(values)} episodes of values but {len(failed)} of failed.")
        episodes = [self._episode(cell, i, v, f) for i, (v, f) in enumerate(zip(values, failed, strict=True))]
        if not episodes:
            return
        touched = self._deliver(cell, episodes)
        self._settle(touched)

    def _deliver(self, cell: _Cell, episodes: list[tuple[tuple[float, ...], bool]]) -> list[_Cell]:
        """Give ``episodes`` (all inside ``cell``) to the leaves below ``cell``; the leaves that took some."""
        if not cell.children:
            cell.add(episodes)
            return [cell]
        touched = []
        for kid, part in zip(cell.children, self._route(cell, episodes), strict=True):
            if part:
                touched.extend(self._deliver(self._cells[kid], part))
        return touched

    def _settle(self, changed: list[_Cell]) -> None:
        """Split the leaves the rule says must split, starting from ``changed`` and their neighbours, until none
        does (in key order: deterministic)."""
        dirty = {c.key for c in changed}
        for c in changed:
            dirty.update(n.key for n in self._neighbours(c))
        while dirty:
            key = min(dirty)
            dirty.discard(key)
            cell = self._cells[key]
            if cell.children or not self._should_split(cell):
                continue
            self._split(cell)
            kids = [self._cells[k] for k in cell.children]
            dirty.update(k.key for k in kids)
            for kid in kids:
                dirty.update(n.key for n in self._neighbours(kid))

    def _should_split(self, cell: _Cell) -> bool:
        return False

    def _episode(
        self, cell: _Cell, i: int, values: Mapping[str, float], failed: bool
    ) -> tuple[tuple[float, ...], bool]:
        if not isinstance(values, Mapping):
            raise ValueError(f"observe: episode {i}'s values must be a mapping of axis name to value, got {values!r}.")
        if isinstance(failed, (bool, np.bool_)) or (
            isinstance(failed, (numbers.Integral, np.integer)) and failed in (0, 1)
        ):
            outcome = bool(failed)
        else:
            raise ValueError(f"observe: episode {i}'s failed must be True or False, got {failed!r}.")
        point = []
        for axis, (lo, hi) in zip(self.axes, cell.box, strict=True):
            if axis.name not in values:
                raise ValueError(f"observe: episode {i} has no value for {axis.name!r}.")
            v = values[axis.name]
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
                raise ValueError(f"observe: episode {i}'s {axis.name} must be a finite number, got {v!r}.")
            if not lo <= v <= hi:
                raise ValueError(
                    f"observe: episode {i}'s {axis.name} is {float(v)!r}, outside region {key_text(cell.key)} "
                    f"[{lo:g}, {hi:g}]."
                )
            point.append(float(v))
        return tuple(point), outcome

    def _key(self, key: Sequence[int], what: str = "key") -> Key:
        try:
            normal = tuple(int(k) for k in key)
            ok = all(int(k) == k for k in key)
        except (TypeError, ValueError):
            normal, ok = (), False
        if not ok or normal not in self._cells:
            raise ValueError(f"{what}: {key!r} is not a region of this map (a key from next_regions).")
        return normal

    # ---------------------------------------------------------------------------------------- reading

    @property
    def episodes(self) -> int:
        """Episodes observed in all (each lies in exactly one leaf)."""
        return sum(c.n for c in self._leaves())

    @property
    def finished(self) -> str | None:
        """Why no region wants a round (``every region decided``, or ``resolution reached``: the regions left
        ``uncertain`` are at the resolution and at ``max_region_episodes``), or None while some do. The budget
        is the caller's."""
        leaves = self._leaves()
        if any(self._wants_round(c) for c in leaves):
            return None
        if all(c.klass(self.failure_rate) != "uncertain" for c in leaves):
            return FINISHED[0]
        return FINISHED[1]

    def _region(self, cell: _Cell) -> Region:
        low, high = cell.interval()
        return Region(
            key=cell.key,
            bounds={axis.name: lohi for axis, lohi in zip(self.axes, cell.box, strict=True)},
            n=cell.n,
            failures=cell.failures,
            estimate=cell.failures / cell.n if cell.n else math.nan,
            low=low,
            high=high,
            klass=cell.klass(self.failure_rate),
        )

    def regions(self, include_split: bool = False) -> list[Region]:
        """The map: its leaves in order along the axes (first axis first); ``include_split`` adds the regions that
        were split (their state when they split: a decided one was refined, its statement still holds)."""
        cells = list(self._cells.values()) if include_split else self._leaves()
        ordered = sorted(cells, key=lambda c: (tuple(lo for lo, _ in c.box), c.depth))
        return [self._region(c) for c in ordered]

    def worst(self) -> Region | None:
        """The leaf with the highest estimate among the ``fail`` and ``uncertain`` ones (the first in key order
        among equals), or None when every leaf passes or none has an episode."""
        candidates = [r for r in self.regions() if r.klass != "pass" and r.n]
        if not candidates:
            return None
        return max(candidates, key=lambda r: (r.estimate, tuple(-k for k in r.key)))

    def boundary(self) -> Boundary:
        """The interval that holds the crossing point of a failure probability **monotone** along the one axis,
        with confidence ``confidence`` (the module says why), read from every decided region, refined ones too.
        Its ``reason`` says why there is none: no region decided on one side, or decided regions that no monotone
        response gives (several ``fail`` regions separated by a ``pass`` one, or the reverse)."""
        if len(self.axes) != 1:
            raise ValueError(f"boundary() needs a map of one axis; this one has {len(self.axes)}.")
        decided = [r for r in self.regions(include_split=True) if r.klass != "uncertain"]
        passes = [r.bounds[self.axes[0].name] for r in decided if r.klass == "pass"]
        fails = [r.bounds[self.axes[0].name] for r in decided if r.klass == "fail"]
        if not passes:
            return Boundary(None, None, None, "no region decided pass")
        if not fails:
            return Boundary(None, None, None, "no region decided fail")
        rising = (max(lo for lo, _ in passes), min(hi for _, hi in fails))  # x* above every pass region's start
        falling = (max(lo for lo, _ in fails), min(hi for _, hi in passes))  # x* below every pass region's end
        fits = [(d, lohi) for d, lohi in (("increasing", rising), ("decreasing", falling)) if lohi[0] < lohi[1]]
        if len(fits) == 1:
            direction, (low, high) = fits[0]
            return Boundary(low, high, direction)
        if fits:
            return Boundary(None, None, None, "the decided regions fit either direction")
        return Boundary(None, None, None, "not monotone: pass and fail regions alternate along the axis")

    def as_data(self) -> dict:
        """The map as plain data for a results line: the settings, the leaves, why it finished, the worst leaf's key
        (:meth:`worst`; None where there is none), and (one axis) the boundary."""
        worst = self.worst()
        data = {
            "axes": [{"name": a.name, "low": a.low, "high": a.high, "resolution": a.resolution} for a in self.axes],
            "failure_rate": self.failure_rate,
            "confidence": self.confidence,
            "episodes": self.episodes,
            "finished": self.finished,
            "regions": [r.as_data() for r in self.regions()],
            "worst": None if worst is None else list(worst.key),
        }
        if len(self.axes) == 1:
            data["boundary"] = self.boundary().as_data()
        return data


class FailureMap(_Tree):
    """The adaptive search for the failure region of one or two condition axes (the module says how and why).

    Drive it round by round: :meth:`next_regions` names the regions that want a round, the caller runs
    ``round_episodes`` episodes on each (values uniform within :meth:`bounds`, from each episode's seed) and
    gives them back with :meth:`observe`, until :attr:`finished` or the budget. Read :meth:`regions`,
    :meth:`worst`, :meth:`boundary` (one axis), :meth:`as_data`.

    Args:
        axes: one or two :class:`SearchAxis`, distinct names.
        failure_rate: P, in (0, 1): the failure region is where the probability of failure is >= P.
        confidence: the probability, in (0, 1), that no region is ever wrongly classed ``pass`` or ``fail``
            (family-wise over every region and every look).
        round_episodes: episodes per round.
        initial_cells: cells per axis of the initial grid (depth 0).
        max_region_episodes: the cap: an ``uncertain`` region at the resolution stops sampling at this many
            episodes (a round may pass it by less than a round), or before, once futile (the module says when).
        split_after: the episodes an ``uncertain`` region wider than the resolution needs before it may split
            (default: one round; the module says when it does).
    """

    def __init__(
        self,
        axes: Sequence[SearchAxis],
        failure_rate: float = 0.5,
        confidence: float = 0.95,
        round_episodes: int = 8,
        initial_cells: int = 4,
        max_region_episodes: int = 128,
        split_after: int | None = None,
    ) -> None:
        axes = _check(axes, failure_rate, confidence, round_episodes, max_region_episodes, initial_cells)
        split = int(round_episodes) if split_after is None else split_after
        if isinstance(split, bool) or not isinstance(split, numbers.Integral) or not 1 <= split <= max_region_episodes:
            raise ValueError(f"split_after must be a whole number in [1, max_region_episodes], got {split_after!r}.")
        self.initial_cells, self.split_after = int(initial_cells), int(split)
        depths = [a.depth(self.initial_cells) for a in axes]
        per_axis = [tuple(self.initial_cells << min(k, d) for d in depths) for k in range(max(depths) + 1)]
        super().__init__(axes, failure_rate, confidence, round_episodes, max_region_episodes, per_axis)

    def _should_split(self, cell: _Cell) -> bool:
        if not self._splittable(cell):
            return False
        mine = cell.klass(self.failure_rate)
        if mine == "uncertain":
            if cell.n >= self.max_region_episodes:
                return True
            if cell.n < self.split_after:
                return False
            estimate, (low, high) = cell.failures / cell.n, cell.interval()
            reach = high - estimate if estimate < self.failure_rate else estimate - low
            return SPLIT_REACH * abs(estimate - self.failure_rate) < reach
        return any(n.klass(self.failure_rate) != mine and self._settled(n) for n in self._neighbours(cell))


class UniformGrid(_Tree):
    """The non-adaptive peer of :class:`FailureMap`: the finest cells of the same resolution (``initial_cells``
    per axis, halved until at most ``resolution`` wide), ``alpha`` split evenly over them, each sampled round by
    round until decided or at ``max_region_episodes``. Keys are ``(0, i)`` / ``(0, i, j)``; the same methods."""

    def __init__(
        self,
        axes: Sequence[SearchAxis],
        failure_rate: float = 0.5,
        confidence: float = 0.95,
        round_episodes: int = 8,
        initial_cells: int = 4,
        max_region_episodes: int = 128,
    ) -> None:
        axes = _check(axes, failure_rate, confidence, round_episodes, max_region_episodes, initial_cells)
        finest = tuple(int(initial_cells) << a.depth(int(initial_cells)) for a in axes)
        super().__init__(axes, failure_rate, confidence, round_episodes, max_region_episodes, [finest])


def _check(
    axes: Sequence[SearchAxis],
    failure_rate: float,
    confidence: float,
    round_episodes: int,
    max_region_episodes: int,
    initial_cells: int,
) -> tuple[SearchAxis, ...]:
    """The constructor's arguments checked, one line each; the axes as a tuple."""
    if isinstance(axes, SearchAxis):
        axes = (axes,)
    axes = tuple(axes)
    if not 1 <= len(axes) <= 2 or not all(isinstance(a, SearchAxis) for a in axes):
        raise ValueError(f"axes must be one or two SearchAxis, got {axes!r}.")
    if len({a.name for a in axes}) != len(axes):
        raise ValueError(f"axes must have distinct names, got {[a.name for a in axes]}.")
    for name, value in (("failure_rate", failure_rate), ("confidence", confidence)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value < 1:
            raise ValueError(f"{name} must be in (0, 1), got {value!r}.")
    for name, value, least in (
        ("round_episodes", round_episodes, 1),
        ("initial_cells", initial_cells, 1),
        ("max_region_episodes", max_region_episodes, round_episodes),
    ):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
            raise ValueError(f"{name} must be a whole number >= {least}, got {value!r}.")
    for a in axes:
        cells = int(initial_cells) << a.depth(int(initial_cells))
        if cells > MAX_CELLS:
            raise ValueError(
                f"SearchAxis {a.name}: resolution {a.resolution:g} needs {cells} cells, more than {MAX_CELLS}."
            )
    return axes


def _indices(per_axis: tuple[int, ...]) -> list[tuple[int, ...]]:
    return list(_product([tuple(range(c)) for c in per_axis]))


def _product(options: Sequence[Sequence[int]]) -> Iterable[tuple[int, ...]]:
    out: list[tuple[int, ...]] = [()]
    for choice in options:
        out = [prefix + (c,) for prefix in out for c in choice]
    return out
