"""A small ACT policy for LeRobot's PushT, built and saved here as LeRobot saves one (no hub access).

``save_act(directory)`` writes ``config.json``, ``model.safetensors`` and the pre/post-processor files
(normaliser statistics made up but fixed) that ``lerobot-eval --policy.path=DIR`` and simeval both read.
Weights are random (seeded): the oracle compares numbers, not skill.
"""

from __future__ import annotations

from pathlib import Path


def save_act(directory: str | Path, *, seed: int = 0, chunk_size: int = 10, n_action_steps: int = 5) -> Path:
    """Build a seeded, untrained ACT for PushT's pixels + agent position and save it under ``directory``."""
    import torch
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors

    torch.manual_seed(seed)
    config = ACTConfig(
        input_features={
            "observation.image": PolicyFeature(type=FeatureType.VISUAL, shape=(3, 96, 96)),
            "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(2,)),
        },
        output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(2,))},
        chunk_size=chunk_size,
        n_action_steps=n_action_steps,
        pretrained_backbone_weights=None,
        dim_model=64,
        n_heads=2,
        dim_feedforward=128,
        n_encoder_layers=1,
        n_decoder_layers=1,
        use_vae=False,
        device="cpu",
        push_to_hub=False,
    )
    policy = ACTPolicy(config)
    stats = {
        "observation.image": {
            "mean": torch.full((3, 1, 1), 0.5),
            "std": torch.full((3, 1, 1), 0.25),
        },
        "observation.state": {"mean": torch.tensor([256.0, 256.0]), "std": torch.tensor([120.0, 120.0])},
        "action": {"mean": torch.tensor([256.0, 256.0]), "std": torch.tensor([130.0, 130.0])},
    }
    pre, post = make_pre_post_processors(config, dataset_stats=stats)
    out = Path(directory)
    policy.save_pretrained(out)
    pre.save_pretrained(out)
    post.save_pretrained(out)
    return out


if __name__ == "__main__":
    import sys

    print(save_act(sys.argv[1]))
