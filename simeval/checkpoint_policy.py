"""The policy a checkpoint describes, built as an evaluation runs it: :func:`build_checkpoint_policy`.

One function for everything that turns a checkpoint into a callable policy outside an
evaluation: ``python -m simeval.export`` (which folds it into an ONNX or TorchScript file) and
``python -m simeval.serve_policy`` (which serves it). The env the checkpoint names (or the one
given) is built once with ``num_envs=1`` for its specs; the policy is built for it and the
checkpoint's weights loaded; the checkpoint's VecNorm statistics, where it has them, are loaded
into the env's own frozen VecNormV2. :meth:`CheckpointPolicy.actions` then computes what an
evaluation computes for a batch of observations: the VecNorm, then the policy's deterministic
action.

The trust rule (:mod:`simeval.factories`): a factory given here (``policy``, the command line's
``--policy``) is trusted and imported; the factory a checkpoint names is used only when it is
registered, else the checkpoint is refused in one line and nothing is imported.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from simeval.checkpoints import CheckpointError
from simeval.envs import OBS_NORM_ID, make_env
from simeval.envs.layout import IMAGE_PREFIX, STATE_KEY
from simeval.factories import build_policy, is_registered, refusal, weights_bound
from simeval.policies import DEFAULT_FACTORY

if TYPE_CHECKING:
    import torch
    from torchrl.envs.transforms import VecNormV2

    from simeval.checkpoints import Checkpoint


@dataclass
class CheckpointPolicy:
    """A checkpoint's policy and its frozen observation normaliser, as :func:`build_checkpoint_policy` built them.

    ``env`` is the env's id, ``step`` the checkpoint's step; ``state_key`` the observation entry holding
    the state vector (``observation``, or ``observation.state`` with cameras) of ``obs_dim`` numbers;
    ``images`` each camera's entry (``observation.images.<camera>``) and its float ``(3, H, W)`` shape;
    ``act_dim`` the action size. ``policy`` is the module the evaluator calls and ``vecnorm`` the env's
    VecNormV2 holding the checkpoint's statistics, frozen (None without them).
    """

    env: str
    step: int
    policy: Any
    vecnorm: VecNormV2 | None
    obs_dim: int
    act_dim: int
    state_key: str = "observation"
    images: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def to(self, device: str | torch.device) -> CheckpointPolicy:
        """Move the policy and its normaliser to ``device``; returns self."""
        self.policy.to(device)
        if self.vecnorm is not None:
            self.vecnorm.to(device)
        return self

    def actions(self, observations: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The deterministic actions ``[B, act_dim]`` for a batch of observations (entry -> ``[B, ...]`` tensor).

        What the evaluator does each step: the env's frozen VecNormV2 on the state (no update), then the policy
        under ``ExplorationType.DETERMINISTIC``, without gradients. ``observations`` holds ``state_key`` and, with
        cameras, every entry of ``images`` (float in [0, 1]).
        """
        import torch
        from tensordict import TensorDict
        from torchrl.envs.utils import ExplorationType, set_exploration_type

        batch = next(iter(observations.values())).shape[:1]
        td = TensorDict(dict(observations), batch_size=batch)
        with torch.no_grad():
            if self.vecnorm is not None:
                td = self.vecnorm._step(td, td.clone())  # what the env applies to each step's observation
            with set_exploration_type(ExplorationType.DETERMINISTIC):
                return self.policy(td)["action"]


def checkpoint_env(ck: Checkpoint, env: str | None) -> str:
    """The env a checkpoint's policy is built for: the one it records, else ``env``; CheckpointError in one line
    when they differ or neither is known."""
    if ck.env and env and env != ck.env:
        raise CheckpointError(f"{ck.path}: trained on {ck.env}, but --env is {env}.")
    name = ck.env or env
    if not name:
        raise CheckpointError(
            f"{ck.path}: the checkpoint does not record its env: name it with --env (e.g. --env HalfCheetah-v5)."
        )
    return name


def build_checkpoint_policy(
    ck: Checkpoint,
    env: str | None = None,
    policy: str | None = None,
    *,
    cameras: Sequence[str] = (),
    image_size: int | tuple[int, int] = 64,
) -> CheckpointPolicy:
    """The policy checkpoint ``ck`` describes, its weights and VecNorm statistics loaded, in eval mode, on the CPU.

    Args:
        ck: a loaded checkpoint (:func:`simeval.checkpoints.load_checkpoint`).
        env: the env id, needed when the checkpoint records none (:func:`checkpoint_env`).
        policy: ``"module:function"`` building the policy instead of the checkpoint's own factory: trusted input
            (the command line's ``--policy``). Without it the checkpoint's factory is used only if registered
            (:mod:`simeval.factories`); an unregistered one is a CheckpointError and nothing is imported.
        cameras: the cameras the policy sees (``observation.images.<camera>`` beside ``observation.state``,
            as ``make_env(cameras=...)`` gives them); the env is then built with them, one frame per image.
        image_size: the images' side, or ``(height, width)``.

    Raises:
        CheckpointError: in one line, for a refused factory, weights that do not fit, or an unknown env.
    """
    import warnings

    name = checkpoint_env(ck, env)
    kw: dict[str, Any] = {"cameras": list(cameras), "image_size": image_size} if cameras else {}
    with warnings.catch_warnings():  # VecNormV2 on a batched env: what make_env's reduce_batch_dims is for
        warnings.filterwarnings("ignore", message="Support of VecNormV2")
        built = make_env(name, num_envs=1, obs_norm=ck.obs_norm is not None, **kw)
        try:
            return _load(ck, built, name, policy)
        finally:
            built.close()


def _load(ck: Checkpoint, env: Any, name: str, factory: str | None) -> CheckpointPolicy:
    from simeval.weights import load_weights, resolve_model

    spec = env.observation_spec
    entries = [k for k in spec.keys() if isinstance(k, str)]
    state_key = STATE_KEY if STATE_KEY in entries else "observation"
    images = {k: tuple(spec[k].shape[-3:]) for k in entries if k.startswith(IMAGE_PREFIX)}
    obs_dim = int(spec[state_key].shape[-1])
    act_dim = int(env.full_action_spec_unbatched["action"].shape[-1])
    policy = _policy(ck, env, factory)
    vecnorm = None
    try:
        load_weights(policy, ck.policy, "policy")
        if ck.obs_norm is not None:
            vecnorm = resolve_model({"env": env}, OBS_NORM_ID)
            load_weights(vecnorm, ck.obs_norm, OBS_NORM_ID)
            vecnorm.freeze()
    except ValueError as exc:
        raise CheckpointError(f"{ck.path}: {exc} (for {name})") from None
    policy.eval()
    return CheckpointPolicy(name, ck.step, policy, vecnorm, obs_dim, act_dim, state_key, images)


def _policy(ck: Checkpoint, env: Any, factory: str | None) -> Any:
    """The checkpoint's policy for ``env``: built by ``factory`` (trusted: the command line), else by the
    checkpoint's own factory, which must be registered."""
    own = ck.policy_factory or DEFAULT_FACTORY
    if not factory and not is_registered(own):
        raise CheckpointError(refusal(ck.path, own))
    kwargs = dict(ck.policy_kwargs) if (factory or own) == own else {}
    bound = weights_bound(ck.policy) if kwargs else None
    return build_policy(factory or own, kwargs, env, trusted=bool(factory), max_bytes=bound)
