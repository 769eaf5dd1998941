"""The kinds of policies simeval runs, found through one registry.

Built in: the in-process module (:class:`~simeval.policy_kinds.module.ModulePolicy`),
which also runs exported ONNX graphs (their reader wraps onnxruntime in a module), and the
remote policy server's client (:class:`~simeval.policy_kinds.remote.RemotePolicy`). A third
party adds a kind (a remote policy server, say) by a :class:`PolicyKind` subclass and an
entry point in the group ``simeval.policy_kinds`` (see the docs' "Adding a policy kind").
What a policy declares (:class:`Acting`: observation history, action chunks) is run by
the worker through :class:`~simeval.policy_kinds.acting.ActingPolicy`.
"""

from __future__ import annotations

import functools
from typing import Any

from simeval.plugins import plugins
from simeval.policy_kinds.base import ACTING_ATTR, PLAIN, Acting, PolicyKind
from simeval.policy_kinds.module import ModulePolicy
from simeval.policy_kinds.remote import RemotePolicy

__all__ = [
    "ENTRY_POINT_GROUP",
    "PLAIN",
    "Acting",
    "PolicyKind",
    "acting_of",
    "declare",
    "kind_of",
    "registered",
]

ENTRY_POINT_GROUP = "simeval.policy_kinds"
FALLBACK = ModulePolicy()
BUILT_IN: tuple[PolicyKind, ...] = (RemotePolicy(),)  # asked after installed kinds, before the module kind


@functools.cache
def registered() -> tuple[PolicyKind, ...]:
    """Every kind, asked in order: installed packages' ``simeval.policy_kinds`` entry points, the built-in kinds
    (the remote client), then the module kind.

    An entry point names a :class:`PolicyKind` subclass (or instance); one that does not
    load, is not one, or takes a name already taken is a one-line ValueError naming it.
    """
    found: list[PolicyKind] = []
    for where, kind in plugins(ENTRY_POINT_GROUP, PolicyKind):
        if kind.name in {k.name for k in (*found, *BUILT_IN, FALLBACK)}:
            raise ValueError(f"{where}: the policy kind name {kind.name!r} is taken.")
        found.append(kind)
    return (*found, *BUILT_IN, FALLBACK)


def kind_of(policy: Any) -> PolicyKind:
    """The kind of ``policy``: the first registered kind that owns it (the module kind owns any callable)."""
    for kind in registered():
        if kind.owns(policy):
            return kind
    raise ValueError(f"no policy kind runs {type(policy).__name__}: a policy is a callable on TensorDicts.")


def acting_of(policy: Any) -> Acting:
    """How ``policy``'s calls map onto env steps, as its kind reads it."""
    return kind_of(policy).acting(policy)


def declare(policy: Any, acting: Acting | None = None, **fields: int | None) -> Any:
    """Declare how ``policy``'s calls map onto env steps; returns ``policy``.

    ``declare(policy, history=2)`` reads its sub-env's last 2 observations per call;
    ``declare(policy, chunk=8, execute=4)`` answers 8 actions per call, of which 4 are
    played before the next call. A policy factory declares on what it builds, so
    checkpoints naming it evaluate the same way.
    """
    declared = acting if acting is not None else Acting(**fields)
    if acting is not None and fields:
        raise ValueError("declare() takes an Acting or its fields, not both.")
    object.__setattr__(policy, ACTING_ATTR, declared)
    return policy
