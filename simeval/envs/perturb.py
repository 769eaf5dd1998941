"""``Perturb``: a condition applied around any batched env, episode by episode, from each episode's seed.

:func:`simeval.envs.make_env` puts it directly around the base env (below
StepCounter, VecNorm and RewardSum, so ``OBS_NORM_ID`` is unchanged and
observation noise is in the observation's own units). At each reset it starts
the reset sub-envs' next episodes (on an env that resets itself inside
``step``, as Isaac Lab does, at each step's done flags instead): episode ``k`` of global sub-env ``i`` gets
:func:`simeval.conditions.episode_seed` ``(seed, i, k)``, its ranged settings
are drawn from that seed (and kept in :attr:`Perturb.draws`), and the settings only a
simulator applies (native MuJoCo's physics) reach it, through the function its simulator
handed over, before the episode's initial state is computed.

Each setting is a condition term (:mod:`simeval.condition_terms`): this transform plays
the terms of kind ``observation`` (:meth:`~simeval.condition_terms.ConditionTerm.observe`
on every floating-point observation key but camera images) and ``action``
(``inference_delay``'s hold and ``action_delay``'s history first, then the others'
:meth:`~simeval.condition_terms.ConditionTerm.act` by their order), with each sub-env's
value for its current episode, its episode seed and its step. A term whose value is a list of
variants (``prompt``, :class:`~simeval.condition_terms.VariantTerm`) changes what the policy is
told: each sub-env's variant index for its current episode is an observation entry
(:func:`variant_key`, ``prompt_variant``; in the observation spec, so torchrl keeps it), which a
policy server's client reads to send that variant (:func:`variants_of` gives it the list).

``inference_delay`` holds the last answer while the next is on its way, here, for any
policy. Its chunk-tail mode (``{steps: d, while_waiting: tail}``) is played where the action
chunks are, by the worker's chunk player: :func:`chunk_tail_delays` hands it each sub-env's
delay and stops this transform's hold (a policy of single actions has no chunk, and its
tail is the hold: this transform keeps it).

The noise is counter-based (:mod:`simeval.noise`), so an episode's noise is the same
whatever other sub-envs, batch sizes, workers or devices run beside it: the common random
numbers a paired comparison needs.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from tensordict import TensorDictBase
from torchrl.data import Categorical, Composite
from torchrl.envs import EnvBase, TransformedEnv
from torchrl.envs.transforms import Compose, Transform

from simeval.condition_terms import STATEFUL, VariantTerm, term
from simeval.conditions import Condition, episode_seed, kind_of, round_seed
from simeval.envs.layout import IMAGE_PREFIX, resets_itself

AROUND_ENV = ("observation", "action", "prompt")
"""The kinds of terms this transform plays around any env; a term of another kind is its simulator's to apply."""
SimulatorTerms = Callable[[np.ndarray, dict[str, np.ndarray]], None]
"""How a simulator applies its own terms: (local sub-env ids, each setting's value per id), before their reset."""


class Perturb(Transform):
    """Apply ``condition`` around the env it wraps; see the module docstring.

    Args:
        condition: the condition (its ``cfg`` overrides are the env builder's
            business, not this transform's).
        observation_keys: the observations that get noise (None: every
            floating-point leaf of the env's observation spec but camera images).
        action_key: the action the delay, scale and noise apply to.
        simulator_terms: how the simulator applies the condition's settings of other kinds than
            observation and action (``Simulator.term_setter``); a condition with such settings and
            no simulator to apply them is a ValueError.
    """

    def __init__(
        self,
        condition: Condition,
        observation_keys: list | None = None,
        action_key: str | tuple = "action",
        simulator_terms: SimulatorTerms | None = None,
    ) -> None:
        super().__init__(in_keys=[], out_keys=[])
        self.condition = condition
        self.observation_keys = observation_keys
        self.action_key = action_key
        self.draws: dict[tuple[int, int], dict[str, float]] = {}
        self._base: int | None = None
        self._first = 0
        self._state: dict[str, torch.Tensor] | None = None
        self._pending: torch.Tensor | None = None
        self._native_autoreset = False
        self._tail_played_elsewhere = False  # chunk_tail_delays handed inference_delay to the chunk player
        self._max_delay = int(_high(condition.values.get("action_delay", 0)))
        self._native = tuple(name for name in condition.values if kind_of(name) not in AROUND_ENV)
        if self._native and simulator_terms is None:
            raise ValueError(
                f"condition {condition.as_data()}: no simulator here applies {', '.join(self._native)} "
                "(a simulator that does hands its terms to Perturb)."
            )
        self._simulator_terms = simulator_terms
        names = [name for name in condition.values if kind_of(name) in AROUND_ENV]
        self.variant_terms = tuple(name for name in names if isinstance(term(name), VariantTerm))
        """The settings whose value is a list of variants (``prompt``), each shown as :func:`variant_key`."""
        self._observe = sorted((term(n) for n in names if kind_of(n) == "observation"), key=lambda t: t.order)
        self._act = sorted(
            (term(n) for n in names if kind_of(n) == "action" and n not in STATEFUL), key=lambda t: t.order
        )

    # -- rounds ---------------------------------------------------------
    def start_round(self, seed: int, first_sub_env: int = 0) -> None:
        """Begin a round: the next reset of each sub-env starts its episode 0; ``draws`` is emptied.

        ``seed`` is the round's (:func:`simeval.conditions.round_seed`), the same for every shard;
        ``first_sub_env`` is this env's first sub-env in the round (a shard's offset).
        """
        self._base = int(seed)
        self._first = int(first_sub_env)
        self.draws = {}
        if self._state is not None:
            self._state["ordinal"].fill_(-1)

    def inference_delays(self) -> torch.Tensor:
        """Each sub-env's ``inference_delay`` for its current episode ([n] long; drawn when the episode began)."""
        return self._ensure_state()["inference_delay"]

    def hand_over_tail(self) -> Callable[[], torch.Tensor]:
        """Stop holding answers here: the caller plays ``inference_delay``'s chunk tail; it reads the delays with
        the returned function (:meth:`inference_delays`). Only for ``while_waiting: tail``."""
        if self.condition.while_waiting != "tail" or "inference_delay" not in self.condition.values:
            raise ValueError(f"{self!r} has no inference_delay with while_waiting: tail to hand over.")
        self._tail_played_elsewhere = True
        return self.inference_delays

    # -- state ------------------------------------------------------------
    def _env(self) -> object:
        parent = self.parent
        return parent.base_env if parent is not None else None

    def _ensure_state(self) -> dict[str, torch.Tensor]:
        if self._state is not None:
            return self._state
        env = self._env()
        self._native_autoreset = resets_itself(self.parent)
        n = max(1, int(torch.Size(env.batch_size).numel()))
        device = env.device or torch.device("cpu")
        if self.observation_keys is None:
            spec = env.observation_spec
            self.observation_keys = [
                k
                for k in spec.keys(True, True)
                if spec[k].dtype in (torch.float16, torch.float32, torch.float64)
                and not str(k).startswith(IMAGE_PREFIX)  # noise is in the state's units: camera images keep theirs
            ]
        action_width = int(np.prod(env.full_action_spec[self.action_key].shape[len(env.batch_size) :]) or 1)
        zeros = {"device": device, "dtype": torch.float64}
        self._state = {
            "ordinal": torch.full((n,), -1, dtype=torch.long),
            "seed": torch.zeros(n, dtype=torch.long, device=device),
            "t": torch.zeros(n, dtype=torch.long, device=device),
            **{t.name: torch.zeros(n, **zeros) for t in (*self._observe, *self._act)},
            **{name: torch.zeros(n, dtype=torch.long, device=device) for name in self.variant_terms},
            "action_delay": torch.zeros(n, dtype=torch.long, device=device),
            "inference_delay": torch.zeros(n, dtype=torch.long, device=device),
            "history": torch.zeros(n, self._max_delay + 1, action_width, **zeros),
            "held": torch.zeros(n, action_width, **zeros),  # inference_delay: the answer the env gets now
            "asked": torch.zeros(n, action_width, **zeros),  # and the one on its way
        }
        return self._state

    # -- episodes -----------------------------------------------------------
    def _begin(self, ids: torch.Tensor) -> None:
        """Start the next episode of sub-envs ``ids`` (CPU): ordinals, seeds, draws, the simulator's terms, t and
        history."""
        state = self._ensure_state()
        if self._base is None:
            self.start_round(round_seed(None))
        state["ordinal"][ids] += 1
        ranged = self.condition.ranged
        seeds, drawn = [], {name: [] for name in self.condition.values}
        for i, k in zip(ids.tolist(), state["ordinal"][ids].tolist(), strict=True):
            seed = episode_seed(self._base, self._first + i, k)
            values = self.condition.draw(seed)
            seeds.append(seed)
            for name, value in values.items():
                drawn[name].append(value)
            if ranged:
                self.draws[(self._first + i, k)] = {name: values[name] for name in ranged}
        device = state["seed"].device
        dev_ids = ids.to(device)
        state["seed"][dev_ids] = torch.tensor(seeds, dtype=torch.long, device=device)
        for name in (*STATEFUL, *self.variant_terms, *(t.name for t in (*self._observe, *self._act))):
            if name in drawn:
                state[name][dev_ids] = torch.tensor(drawn[name], dtype=state[name].dtype, device=device)
        state["t"][dev_ids] = 0
        state["history"][dev_ids] = 0.0
        state["held"][dev_ids] = 0.0
        state["asked"][dev_ids] = 0.0
        if self._native:
            native = {name: np.asarray(drawn[name], dtype=np.float64) for name in self._native}
            self._simulator_terms(ids.numpy().astype(np.int64), native)

    def _reset_env_preprocess(self, tensordict: TensorDictBase | None) -> TensorDictBase | None:
        """Start the reset sub-envs' next episodes before the env resets them (physics must be set first)."""
        state = self._ensure_state()
        mask = None if tensordict is None else tensordict.get("_reset", None)
        ids = torch.arange(state["ordinal"].numel()) if mask is None else mask.reshape(-1).cpu().nonzero().squeeze(-1)
        if ids.numel():
            self._begin(ids)
        self._pending = ids
        return tensordict

    def _reset(self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase) -> TensorDictBase:
        state = self._ensure_state()
        ids = self._pending if self._pending is not None else torch.arange(state["t"].numel())
        self._pending = None
        if ids.numel():
            self._observation_terms(tensordict_reset, ids.to(state["t"].device))
        self._show_variants(tensordict_reset)
        return tensordict_reset

    # -- steps --------------------------------------------------------------
    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        state = self._ensure_state()
        state["t"] += 1
        if self._native_autoreset:
            # The env reset its done sub-envs inside this step: their observation is their next episode's first.
            done = next_tensordict.get("done").reshape(state["t"].numel(), -1).any(-1)
            ids = done.cpu().nonzero().squeeze(-1)
            if ids.numel():
                self._begin(ids)
        self._observation_terms(next_tensordict, None)
        self._show_variants(next_tensordict)
        return next_tensordict

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        values = self.condition.values
        holds = "inference_delay" in values and not self._tail_played_elsewhere
        if not holds and "action_delay" not in values and not self._act:
            return tensordict
        state = self._ensure_state()
        action = tensordict.get(self.action_key)
        n = state["t"].numel()
        applied = action.reshape(n, -1).to(torch.float64)
        if holds:
            # each sub-env asks at t = 0, d, 2d, ... of its episode; the answer arrives d steps later
            d = state["inference_delay"]
            lagged = d > 0
            asks = lagged & (state["t"] % d.clamp(min=1) == 0)
            state["held"][asks] = state["asked"][asks]
            state["asked"][asks] = applied[asks]
            applied = torch.where(lagged.unsqueeze(-1), state["held"], applied)
        if "action_delay" in values:
            history = state["history"]
            history[:, :-1] = history[:, 1:].clone()
            history[:, -1] = applied
            rows = torch.arange(n, device=history.device)
            applied = history[rows, self._max_delay - state["action_delay"]]
        for t in self._act:
            applied = t.act(applied, state[t.name], state["seed"], state["t"])
        tensordict = tensordict.copy()
        tensordict.set(self.action_key, applied.to(action.dtype).reshape(action.shape))
        return tensordict

    def _observation_terms(self, td: TensorDictBase, ids: torch.Tensor | None) -> None:
        if not self._observe:
            return
        state = self._state
        rows = slice(None) if ids is None else ids
        seeds, steps = state["seed"][rows], state["t"][rows]
        for index, key in enumerate(self.observation_keys):
            obs = td.get(key)
            flat = obs.reshape(state["t"].numel(), -1)
            seen = flat[rows].double()
            for t in self._observe:
                seen = t.observe(seen, state[t.name][rows], seeds, steps, index)
            out = flat.clone()
            out[rows] = seen.to(obs.dtype)
            td.set(key, out.reshape(obs.shape))

    def _show_variants(self, td: TensorDictBase) -> None:
        """Each sub-env's variant index of its current episode, for every variant term, as an observation entry."""
        for name in self.variant_terms:
            td.set(variant_key(name), self._state[name].reshape(td.batch_size).clone())  # the state changes in place

    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        """The env's observation spec with each variant term's index entry (:func:`variant_key`)."""
        for name in self.variant_terms:
            observation_spec[variant_key(name)] = Categorical(
                len(self.condition.values[name]), shape=observation_spec.shape, device=observation_spec.device
            )
        return observation_spec

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Nothing outside an env: a condition acts on env steps only."""
        return tensordict

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.condition.as_data()})"


def _high(value: float | tuple[float, float]) -> float:
    return value[1] if isinstance(value, tuple) else value


def variant_key(name: str) -> str:
    """The observation entry of variant term ``name``'s index (``prompt`` -> ``prompt_variant``)."""
    return f"{name}_variant"


def variants_of(env: EnvBase, name: str) -> tuple[str, ...] | None:
    """The variants of term ``name`` (``prompt``) that ``env``'s condition draws per episode, or None where it sets
    none: what a policy reads the entry :func:`variant_key` ``(name)`` against."""
    perturb = find_perturb(env)
    if perturb is None or name not in perturb.variant_terms:
        return None
    return perturb.condition.values[name]  # type: ignore[return-value]


def unread_variants(env: EnvBase, policy: object) -> str | None:
    """Why ``policy`` cannot act in ``env``: its condition draws variants (a ``prompt``) per episode that the policy
    does not read (no :func:`variant_key` entry among its ``in_keys``), in one line; None where it can."""
    perturb = find_perturb(env)
    if perturb is None:
        return None
    reads = {str(key) for key in getattr(policy, "in_keys", ())}
    unread = [name for name in perturb.variant_terms if variant_key(name) not in reads]
    if not unread:
        return None
    return (
        f"condition {perturb.condition.as_data()!s:.120}: the policy reads no {', '.join(unread)}; a policy server's "
        "client sends it (remote_policy, --policy-server): evaluate one, or leave the setting out."
    )


def find_perturb(env: EnvBase) -> Perturb | None:
    """The :class:`Perturb` among ``env``'s transforms (make_env puts it directly around the base env), or None."""
    seen = 0
    while isinstance(env, TransformedEnv) and seen < 64:  # a chain of wrappers, each with its transform(s)
        transform = env.transform
        for t in transform if isinstance(transform, Compose) else [transform]:
            if isinstance(t, Perturb):
                return t
        env, seen = env.base_env, seen + 1
    return None


def chunk_tail_delays(env: EnvBase) -> Callable[[], torch.Tensor] | None:
    """Where ``env`` applies ``inference_delay`` with ``while_waiting: tail``: its per-sub-env delays, read at each
    step by the worker's chunk player, which then plays the wait (the env stops holding); else None.

    The one place the condition meets the action chunks: the env sees one action per step, so the
    chunk's tail can only be played by what keeps the chunks.
    """
    perturb = find_perturb(env)
    if (
        perturb is None
        or perturb.condition.while_waiting != "tail"
        or "inference_delay" not in perturb.condition.values
    ):
        return None
    return perturb.hand_over_tail()


def perturbed(base: EnvBase, condition: Condition, simulator_terms: SimulatorTerms | None = None) -> EnvBase:
    """``base`` itself for a nominal condition, else ``base`` under a :class:`Perturb` (``simulator_terms``: how the
    simulator applies its own terms to ``base``, :meth:`simeval.envs.simulators.Simulator.term_setter`).

    The Perturb sits directly around the base env, below the layout, so ``OBS_NORM_ID``
    still names the VecNormV2.
    """
    if not condition.values:
        return base
    return TransformedEnv(base, Perturb(condition, simulator_terms=simulator_terms), auto_unwrap=False)
