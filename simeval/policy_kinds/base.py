"""The policy seam: what a kind of policy declares so that the worker can run it.

A policy is called on observations and answers actions. How those calls map onto env
steps is its :class:`Acting`: how many past observations of its sub-env it reads in one
call (observation history) and how many actions it answers (an action chunk, played one
per step). A :class:`PolicyKind` says which policies are its own and what they declare;
the worker then runs them through :class:`~simeval.policy_kinds.acting.ActingPolicy`,
which keeps each sub-env's history and chunk and clears them when its episode restarts.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(frozen=True)
class Acting:
    """How a policy's calls map onto env steps.

    Attributes:
        history: observations per call: the policy reads its sub-env's last ``history``
            observations stacked on a new second-to-last dimension (``[B, history, obs_dim]``);
            at an episode's start the first observation fills every slot. 1: ``[B, obs_dim]``.
        chunk: actions per call: the policy answers ``[B, chunk, act_dim]``, played one per
            step. 1: ``[B, act_dim]``.
        execute: of a chunk, how many actions are played before the policy is called again
            (``None``: all of them). An episode's restart always calls it again.
    """

    history: int = 1
    chunk: int = 1
    execute: int | None = None

    def __post_init__(self) -> None:
        for name in ("history", "chunk"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Acting.{name} must be a whole number >= 1, got {value!r}.")
        if self.execute is not None and (
            not isinstance(self.execute, int) or isinstance(self.execute, bool) or not 1 <= self.execute <= self.chunk
        ):
            raise ValueError(f"Acting.execute must be a whole number in [1, chunk={self.chunk}], got {self.execute!r}.")

    @property
    def plain(self) -> bool:
        """One observation in, one action out: the policy is called as it is, every step."""
        return self.history == 1 and self.chunk == 1

    @property
    def steps_per_call(self) -> int:
        """Actions played from one chunk before the next call."""
        return self.execute or self.chunk


PLAIN = Acting()
ACTING_ATTR = "simeval_acting"  # where declare() puts a policy's Acting


class PolicyKind(ABC):
    """A kind of policy the worker runs (a torch module in its process; later, a remote server).

    Attributes:
        name: its name in messages and the registry.
        title: how messages name it.
    """

    name: ClassVar[str]
    title: ClassVar[str]

    @abstractmethod
    def owns(self, policy: Any) -> bool:
        """Whether ``policy`` (what a policy factory built, or the Evaluator was given) is of this kind."""

    def acting(self, policy: Any) -> Acting:
        """How ``policy``'s calls map onto env steps: what it declares (:func:`~simeval.policy_kinds.declare`)."""
        declared = getattr(policy, ACTING_ATTR, None)
        if declared is None:
            return PLAIN
        if not isinstance(declared, Acting):
            raise ValueError(f"{type(policy).__name__}.{ACTING_ATTR} must be an Acting, got {declared!r}.")
        return declared

    def __repr__(self) -> str:
        return f"<policy kind {self.name}>"
