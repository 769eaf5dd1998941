"""simeval's own policy factories ``(env, **kwargs) -> policy``, which checkpoints can name.

A factory stamps what built the policy on it (:func:`stamp`), so
``save_checkpoint`` records the factory and its keyword arguments and the
launcher can rebuild the same architecture without ``--policy``
(:func:`simeval.factories.build_policy`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from tensordict.nn import TensorDictModule
    from torchrl.data import TensorSpec
    from torchrl.envs import EnvBase
    from torchrl.modules import ProbabilisticActor

FACTORY_ATTR = "_simeval_factory"
_P = TypeVar("_P")


def stamp(policy: _P, name: str, kwargs: dict[str, Any]) -> _P:
    """Record on ``policy`` that factory ``name`` built it with ``kwargs`` (see :func:`factory_of`); returns it."""
    object.__setattr__(policy, FACTORY_ATTR, (name, dict(kwargs)))
    return policy


def gaussian_actor(env: EnvBase, hidden: Sequence[int] = (64, 64)) -> ProbabilisticActor:
    """Tanh-Normal MLP actor (the PPO actor of torchrl's MuJoCo examples).

    ``observation -> MLP(tanh) -> loc``, state-independent scale. Under
    ``ExplorationType.DETERMINISTIC`` (the evaluator's default) it acts with
    the distribution's deterministic sample; in training it samples. Actions
    stay in the spec's bounds; an unbounded action space (Isaac Lab's tasks,
    which scale actions themselves) gets [-1, 1].
    """
    import torch
    from tensordict.nn import AddStateIndependentNormalScale, TensorDictModule
    from torchrl.modules import MLP, ProbabilisticActor, TanhNormal

    obs_dim = env.observation_spec["observation"].shape[-1]
    spec = env.full_action_spec_unbatched["action"] if hasattr(env, "full_action_spec_unbatched") else env.action_spec
    act_dim = spec.shape[-1]
    net = torch.nn.Sequential(
        MLP(in_features=obs_dim, out_features=act_dim, num_cells=list(hidden), activation_class=torch.nn.Tanh),
        AddStateIndependentNormalScale(act_dim, scale_lb=1e-8),
    )
    actor = ProbabilisticActor(
        TensorDictModule(net, in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"],
        spec=spec,
        distribution_class=TanhNormal,
        distribution_kwargs={**_bounds(spec), "tanh_loc": False},
        return_log_prob=True,
    )
    return stamp(actor, "simeval.policies:gaussian_actor", {"hidden": list(hidden)})


def _bounds(spec: TensorSpec) -> dict:
    import torch

    low, high = spec.space.low, spec.space.high
    # Unbounded specs come as +-inf or as float32's extremes (gymnasium's Box(-inf, inf) through torchrl).
    if not (low > -1e30).all() or not (high < 1e30).all():
        low, high = -torch.ones_like(low), torch.ones_like(high)
    return {"low": low, "high": high}


def mlp_policy(env: EnvBase, hidden: Sequence[int] = (64, 64)) -> TensorDictModule:
    """Deterministic tanh MLP: ``observation -> action``."""
    import torch
    from tensordict.nn import TensorDictModule
    from torchrl.modules import MLP

    obs_dim = env.observation_spec["observation"].shape[-1]
    act_dim = env.action_spec.shape[-1]
    net = torch.nn.Sequential(
        MLP(in_features=obs_dim, out_features=act_dim, num_cells=list(hidden), activation_class=torch.nn.Tanh),
        torch.nn.Tanh(),
    )
    policy = TensorDictModule(net, in_keys=["observation"], out_keys=["action"])
    return stamp(policy, "simeval.policies:mlp_policy", {"hidden": list(hidden)})


def cnn_policy(
    env: EnvBase, cameras: Sequence[str] = ("track",), state: bool = False, hidden: Sequence[int] = (256,)
) -> TensorDictModule:
    """Deterministic tanh CNN on camera images: ``observation.images.<camera>`` (and ``observation.state``) -> action.

    Each camera's images (``[C, H, W]`` in [0, 1]; ``C = 3 * frame_stack``) go through two
    convolutions (16 channels, kernel 8, stride 4; 32 channels, kernel 4, stride 2, ReLU), their
    features are concatenated (with the state vector when ``state``) and an MLP with ``hidden``
    units (ReLU) and a tanh answers the action. The env must observe ``cameras``
    (``make_env(cameras=...)``).
    """
    import torch
    from tensordict.nn import TensorDictModule
    from torchrl.modules import MLP

    spec = env.observation_spec
    keys = [f"observation.images.{c}" for c in cameras]
    missing = [k for k in keys if k not in spec.keys()]
    if missing or (state and "observation.state" not in spec.keys()):
        raise ValueError(
            f"cnn_policy reads {', '.join(missing or ['observation.state'])}: the env does not observe it."
        )
    act_dim = env.action_spec.shape[-1]

    def trunk(shape: torch.Size) -> tuple[torch.nn.Module, int]:
        net = torch.nn.Sequential(
            torch.nn.Conv2d(shape[-3], 16, kernel_size=8, stride=4),
            torch.nn.ReLU(),
            torch.nn.Conv2d(16, 32, kernel_size=4, stride=2),
            torch.nn.ReLU(),
            torch.nn.Flatten(-3),
        )
        with torch.no_grad():
            width = net(torch.zeros(1, *shape[-3:])).shape[-1]
        return net, width

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            trunks = [trunk(spec[k].shape) for k in keys]
            self.trunks = torch.nn.ModuleList(t for t, _ in trunks)
            width = sum(w for _, w in trunks) + (spec["observation.state"].shape[-1] if state else 0)
            self.head = MLP(
                in_features=width, out_features=act_dim, num_cells=list(hidden), activation_class=torch.nn.ReLU
            )

        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            images = inputs[: len(keys)]
            lead = images[0].shape[:-3]
            features = [t(x.reshape(-1, *x.shape[-3:])) for t, x in zip(self.trunks, images, strict=True)]
            if state:
                features.append(inputs[-1].reshape(-1, inputs[-1].shape[-1]))
            return torch.tanh(self.head(torch.cat(features, -1))).reshape(*lead, act_dim)

    in_keys = keys + (["observation.state"] if state else [])
    policy = TensorDictModule(Net(), in_keys=in_keys, out_keys=["action"])
    kwargs = {"cameras": list(cameras), "state": state, "hidden": list(hidden)}
    return stamp(policy, "simeval.policies:cnn_policy", kwargs)


DEFAULT_FACTORY = "simeval.policies:gaussian_actor"


def factory_of(policy: Any) -> tuple[str, dict[str, Any]] | None:
    """``("module:function", kwargs)`` of the factory that built ``policy``, if stamped."""
    return getattr(policy, FACTORY_ATTR, None)
