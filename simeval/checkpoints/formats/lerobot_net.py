"""A LeRobot policy and its processor pipelines as one torch module (imports LeRobot: loaded in the worker)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

_POLICY_STEPS = "device_processor"


class _Processors(nn.Module):
    """The pipelines' statistics as this module's extra state (``"<pipeline>.<step>.<key>"`` -> tensor).

    Loading the checkpoint's weights sets them (``set_extra_state``), which loads each step's
    ``load_state_dict``, as LeRobot's ``from_pretrained`` does with the step's state file.
    """

    def __init__(self, pipelines: dict[str, Any]) -> None:
        super().__init__()
        self.pipelines = pipelines

    def get_extra_state(self) -> dict:
        """Every step's state tensors, keyed ``"<pipeline>.<step index>.<key>"``."""
        out = {}
        for name, pipeline in self.pipelines.items():
            for i, step in enumerate(pipeline.steps):
                state = step.state_dict() if hasattr(step, "state_dict") else {}
                out |= {f"{name}.{i}.{key}": value for key, value in state.items()}
        return out

    def set_extra_state(self, state: dict) -> None:
        """Load each step's tensors from ``state`` (what :meth:`get_extra_state` returns)."""
        grouped: dict[tuple[str, int], dict] = {}
        for key, value in state.items():
            name, index, rest = key.split(".", 2)
            grouped.setdefault((name, int(index)), {})[rest] = value
        for (name, index), tensors in grouped.items():
            self.pipelines[name].steps[index].load_state_dict(tensors)


class LeRobotPolicy(nn.Module):
    """LeRobot's policy of ``config`` between its preprocessor and postprocessor, one chunk per call.

    ``forward(*observations)`` takes the config's input features (in :attr:`in_keys` order), runs
    the preprocessor (normalisation), ``predict_action_chunk`` and the postprocessor
    (unnormalisation), and answers ``[n, n_action_steps, act_dim]``: what lerobot-eval's
    ``select_action`` queues and plays for a batch, here for the rows asked.
    """

    def __init__(self, config: dict, preprocessor: list, postprocessor: list, device: str | None = None) -> None:
        super().__init__()
        import draccus
        import lerobot.policies  # noqa: F401  (registers LeRobot's policy config types)
        from lerobot.configs.policies import PreTrainedConfig
        from lerobot.policies.factory import get_policy_class

        fields = {k: v for k, v in config.items() if k != "type"}
        fields["pretrained_backbone_weights"] = None  # the checkpoint's weights replace them: nothing downloaded
        fields["device"] = device or "cpu"
        cfg = draccus.decode(PreTrainedConfig.get_choice_class(config["type"]), fields)
        self.policy = get_policy_class(config["type"])(cfg)
        self.policy.eval()
        self.n_action_steps = int(cfg.n_action_steps)
        self.in_keys = tuple(cfg.input_features)
        self.processors = _Processors(
            {
                "preprocessor": _pipeline(preprocessor, fields["device"], output=False),
                "postprocessor": _pipeline(postprocessor, "cpu" if device is None else device, output=True),
            }
        )

    @torch.no_grad()
    def forward(self, *observations: torch.Tensor) -> torch.Tensor:
        """``[n, n_action_steps, act_dim]`` actions for the observations of :attr:`in_keys`."""
        pre, post = (self.processors.pipelines[k] for k in ("preprocessor", "postprocessor"))
        batch = pre(dict(zip(self.in_keys, observations, strict=True)))
        chunk = self.policy.predict_action_chunk(batch)[:, : self.n_action_steps]
        return post(chunk)


def _pipeline(steps: list, device: str, *, output: bool) -> Any:
    """LeRobot's pipeline of ``steps`` on ``device`` (names checked against STEPS by the reader and ``actor``)."""
    from lerobot.processor import PolicyProcessorPipeline, ProcessorStepRegistry
    from lerobot.processor.converters import policy_action_to_transition, transition_to_policy_action

    built = []
    for step in steps:
        config = dict(step["config"])
        if step["registry_name"] == _POLICY_STEPS and "device" in config:
            config["device"] = device
        built.append(ProcessorStepRegistry.get(step["registry_name"])(**config))
    if output:
        return PolicyProcessorPipeline(
            steps=built, to_transition=policy_action_to_transition, to_output=transition_to_policy_action
        )
    return PolicyProcessorPipeline(steps=built)
