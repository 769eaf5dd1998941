"""Export a checkpoint's deterministic actor (``obs -> actions``) to ONNX or TorchScript for deployment.

    python -m simeval.export runs/exp1/ckpt/step_000500000.pt --to onnx
    python -m simeval.export logs/rsl_rl/cartpole/model_299.pt --to torchscript --env isaaclab:Isaac-Cartpole-v0

Any checkpoint simeval reads (``load_checkpoint``) is rebuilt for its env (or
``--env``), its weights loaded, and the action the evaluator takes
(``ExplorationType.DETERMINISTIC``) written as one module with the
observation normaliser folded in: a simeval checkpoint's VecNorm statistics,
or a library's normaliser, which is already inside its actor. Before the file
is used, the written model is run on a batch of observations and compared with
the policy itself; a mismatch is an error, not a file. ``python -m
simeval.launch --checkpoint policy.onnx`` evaluates an ONNX export
(:mod:`simeval.checkpoints.formats.onnx`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from simeval.checkpoint_policy import CheckpointPolicy, build_checkpoint_policy, checkpoint_env
from simeval.checkpoints import CheckpointError, load_checkpoint
from simeval.checkpoints.formats import onnx as onnx_format
from simeval.envs import check_env
from simeval.extras import require_extra

if TYPE_CHECKING:
    import torch

    from simeval.export.actor import Exported

TARGETS = ("onnx", "torchscript")
ONNX_MODULES = ("onnx", "onnxruntime", "onnxscript")  # torch.onnx's exporter, the checker, the export check's runner
TOLERANCE = 1e-4  # the export check: max |written - policy| <= TOLERANCE * max(1, max |action|)


@dataclass
class ExportResult:
    """What :func:`export_checkpoint` wrote: the file (``path``), its target (``to``), env and step.

    ``obs_dim`` and ``action_dim`` are the model's input and output sizes (``[batch, n]``); ``obs_norm``
    says whether VecNorm statistics were folded in, ``actor`` how the deterministic action was derived,
    ``max_error`` the export check's largest ``|written - policy|``, ``source_format`` the checkpoint's format.
    """

    path: str
    to: str
    env: str
    step: int
    obs_dim: int
    action_dim: int
    obs_norm: bool  # VecNorm statistics folded in
    actor: str  # how the deterministic action was derived
    max_error: float  # max |written - policy| on the check's observations
    source_format: str = "simeval"

    def describe(self) -> str:
        """One line for the user: the file, its shapes, the normaliser, the actor and the check's error."""
        norm = "VecNorm folded in" if self.obs_norm else "no VecNorm statistics"
        if not self.obs_norm and self.source_format != "simeval":
            norm = f"{self.source_format}'s actor as it is (its normaliser, if any, inside)"
        return (
            f"wrote {self.path} ({self.to}; {self.env}, step {self.step}; obs [batch, {self.obs_dim}] -> actions "
            f"[batch, {self.action_dim}]; {norm}; actor: {self.actor}; max |exported - policy| {self.max_error:.1e})"
        )


def default_out(checkpoint: str | os.PathLike, to: str) -> str:
    """``<checkpoint dir>/exported/<stem>.onnx|.pt``: beside the checkpoint, as Isaac Lab's play script does.

    A folder of its own keeps a ``.pt`` export from overwriting a ``.pt``
    checkpoint of the same stem, and exports out of ``--watch``'s patterns. A checkpoint inside the simeval
    package (the shipped ones) is exported to ``./exported/`` instead: nothing is written into an installed package.
    """
    from simeval.export.writers import SUFFIXES

    checkpoint = os.path.abspath(os.fspath(checkpoint))
    stem = os.path.splitext(os.path.basename(checkpoint))[0]
    folder = os.getcwd() if _inside_package(checkpoint) else os.path.dirname(checkpoint)
    return os.path.join(folder, "exported", stem + SUFFIXES[to])


def _inside_package(path: str) -> bool:
    """Whether ``path`` lies inside the simeval package's directory (links resolved)."""
    package = os.path.realpath(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.commonpath([os.path.realpath(path), package]) == package


def export_checkpoint(
    checkpoint: str | os.PathLike,
    to: str,
    out: str | os.PathLike | None = None,
    env: str | None = None,
    format: str | None = None,
    policy: str | None = None,
) -> ExportResult:
    """Write ``checkpoint``'s deterministic actor as ``to`` (onnx or torchscript); CheckpointError on bad input.

    ``policy`` (``"module:function"``, trusted: the command line's ``--policy``) builds the policy instead of the
    factory the checkpoint names, which is used only when it is registered (:mod:`simeval.factories`).
    """
    if to not in TARGETS:
        raise CheckpointError(f"unknown export target {to!r}: choose onnx or torchscript.")
    if to == "onnx":
        require_extra(ONNX_MODULES, "onnx", "--to onnx")
    path = os.fspath(checkpoint)
    ck = load_checkpoint(path, format)
    if ck.meta.get("format") == "onnx":
        raise CheckpointError(f"{path}: already an exported ONNX policy; export the checkpoint it came from.")
    env_name = checkpoint_env(ck, env)
    out = os.fspath(out) if out is not None else default_out(path, to)
    if os.path.exists(out) and os.path.samefile(out, path):
        raise CheckpointError(f"{path}: --out is the checkpoint itself; choose another file.")

    check_env(env_name)
    built = build_checkpoint_policy(ck, env_name, policy)
    module, how = _exported(built)
    vecnorm, obs_dim, act_dim = built.vecnorm, built.obs_dim, built.act_dim
    import torch

    from simeval.export.writers import WRITERS, atomic_write

    metadata = {
        onnx_format.META_FORMAT: onnx_format.EXPORT_FORMAT,
        onnx_format.META_STEP: str(ck.step),
        onnx_format.META_ENV: env_name,
        onnx_format.META_SOURCE: os.path.basename(path),
        onnx_format.META_SOURCE_SHA256: ck.sha256 or "",
        onnx_format.META_SOURCE_FORMAT: ck.meta.get("format", "simeval"),
        onnx_format.META_OBS_NORM: "folded" if vecnorm is not None else "none",
    }
    obs = _check_observations(module, obs_dim)
    expected = built.actions({"observation": obs})
    try:
        data, run = WRITERS[to](module, obs_dim, metadata)
        with torch.no_grad():
            errors = [_error(module(obs), expected), _error(run(obs), expected), _error(run(obs[:1]), expected[:1])]
    except Exception as exc:  # noqa: BLE001 - the exporters' many error types: one line, naming the checkpoint
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"{path}: cannot export its policy to {to} ({type(exc).__name__}: {first}).") from None
    allowed = TOLERANCE * max(1.0, float(expected.abs().max()))
    if not max(errors) <= allowed:
        raise CheckpointError(
            f"{path}: the {to} export disagrees with the policy by {max(errors):.2e} (allowed {allowed:.0e}); "
            "nothing written: its deterministic action does not trace to one graph."
        )
    atomic_write(out, data)
    source_format = ck.meta.get("format", "simeval")
    return ExportResult(
        out, to, env_name, ck.step, obs_dim, act_dim, vecnorm is not None, how, max(errors), source_format
    )


def _exported(built: CheckpointPolicy) -> tuple[Exported, str]:
    """The plain ``obs -> actions`` module of a built policy (its VecNorm folded in), and how its actor was derived."""
    from simeval.export.actor import Exported, Normalise, deterministic_actor

    normalise = None
    if built.vecnorm is not None:
        normalise = Normalise(built.vecnorm.loc["observation"], built.vecnorm.scale["observation"])
    actor, how = deterministic_actor(built.policy)
    return Exported(actor, normalise).eval(), how


def _check_observations(module: Exported, obs_dim: int) -> torch.Tensor:
    """Observations around the normaliser's statistics (unit-scale ones without it), seeded."""
    import torch

    gen = torch.Generator().manual_seed(0)
    z = torch.randn(256, obs_dim, generator=gen)
    norm = getattr(module, "normalise", None)
    if hasattr(norm, "loc"):
        return norm.loc + norm.scale * z
    return z


def _error(got: torch.Tensor, expected: torch.Tensor) -> float:
    import torch

    with torch.no_grad():
        return float((got.detach().to(expected.dtype) - expected).abs().max())
