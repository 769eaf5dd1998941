"""Condition terms: one seam for what a condition setting is, how its value is checked and drawn, and what it acts on.

A *term* is one setting a condition may name (``observation_noise: 0.1``, ``body_mass_scale:
[0.8, 1.2]``): its name, its kind (what a simulator must be able to change to apply it: the
keys of :data:`KINDS`, which simulators declare in ``Simulator.capabilities``), when it acts
(``reset``: once per episode, before its initial state; ``step``: at every step), the check of
its value (the least allowed value, whether it may equal it, whether it is a whole number) and
its draw from an episode's seed (uniform, or uniform over whole numbers).

Where a term acts depends on its kind. Terms of kind ``observation`` and ``action`` act around
any env, in :class:`simeval.envs.perturb.Perturb`: each episode's value of the term and the
episode's seed and step reach the term's :meth:`ConditionTerm.observe` or
:meth:`ConditionTerm.act`, which return the observation the policy sees or the action the env
gets (batched over sub-envs, float64). Two built-in action terms carry state across steps
(``inference_delay`` holds an answer, ``action_delay`` a history); Perturb plays them first, then
every other action term by :attr:`ConditionTerm.order`. Terms of other kinds change what only a
simulator can (its physics, an episode's initial state, its cameras): a simulator lists the terms
it applies (``Simulator.terms``, subclasses of the :class:`SimulatorTerm` declarations here with
their ``apply``), and hands them the episode's values before each reset; a term that acts at a step
(``push``) keeps its value until then.

The built-in terms are today's settings with their rules unchanged. Installed packages add
terms through the entry-point group ``simeval.conditions`` (a :class:`ConditionTerm`
subclass or instance; a name already taken is a one-line error). A data file names a term;
it never names code: only installed terms are known. No torch at import, no simulator here.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any, ClassVar

from simeval.noise import ACTION_STREAM, OBSERVATION_STREAM, hashed_normal

if TYPE_CHECKING:
    import numpy as np
    import torch

KINDS = {
    "observation": "the observation the policy sees",
    "action": "the action the env receives",
    "physics": "model physics",
    "initial_state": "the episode's initial state",
    "camera": "the camera images (camera poses, lights)",
    "task_config": "the task's config",
    "prompt": "the text sent to a policy server",
}
"""The kinds of settings: what a simulator must be able to change to apply one, but :data:`ANY_SIMULATOR`'s (words
for messages beside each)."""
ANY_SIMULATOR = ("prompt",)
"""The kinds no simulator has to apply: what the policy is told, the same whatever simulator runs the env."""
MAX_PROMPT = 4096
"""The most characters of a prompt (a suite task's, or one variant of a condition's): an instruction, not a document."""
MAX_VARIANTS = 64
"""The most variants a :class:`VariantTerm`'s list may hold."""
VARIANT_TAG = 0x9A7
"""Keeps variant terms' generators apart from the conditions' (seeded by the episode's seed alone)."""
WHEN = ("reset", "step")
ENTRY_POINT_GROUP = "simeval.conditions"
PUSH_STEP = 100
"""The step ``push`` acts at when a condition gives no ``push_step``: past every task's first strides, well before
its 1000-step time limit."""


class ConditionTerm:
    """One condition setting: its name, kind, when it acts, the check of its value and its draw.

    Subclasses set the class attributes; :meth:`check` and :meth:`draw` follow them (override
    either for a rule they cannot say).
    """

    name: ClassVar[str]
    kind: ClassVar[str]
    """One of :data:`KINDS`."""
    when: ClassVar[str] = "step"
    """``reset`` (set once per episode, before its initial state) or ``step`` (acts at every step)."""
    least: ClassVar[float | None] = 0.0
    """The least allowed value (None: any)."""
    inclusive: ClassVar[bool] = True
    """Whether the value may equal :attr:`least`."""
    whole: ClassVar[bool] = False
    """Whether the value is a whole number (a range is then drawn over whole numbers)."""
    summary: ClassVar[str] = ""
    """What the setting does, in a line (docs and messages)."""
    order: ClassVar[int] = 100
    """Where it acts among the terms of its kind (lower first; the built-ins use 10 and 20)."""
    needs: ClassVar[str | None] = None
    """The setting this one qualifies (``push_step`` qualifies ``push``): a condition naming it without that one is
    refused."""

    def check(self, value: float, where: str) -> None:
        """A one-line ValueError (starting with ``where``) unless ``value`` is allowed."""
        if not math.isfinite(value):
            raise ValueError(f"{where}: {value} is not a finite number.")
        if self.whole and value != int(value):
            raise ValueError(f"{where}: {self.name} is a whole number of steps, got {value}.")
        least = self.least
        if least is not None and (value < least or (value == least and not self.inclusive)):
            bound = ">=" if self.inclusive else ">"
            raise ValueError(f"{where}: {self.name} must be {bound} {least:g}, got {value:g}.")

    def draw(self, rng: np.random.Generator, low: float, high: float) -> float:
        """A value of the range ``[low, high]`` for one episode, from the episode's generator ``rng``."""
        if self.whole:
            return float(rng.integers(int(low), int(high), endpoint=True))
        return float(rng.uniform(low, high))

    def observe(
        self, observation: torch.Tensor, value: torch.Tensor, seeds: torch.Tensor, t: torch.Tensor, key: int
    ) -> torch.Tensor:
        """Kind ``observation``: the observation the policy sees instead of ``observation``.

        Args:
            observation: one observation key's values, [E, width] float64, for E sub-envs.
            value: each sub-env's value of this term for its current episode, [E] float64.
            seeds: each sub-env's episode seed (:func:`simeval.conditions.episode_seed`), [E] long.
            t: each sub-env's step in its episode (0 at the reset), [E] long.
            key: the observation key's index among the keys the condition acts on (a noise stream apart).
        """
        raise NotImplementedError(f"{type(self).__name__} does not say how it changes the observation.")

    def act(self, action: torch.Tensor, value: torch.Tensor, seeds: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Kind ``action``: the action the env gets instead of ``action`` ([E, width] float64; the other
        arguments as for :meth:`observe`)."""
        raise NotImplementedError(f"{type(self).__name__} does not say how it changes the action.")


class SimulatorTerm(ConditionTerm):
    """A setting only a simulator applies: its physics, an episode's initial state, its cameras.

    The declaration (name, kind, rules) is registered here, so that a condition naming it parses
    and draws without any simulator loaded; the simulator that applies it lists a subclass with
    its :meth:`apply` (``Simulator.terms``), which writes one episode's value per sub-env into the
    simulator's own batch object before the sub-envs' reset.
    """

    when: ClassVar[str] = "reset"

    def apply(self, target: Any, ids: np.ndarray, values: np.ndarray) -> bool:
        """Set this term's ``values`` (one per sub-env of ``ids``) in ``target``, the simulator's batch of
        simulations; return whether the model's derived constants must be computed again."""
        raise NotImplementedError(f"{type(self).__name__} does not say how it changes the simulation.")


class PhysicsTerm(SimulatorTerm):
    """A setting a simulator applies to each simulation's model (kind ``physics``)."""

    kind: ClassVar[str] = "physics"


class BodyMassScale(PhysicsTerm):
    """``body_mass_scale``: every body's mass and inertia scaled (its centre of mass stays put)."""

    name, inclusive = "body_mass_scale", False
    summary = "every body's mass and inertia scaled"


class FrictionScale(PhysicsTerm):
    """``friction_scale``: every geom's friction coefficients scaled."""

    name = "friction_scale"
    summary = "every geom's friction coefficients scaled"


class Gravity(PhysicsTerm):
    """``gravity``: gravity's vertical component, m/s^2 (nominal -9.81)."""

    name, least = "gravity", None
    summary = "gravity's vertical component, m/s^2 (nominal -9.81)"


class Push(PhysicsTerm):
    """``push``: a shove at one step of the episode, as the field pushes robots (Isaac Lab's and mjlab's
    ``push_by_setting_velocity``, legged_gym's ``push_robots``): the value is the change of the robot's horizontal
    velocity, m/s, so one number means the same disturbance on a 1 kg ant and a 40 kg humanoid, and under
    ``body_mass_scale``.

    Unlike setting the root's velocity, the simulator delivers it as a force: the impulse ``mass * value`` (N*s,
    ``mass`` the robot's in that episode) on the root body's centre of mass (the torso; InvertedPendulum's cart),
    within the first physics substep of step ``push_step`` (:data:`PUSH_STEP` when not given). In free flight the
    robot's centre of mass then moves ``value`` m/s faster along the push; the joints pass it on to the limbs (a
    pole tilts), and ground contact takes its share, as with a real shove. Positive values push forward (+x, the
    direction every task rewards), negative ones backward; ``push_direction`` turns the push in the horizontal
    plane (robots that move in it only). Steps before ``push_step`` are the nominal episode's.
    """

    name, when, least = "push", "step", None
    summary = "the robot's horizontal velocity changed by this much, m/s, by an impulse on its root body at push_step"


class PushStep(PhysicsTerm):
    """``push_step``: the step whose physics the push acts in (0: the episode's first; default :data:`PUSH_STEP`);
    observations up to that step's are the nominal episode's. A range draws it per episode."""

    name, when, whole, needs = "push_step", "step", True, "push"
    summary = f"the step the push acts at (default {PUSH_STEP})"


class PushDirection(PhysicsTerm):
    """``push_direction``: the push's direction in the horizontal plane, degrees from +x toward +y (0: forward)."""

    name, when, least, needs = "push_direction", "step", None, "push"
    summary = "the push's horizontal direction, degrees from +x toward +y (default 0: forward)"


class InitNoiseScale(SimulatorTerm):
    """``init_noise_scale``: the task's reset noise (gymnasium v5's ``reset_noise_scale``) times this for the
    episode; 0 starts it from the model's initial state exactly. The noise is drawn as in the nominal episode and
    scaled, so the sub-env's later episodes start as nominal ones do."""

    name, kind = "init_noise_scale", "initial_state"
    summary = "the task's reset noise times this (0: the deterministic initial state)"


class CameraShift(SimulatorTerm):
    """``camera_shift``: every observed camera moved sideways along its own right axis, metres (negative: left)."""

    name, kind, least = "camera_shift", "camera", None
    summary = "every observed camera moved along its own right axis, metres (negative: to its left)"


class CameraTilt(SimulatorTerm):
    """``camera_tilt``: every observed camera turned about its own right axis, degrees (positive: up)."""

    name, kind, least = "camera_tilt", "camera", None
    summary = "every observed camera turned about its own right axis, degrees (positive: up, negative: down)"


class LightIntensity(SimulatorTerm):
    """``light_intensity``: every light of the rendered scene (the camera's headlight too) times this."""

    name, kind = "light_intensity", "camera"
    summary = "every light's ambient, diffuse and specular intensity times this (0: unlit)"


class LightDirection(SimulatorTerm):
    """``light_direction``: the model's lights turned about the world's y axis, degrees."""

    name, kind, least = "light_direction", "camera", None
    summary = "the model's lights turned about the world's y axis, degrees (positive: from +x, shadows toward -x)"


class ObservationNoise(ConditionTerm):
    """``observation_noise``: Gaussian std added to the observation, in its units."""

    name, kind, summary = "observation_noise", "observation", "Gaussian std added to the observation, in its units"

    def observe(
        self, observation: torch.Tensor, value: torch.Tensor, seeds: torch.Tensor, t: torch.Tensor, key: int
    ) -> torch.Tensor:
        """Add ``value`` times counter-based normal noise (:mod:`simeval.noise`, the key's own stream)."""
        noise = hashed_normal(seeds, t, observation.shape[-1], OBSERVATION_STREAM + 16 * key)
        return observation + value.unsqueeze(-1) * noise


class ActionNoise(ConditionTerm):
    """``action_noise``: Gaussian std added to the action the env gets."""

    name, kind, summary, order = "action_noise", "action", "Gaussian std added to the action the env gets", 20

    def act(self, action: torch.Tensor, value: torch.Tensor, seeds: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Add ``value`` times counter-based normal noise (:mod:`simeval.noise`)."""
        return action + value.unsqueeze(-1) * hashed_normal(seeds, t, action.shape[-1], ACTION_STREAM)


class ActionDelay(ConditionTerm):
    """``action_delay``: the env gets the action of k steps earlier (zeros first). Perturb keeps each sub-env's
    history of actions and plays it (:attr:`STATEFUL`)."""

    name, kind, whole = "action_delay", "action", True
    summary = "the env gets the action of k steps earlier (zeros first)"


class InferenceDelay(ConditionTerm):
    """``inference_delay``: the policy's answer reaches the env d steps late. Perturb holds each sub-env's answer
    on its way and plays it (:attr:`STATEFUL`), or hands the wait to the chunk player (``while_waiting: tail``)."""

    name, kind, whole = "inference_delay", "action", True
    summary = "the policy's answer reaches the env d steps late"


class ActionScale(ConditionTerm):
    """``action_scale``: the action is multiplied by it (actuator strength)."""

    name, kind, inclusive, order = "action_scale", "action", False, 10
    summary = "the action is multiplied by it (actuator strength)"

    def act(self, action: torch.Tensor, value: torch.Tensor, seeds: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Multiply the action by ``value``."""
        return action * value.unsqueeze(-1)


class VariantTerm(ConditionTerm):
    """A setting whose value is a list of 2..:data:`MAX_VARIANTS` variants (texts), one drawn per episode.

    An episode's variant is an index drawn uniformly from a generator of its own (seeded by the
    episode's seed and :attr:`stream`), so that adding the setting to a condition changes none of
    the other settings' draws, and two conditions with as many variants give an episode the same index.
    """

    when: ClassVar[str] = "reset"
    least: ClassVar[float | None] = None
    stream: ClassVar[int] = 0
    """Keeps this term's generator apart from the condition's own (and from other variant terms')."""
    most_characters: ClassVar[int] = MAX_PROMPT
    """The longest a variant may be."""

    def variants(self, value: Any, where: str) -> tuple[str, ...]:
        """``value`` as a tuple of variants; a one-line ValueError (starting with ``where``) unless it is a list of
        2..:data:`MAX_VARIANTS` non-blank texts of at most :attr:`most_characters` characters each."""
        shape = (
            f"a list of 2..{MAX_VARIANTS} texts, each of 1..{self.most_characters} characters, one drawn per episode"
        )
        if not isinstance(value, (list, tuple)) or not 2 <= len(value) <= MAX_VARIANTS:
            raise ValueError(f"{where}: {self.name} is {shape}; got {value!r:.80}.")
        for i, text in enumerate(value):
            if not isinstance(text, str) or not text.strip() or len(text) > self.most_characters:
                raise ValueError(f"{where}[{i}]: {self.name} is {shape}; got {text!r:.80}.")
        return tuple(value)

    def pick(self, seed: int, count: int) -> int:
        """The index (``0 .. count - 1``) of the variant of the episode with seed ``seed``."""
        import numpy as np

        return int(np.random.default_rng([int(seed), VARIANT_TAG, self.stream]).integers(count))


class Prompt(VariantTerm):
    """``prompt``: the text sent to a policy server, one of a list of variants per episode (a paraphrased
    instruction, as LIBERO-plus and LIBERO-PRO perturb a VLA's); it replaces the suite task's ``prompt``."""

    name, kind = "prompt", "prompt"
    summary = "the text sent to a policy server: one of a list of variants, drawn per episode"


STATEFUL = ("inference_delay", "action_delay")
"""The action terms Perturb plays itself, in this order, before the others: each keeps state across an episode's
steps (an answer on its way, a history of actions)."""


BUILT_IN: tuple[ConditionTerm, ...] = (
    ObservationNoise(), ActionNoise(), ActionDelay(), InferenceDelay(), ActionScale(), Prompt(),
    BodyMassScale(), FrictionScale(), Gravity(), Push(), PushStep(), PushDirection(), InitNoiseScale(),
    CameraShift(), CameraTilt(), LightIntensity(), LightDirection(),
)  # fmt: skip
"""The terms simeval applies around any env (:class:`simeval.envs.perturb.Perturb`), then the declarations of the
terms whose effect the simulators that apply them give (``Simulator.terms``)."""


@functools.cache
def registered() -> tuple[ConditionTerm, ...]:
    """Every term: the built-ins, then installed packages' ``simeval.conditions`` entry points.

    An entry point names a :class:`ConditionTerm` subclass (or instance); one that does not load,
    is not one, has an unknown kind or ``when``, needs a setting that is not registered before it, or takes a name
    already taken is a one-line ValueError naming it.
    """
    from simeval.plugins import plugins

    found: list[ConditionTerm] = list(BUILT_IN)
    for where, term in plugins(ENTRY_POINT_GROUP, ConditionTerm):
        if term.name in {t.name for t in found} or term.name == "cfg":
            raise ValueError(f"{where}: the condition setting name {term.name!r} is taken.")
        if term.kind not in KINDS or term.when not in WHEN:
            raise ValueError(
                f"{where}: term {term.name!r} has kind {term.kind!r} and when {term.when!r}; kinds are "
                f"{', '.join(KINDS)}, when is {' or '.join(WHEN)}."
            )
        if term.needs is not None and term.needs not in {t.name for t in found}:
            raise ValueError(f"{where}: term {term.name!r} needs {term.needs!r}, which no term before it registers.")
        found.append(term)
    return tuple(found)


def term(name: str) -> ConditionTerm | None:
    """The registered term called ``name``, or None."""
    return next((t for t in registered() if t.name == name), None)
