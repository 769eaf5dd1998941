"""The simulator seam: what a simulator declares so that simeval can check, refuse, build and run its tasks.

A simulator is one class here and one registration (a built-in in
:mod:`simeval.envs.simulators`, or a third party's ``simeval.simulators`` entry point).
Its module stays light: it names its tasks and capabilities without importing the
simulator, and imports the code that builds an env only in :meth:`Simulator.make`.

The launcher side asks it what it runs and applies (:meth:`~Simulator.runs`,
:attr:`~Simulator.capabilities`, :meth:`~Simulator.check`); the worker side asks it, for an
env it built (:meth:`~Simulator.owns`), which round engine runs rounds
(:meth:`~Simulator.round_source`), where episodes end by themselves
(:meth:`~Simulator.episode_length`) and which per-step keys it reports
(:meth:`~Simulator.info_keys`); a replay asks it what re-running a recorded round gives back
(:meth:`~Simulator.replay_promise`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import numpy as np
    from torchrl.envs import EnvBase, TransformedEnv

    from simeval.condition_terms import ConditionTerm
    from simeval.conditions import Condition
    from simeval.envs.layout import PlainTransforms


@dataclass(frozen=True)
class EnvRequest:
    """What :func:`simeval.envs.make_env` was asked for, handed to :meth:`Simulator.make`.

    ``options`` holds the settings only some simulators read (``render``, ``num_threads``,
    ``groups``, ``exact_contact_forces``, ``cameras``, ``image_size``, ``frame_stack``); a
    simulator ignores those it has no use for, as :func:`~simeval.envs.make_env` documents
    (``cameras`` only reach a simulator whose :attr:`Simulator.cameras` says it has them).
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


@dataclass(frozen=True)
class DirectRound:
    """The direct round engine (:mod:`simeval.worker.direct_rollout`) on a grouped NumPy env.

    ``base`` keeps its sub-envs in ``groups`` (each with ``rows``, ``first``, ``size``,
    ``observe``, ``begin``, ``physics``) and has ``obs_dim``, ``finish_group``,
    ``reset_sims`` and ``action_rows``: the interface of the native MuJoCo env.
    """

    base: Any
    transforms: PlainTransforms


@dataclass(frozen=True)
class TensorRound:
    """The tensor round engine (:mod:`simeval.worker.tensor_rollout`) on a tensor-batched env.

    ``steps`` has ``running_return`` (whether the loop keeps RewardSum's float32 running sums),
    ``log_names``, ``start()`` (at each round's start, after the reset) and ``step(action)``
    returning (next observation, reward, terminated, truncated, log entries or None), with
    finished sub-envs already reset. ``vecnorm`` is the frozen VecNormV2 on "observation", or None.
    """

    steps: Any
    vecnorm: Any


@dataclass(frozen=True)
class ReplayPromise:
    """What re-running a recorded round gives back on a simulator (:meth:`Simulator.replay_promise`).

    A replay (``python -m simeval.launch --replay``) re-runs the round an episode was recorded in, in the
    recorded shape (its sub-envs and batch, seed and quotas), keeps the episode and drops the others.
    """

    exact: bool
    """Whether the replayed return equals the recorded one to the bit: a replay that differs is then an error."""
    text: str
    """One line, printed with the replay: what holds, and why."""


class Simulator(ABC):
    """A simulator simeval builds batched envs with.

    Attributes:
        name: its name in records and messages, and, for a simulator of gymnasium ids, the
            value of ``make_env(backend=...)`` and ``--env-backend`` that picks it.
        title: how messages name it ("native MuJoCo", "Isaac Lab").
        prefix: its env ids are ``"<prefix>:<task>"``; ``None`` for a simulator of
            gymnasium ids, picked by ``backend`` or by :meth:`default_for`.
        capabilities: the condition kinds it applies (keys of :data:`simeval.conditions.KINDS`).
        terms: the condition terms only it can apply (physics, the initial state, cameras: subclasses
            of the declarations in :mod:`simeval.condition_terms` with their ``apply``), each written into
            its sub-envs before their next reset through :meth:`term_setter`; a condition naming a term
            of such a kind that it does not list is refused, naming the simulators that list it.
        fallback: a simulator of gymnasium ids that builds any id no other one claims by
            default (gymnasium itself).
        init_fn: the ``--init-fn`` hook its worker processes need before torch is imported
            (``"module:function"``), or None.
        render_env: environment variables its frames are rendered under headless, each set
            (unless already set) before the simulator loads where frames are asked for.
        settings_env: environment variables that are its rendering settings, passed from the
            host into a container.
        cameras: whether its envs observe camera images (``make_env(cameras=...)``: the
            ``observation.state`` and ``observation.images.<camera>`` keys).
        episodes_in_batch_order: whether a round of ``N`` episodes on ``n`` sub-envs plays the
            first ``N`` of whole batches of ``n`` in batch order (a peer's layout, lerobot-eval's:
            the extra episodes of a count that is not a multiple of ``n`` on the first sub-envs),
            rather than stable-baselines3's (on the last ones); see :func:`simeval.metrics.episode_quotas`.
    """

    name: ClassVar[str]
    title: ClassVar[str]
    prefix: ClassVar[str | None] = None
    capabilities: ClassVar[frozenset[str]] = frozenset({"observation", "action"})
    terms: ClassVar[tuple[ConditionTerm, ...]] = ()
    fallback: ClassVar[bool] = False
    init_fn: ClassVar[str | None] = None
    render_env: ClassVar[Mapping[str, str]] = {}
    settings_env: ClassVar[tuple[str, ...]] = ()
    cameras: ClassVar[bool] = False
    episodes_in_batch_order: ClassVar[bool] = False

    def headless_env(self) -> dict[str, str]:
        """The environment its frames render under headless on this machine (:attr:`render_env` by default).

        Set, unless already set, at the start of a run that renders (``--video``), before
        any simulator is imported. Raises ValueError (one line: what to install) where it
        cannot render headless here.
        """
        return dict(self.render_env)

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

    def applies(self, setting: str) -> bool:
        """Whether it applies the condition setting ``setting``: a kind it declares, and for a setting of a kind
        only simulators apply (not observation, action or task_config), a term it lists in :attr:`terms`; a setting
        of a kind no simulator has to apply (``prompt``, :data:`simeval.condition_terms.ANY_SIMULATOR`) always."""
        from simeval.condition_terms import ANY_SIMULATOR
        from simeval.conditions import kind_of

        kind = kind_of(setting)
        if kind in ANY_SIMULATOR:
            return True
        if kind not in self.capabilities:
            return False
        return kind in ("observation", "action", "task_config") or any(t.name == setting for t in self.terms)

    def condition_problem(self, name: str, condition: Condition) -> str | None:
        """Why it cannot apply ``condition`` to task ``name`` though it applies each of its settings (a setting that
        means nothing on that task), in one line; None: it can. Checked with the settings (:meth:`applies`)."""
        return None

    def term_setter(self, base: EnvBase) -> Callable[[np.ndarray, dict[str, np.ndarray]], None] | None:
        """How ``base`` (an env it built, under no transform) takes its :attr:`terms`' values for its sub-envs
        ``ids`` before their next reset (:class:`simeval.envs.perturb.Perturb` calls it); None: it lists none."""
        return None

    def refusal(self, name: str, kind: str, settings: tuple[str, ...]) -> str | None:
        """This simulator's own one-line advice for a condition ``kind`` it cannot apply; None: the registry's."""
        return None

    def return_bounds(self, name: str) -> tuple[float, float] | None:
        """The least and the most one episode of task ``name`` can return, where the task guarantees them; else
        None (the default: no built-in task declares any; HalfCheetah's return, for one, is unbounded).

        A suite task that declares no ``bounds`` (nor the suite a default) takes these: its lines record them,
        a return outside them fails the cell, and its comparisons use the bounded (betting) intervals, valid
        whatever the falls. Declare only what the reward cannot exceed, at any ``max_steps``.
        """
        return None

    # -- the worker side: an env this simulator built -------------------------------------
    def info_keys(self, env: EnvBase) -> tuple[str, ...]:
        """Per-step keys (under "next") of ``env`` read at episode ends when a round names none, e.g. ``("success",)``.

        A success key among them gives ``success_rate``, ``success_once`` and ``success_at_end``.
        """
        return ()

    def owns(self, base: EnvBase) -> bool:
        """Whether ``base`` (the env under every transform) is one this simulator builds.

        Must not import the simulator: a class it built is in ``sys.modules`` already.
        """
        return False

    def round_source(self, env: EnvBase) -> DirectRound | TensorRound | None:
        """What the worker's own round loop steps for ``env`` (built by this simulator), or None: the Collector.

        Return a source only where the loop reproduces torchrl's Collector over ``env`` exactly
        (same steps, same numbers): typically where ``env``'s transforms are make_env's
        layout (:func:`simeval.envs.layout.plain_transforms`). The worker falls back to the
        Collector anyway where the round's settings ask for what only it gives.
        """
        return None

    def episode_length(self, env: EnvBase) -> int | None:
        """The steps after which ``env`` ends episodes itself (an env that resets itself), else None.

        Collector batches that divide it end rounds of full-length episodes on a batch boundary.
        """
        return None

    def episode_env_seeds(self, env: EnvBase, sub_envs: Sequence[int], ordinals: Sequence[int]) -> list[int] | None:
        """The seed ``env``'s own reset started each episode of a seeded round from, or None: it has none.

        Episode ``j`` is ordinal ``ordinals[j]`` of (local) sub-env ``sub_envs[j]``; a round's
        records name these seeds (``episode_env_seeds``), so its episodes pair with a peer's that
        seeds the env the same way. None: the records have simeval's own episode seeds alone.
        """
        return None

    def replay_promise(self, name: str, device: str) -> ReplayPromise:
        """What a replay of a round of task ``name`` gives back, the round having run on ``device``: ``"cpu"``,
        or the accelerator (``"cuda:0"``) its env or its policy ran on.

        The default promises nothing: a replay then says whether the return came back equal, and a
        difference is no error. Promise ``exact`` only where the same round shape, seed and weights give
        the same return to the bit on the same machine (tested).
        """
        return ReplayPromise(
            False, f"{self.title} declares no replay promise: the return may differ from the recorded one"
        )

    @abstractmethod
    def make(self, request: EnvRequest) -> TransformedEnv:
        """The batched env of ``request`` with simeval's transform layout (:mod:`simeval.envs.layout`)."""

    def __repr__(self) -> str:
        return f"<simulator {self.name}>"
