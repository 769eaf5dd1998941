"""The simulator seam: what a simulator declares so that simeval can check, refuse and build its tasks.

A simulator is one class here and one registration (a built-in in
:mod:`simeval.envs.simulators`, or a third party's ``simeval.simulators`` entry point).
Its module stays light: it names its tasks and capabilities without importing the
simulator, and imports the code that builds an env only in :meth:`Simulator.make`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from torchrl.envs import TransformedEnv

    from simeval.conditions import Condition


@dataclass(frozen=True)
class EnvRequest:
    """What :func:`simeval.envs.make_env` was asked for, handed to :meth:`Simulator.make`.

    ``options`` holds the settings only some simulators read (``render``, ``num_threads``,
    ``groups``, ``exact_contact_forces``); a simulator ignores those it has no use for, as
    :func:`~simeval.envs.make_env` documents.
    """

    name: str
    num_envs: int
    device: str | None
    seed: int | None
    max_steps: int | None
    obs_norm: bool
    condition: Condition
    cfg_overrides: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)


class Simulator(ABC):
    """A simulator simeval builds batched envs with.

    Attributes:
        name: its name in records and messages, and, for a simulator of gymnasium ids, the
            value of ``make_env(backend=...)`` and ``--env-backend`` that picks it.
        title: how messages name it ("native MuJoCo", "Isaac Lab").
        prefix: its env ids are ``"<prefix>:<task>"``; ``None`` for a simulator of
            gymnasium ids, picked by ``backend`` or by :meth:`default_for`.
        capabilities: the condition kinds it applies (keys of :data:`simeval.conditions.KINDS`).
        fallback: a simulator of gymnasium ids that builds any id no other one claims by
            default (gymnasium itself).
    """

    name: ClassVar[str]
    title: ClassVar[str]
    prefix: ClassVar[str | None] = None
    capabilities: ClassVar[frozenset[str]] = frozenset({"observation", "action"})
    fallback: ClassVar[bool] = False

    def tasks(self) -> tuple[str, ...]:
        """The ids it runs, for messages; ``()`` where any id its :meth:`check` accepts may run."""
        return ()

    def runs(self, name: str) -> bool:
        """Whether ``name`` is one of its ids, by the name alone (nothing imported)."""
        if self.prefix is not None:
            return name.startswith(self.prefix + ":")
        return not self.tasks() or name in self.tasks()

    def default_for(self, name: str) -> bool:
        """A simulator of gymnasium ids: whether it builds ``name`` when no backend is asked for."""
        return False

    def check(self, name: str) -> None:
        """Installed and ``name`` registered, before any worker starts; a one-line ValueError otherwise.

        May import the simulator (never before an Isaac Lab worker's ``init_fn``: the
        launcher calls it in its own process).
        """
        return None

    def task_config(self, name: str) -> Any | None:
        """The task's env config built without its env (what ``cfg`` overrides are checked against); else None."""
        return None

    def refusal(self, name: str, kind: str, settings: tuple[str, ...]) -> str | None:
        """This simulator's own one-line advice for a condition ``kind`` it cannot apply; None: the registry's."""
        return None

    @abstractmethod
    def make(self, request: EnvRequest) -> TransformedEnv:
        """The batched env of ``request`` with simeval's transform layout (:mod:`simeval.envs.layout`)."""

    def __repr__(self) -> str:
        return f"<simulator {self.name}>"
