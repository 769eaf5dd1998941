"""skrl's Gaussian MLP policy at inference (``outputs["mean_actions"]``), rebuilt without running skrl's code.

skrl's model instantiator generates Python source from a config and ``exec``s
it; here the same network is built from plain data instead: the agent's
observation preprocessor (RunningStandardScaler), the MLP, the instantiator's
``output`` expression (parsed into a small tree of torch ops, never
evaluated as code) and ``clip_mean_actions``.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Sequence

import torch

# skrl.utils.model_instantiators.torch.common._get_activation_function's names.
ACTIVATIONS = {
    "elu": torch.nn.ELU, "leaky_relu": torch.nn.LeakyReLU, "relu": torch.nn.ReLU, "selu": torch.nn.SELU,
    "sigmoid": torch.nn.Sigmoid, "softmax": lambda: torch.nn.Softmax(dim=-1), "softplus": torch.nn.Softplus,
    "softsign": torch.nn.Softsign, "tanh": torch.nn.Tanh,
}  # fmt: skip
_FUNCTIONS = {
    "elu": torch.nn.functional.elu, "leaky_relu": torch.nn.functional.leaky_relu, "relu": torch.nn.functional.relu,
    "selu": torch.nn.functional.selu, "sigmoid": torch.sigmoid, "softmax": lambda x: torch.softmax(x, dim=-1),
    "softplus": torch.nn.functional.softplus, "softsign": torch.nn.functional.softsign, "tanh": torch.tanh,
}  # fmt: skip
_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}
_TOKEN = "ACTIONS"  # noqa: S105 - the instantiator's placeholder for the network output, not a secret
MAX_EXPONENT = 16
_PROBE = 100.0  # network outputs the expression must map to finite actions
_MAX_SOURCE = 1000


def layer_indices(activations: Sequence[str | None]) -> list[int]:
    """Indices of the Linear layers in an MLP Sequential with these hidden activations (None: no module)."""
    out, i = [], 0
    for activation in activations:
        out.append(i)
        i += 1 if activation is None else 2
    return [*out, i]


def parse_output(source: str) -> ast.expr:
    """The instantiator's ``output`` expression (``ACTIONS``, ``2 * tanh(ACTIONS)``, ...) as a checked AST.

    Only numbers, the ``ACTIONS`` token, ``+ - * / **``, unary minus and the
    instantiator's activation functions are allowed, and it is evaluated in
    floats only: every number is a finite float, an exponent is a number of at
    most :data:`MAX_EXPONENT` in size, and the expression must give finite
    actions for network outputs across ``[-PROBE, PROBE]``. ValueError otherwise.
    """
    if not isinstance(source, str) or len(source) > _MAX_SOURCE:
        raise ValueError(f"output expression {source!r:.60} is not an expression of at most {_MAX_SOURCE} characters.")
    try:
        tree = ast.parse(source.replace("Shape.", ""), mode="eval").body
    except (SyntaxError, ValueError):
        raise ValueError(f"output expression {source!r} is not an expression.") from None
    _check(tree, source)
    if _TOKEN not in {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}:
        raise ValueError(f"output expression {source!r} does not use {_TOKEN}.")
    _check_numbers(tree, source)
    probe = torch.linspace(-_PROBE, _PROBE, 2001)
    with torch.no_grad():
        out = torch.as_tensor(_apply(tree, probe), dtype=torch.float32)
    if not bool(torch.isfinite(out).all()):
        raise ValueError(
            f"output expression {source!r}: gives non-finite actions for network outputs in [-{_PROBE:g}, {_PROBE:g}]."
        )
    return tree


def _check_numbers(tree: ast.expr, source: str) -> None:
    """Every number a finite float; every exponent a number of at most MAX_EXPONENT in size."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant):
            try:
                value = float(node.value)
            except OverflowError:
                value = math.inf
            if not math.isfinite(value):
                raise ValueError(f"output expression {source!r}: the number {ast.unparse(node):.40} overflows a float.")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            exponent = _constant(node.right)
            if exponent is None or not abs(exponent) <= MAX_EXPONENT:
                raise ValueError(
                    f"output expression {source!r}: the exponent {ast.unparse(node.right):.40} is not a number of at "
                    f"most {MAX_EXPONENT} in size."
                )


def _constant(node: ast.expr) -> float | None:
    """The value of a subtree made of numbers alone, folded in floats (None if it uses ACTIONS or overflows)."""
    if _TOKEN in {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}:
        return None
    try:
        value = float(_apply(node, torch.zeros(())))
    except (OverflowError, ZeroDivisionError, ValueError, TypeError):
        return None
    return value if math.isfinite(value) else None


def _check(node: ast.AST, source: str) -> None:
    ok = (
        (isinstance(node, ast.Constant) and type(node.value) in (int, float))
        or (isinstance(node, ast.Name) and node.id == _TOKEN)
        or (isinstance(node, ast.BinOp) and type(node.op) in _BINARY)
        or (isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)))
        or (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _FUNCTIONS
            and len(node.args) == 1
            and not node.keywords
        )
    )
    if not ok:
        raise ValueError(f"output expression {source!r}: {ast.unparse(node)!r} is not supported.")
    for child in node.args if isinstance(node, ast.Call) else ast.iter_child_nodes(node):
        if not isinstance(child, (ast.operator, ast.unaryop, ast.expr_context)):
            _check(child, source)


def _apply(node: ast.expr, x: torch.Tensor) -> torch.Tensor | float:
    """The checked expression ``node`` with ``ACTIONS`` = ``x``; numbers as floats, never Python integers."""
    if isinstance(node, ast.Constant):
        return float(node.value)
    if isinstance(node, ast.Name):
        return x
    if isinstance(node, ast.UnaryOp):
        value = _apply(node.operand, x)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)](_apply(node.left, x), _apply(node.right, x))
    return _FUNCTIONS[node.func.id](_apply(node.args[0], x))


class Standardizer(torch.nn.Module):
    """skrl's RunningStandardScaler, frozen: ``clamp((x - mean) / (sqrt(var) + eps), -clip, clip)``."""

    def __init__(self, dim: int, epsilon: float = 1e-8, clip_threshold: float = 5.0) -> None:
        super().__init__()
        self.epsilon = epsilon
        self.clip_threshold = clip_threshold
        self.register_buffer("running_mean", torch.zeros(dim, dtype=torch.float64))
        self.register_buffer("running_variance", torch.ones(dim, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Standardised, clipped observations, same shape as ``x`` (..., dim)."""
        scaled = (x - self.running_mean.float()) / (torch.sqrt(self.running_variance.float()) + self.epsilon)
        return scaled.clamp(-self.clip_threshold, self.clip_threshold)


class SkrlGaussianActor(torch.nn.Module):
    """``observation -> [standardise] -> MLP -> output expression [-> clip to the action bounds]``."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden_dims: Sequence[int],
        activations: Sequence[str | None],
        biases: Sequence[bool],
        output: str = _TOKEN,
        obs_norm: dict | None = None,
        clip_bounds: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> None:
        super().__init__()
        if len(activations) != len(hidden_dims) or len(biases) != len(hidden_dims) + 1:
            raise ValueError("skrl actor: one activation per hidden layer and one bias flag per linear layer.")
        unknown = [a for a in activations if a is not None and a not in ACTIVATIONS]
        if unknown:
            raise ValueError(f"unknown skrl activation {unknown[0]!r}: one of {', '.join(ACTIVATIONS)}.")
        dims = [obs_dim, *hidden_dims, act_dim]
        layers: list[torch.nn.Module] = []
        for i, (n_in, n_out) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
            layers.append(torch.nn.Linear(n_in, n_out, bias=biases[i]))
            if i < len(activations) and activations[i] is not None:
                layers.append(ACTIVATIONS[activations[i]]())
        self.mlp = torch.nn.Sequential(*layers)
        self.obs_scaler = Standardizer(obs_dim, **obs_norm) if obs_norm is not None else torch.nn.Identity()
        self.output = parse_output(output)
        self.clip = clip_bounds is not None
        low, high = clip_bounds if clip_bounds is not None else (torch.zeros(act_dim), torch.zeros(act_dim))
        self.register_buffer("clip_low", low.float(), persistent=False)
        self.register_buffer("clip_high", high.float(), persistent=False)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """The policy's mean actions (..., act_dim) for observations ``obs`` (..., obs_dim)."""
        out = _apply(self.output, self.mlp(self.obs_scaler(obs)))
        if self.clip:
            out = torch.clamp(out, min=self.clip_low, max=self.clip_high)
        return out
