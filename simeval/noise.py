"""Counter-based Gaussian noise: the value for step ``t``, component ``j`` and stream ``s`` of an episode is a hash of
(episode seed, t, j, s), made Gaussian (Box-Muller).

No generator state is carried, so an episode's noise is the same whatever other sub-envs, batch sizes,
workers or devices run beside it: the common random numbers a paired comparison needs. The condition
terms that add noise (:mod:`simeval.condition_terms`) draw it here; a term of another package may too,
with a stream of its own (:data:`FIRST_FREE_STREAM` and above).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# splitmix64's constants, as signed int64 (torch has no uint64 arithmetic).
_GOLDEN = 0x9E3779B97F4A7C15 - (1 << 64)
_M1 = 0xBF58476D1CE4E5B9 - (1 << 64)
_M2 = 0x94D049BB133111EB - (1 << 64)
OBSERVATION_STREAM, ACTION_STREAM = 1, 2
"""The built-in noises' streams (an observation key ``k`` of a condition draws stream ``1 + 16 k``)."""
FIRST_FREE_STREAM = 1 << 20
"""Streams from here on are free for other terms (the built-ins never reach them)."""


def _shr(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 values read as uint64."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def _mix(x: torch.Tensor) -> torch.Tensor:
    """splitmix64's finaliser (wrapping int64 arithmetic is uint64 arithmetic bit for bit)."""
    x = (x ^ _shr(x, 30)) * _M1
    x = (x ^ _shr(x, 27)) * _M2
    return x ^ _shr(x, 31)


def hashed_normal(seeds: torch.Tensor, steps: torch.Tensor, width: int, stream: int) -> torch.Tensor:
    """Standard normal noise, [E, width] float64, a pure function of (seed, step, component, stream) per row."""
    import torch

    device = seeds.device
    key = _mix(_mix(seeds.long() * _GOLDEN + stream) ^ steps.long())
    j = torch.arange(2 * width, device=device, dtype=torch.long)
    bits = _mix(key.unsqueeze(-1) + (j + 1) * _GOLDEN)
    u = (_shr(bits, 11).double() + 0.5) * 2.0**-53  # in (0, 1)
    u1, u2 = u[:, :width], u[:, width:]
    return torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * math.pi * u2)
