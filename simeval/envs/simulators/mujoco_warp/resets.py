"""Resets of the Warp env driven by a device mask: reset states drawn ahead, no per-step host read.

:class:`~simeval.envs.simulators.mujoco_warp.env.WarpBatchEnv`'s own reset reads the ``_reset`` mask on
the host, so a loop that resets finished sub-envs at every step waits for the
device at every step. A rollout that steps the env itself uses
:class:`ResetsAhead` instead: each sub-env's next ``depth`` reset states are
drawn ahead, from its own generator in its own order, and kept on the device;
at a step, the sub-envs whose done flag is set take their next state there
(a gather and a ``torch.where``), and MuJoCo's defaults are restored in their
worlds by a reset driven by the same device mask (one captured graph on CUDA,
launched at every step; elsewhere it runs at steps where a flag is set).
Once every ``depth`` steps the numbers of states taken are read (one small
copy) and exactly that many are drawn to refill the pool. A sub-env resets at
most once per step, so the pool never runs dry between two refills.

Every sub-env so starts its episodes from the states the env's own resets
would have given it. The generators run ahead by the states still in the pool:
until the pool is settled (by the env's next reset, or when its generators are
read; a reseed needs nothing), they are rewound to the draws actually taken,
so that the env then goes on as if it had reset itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from simeval.envs.simulators.mujoco_warp.env import WarpBatchEnv

# Draws kept ahead per sub-env on CUDA (and steps between two host reads of the counts):
# a host read every 4 steps, 4 extra draws per sub-env per round. On the CPU a read costs
# nothing, so the pool refills at every step and draws only what the env's resets would.
CUDA_DEPTH = 4


class ResetsAhead:
    """Each sub-env's next ``depth`` reset states on ``env``'s device, taken by a device done mask.

    Args:
        env: the Warp env, just reset (its generators are where its next resets would draw).
        depth: states kept ahead per sub-env (``None``: :data:`CUDA_DEPTH` on CUDA, 1 on the CPU).
    """

    def __init__(self, env: WarpBatchEnv, depth: int | None = None) -> None:
        if depth is None:
            depth = CUDA_DEPTH if env.device.type == "cuda" else 1
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}.")
        n, device = env.batch_size.numel(), env.device
        self.env, self.depth = env, int(depth)
        rngs = env.generators  # settles any earlier pool first
        self._start = [rng.bit_generator.state for rng in rngs]  # for settle()
        self._rngs = rngs
        self._seen = np.zeros(n, dtype=np.int64)  # states taken as of the last refill; drawn: depth more
        self._since_refill = 0
        self._rows = torch.arange(n, device=device)
        self.taken = torch.zeros(n, dtype=torch.int64, device=device)
        states = env.initial_states([rng for rng in rngs for _ in range(self.depth)])
        self.pool = torch.from_numpy(states.reshape(n, self.depth, -1)).to(device)
        self._nq = env.state.qpos.shape[1]
        env._ahead = self

    def take(self, done: torch.Tensor) -> None:
        """Reset the sub-envs where ``done`` ((N,) bool on the device) is set, to their next states."""
        env, state = self.env, self.env.state
        if env.reset_captured or bool(done.any()):  # a graph launch costs less than a host read; on the CPU,
            # where reading the flag costs nothing, the reset's many kernel launches only run when needed
            slot = self.taken % self.depth
            states = self.pool[self._rows, slot]
            env._reset_mask.copy_(done)
            env.reset_masked()
            rows = done.unsqueeze(-1)
            state.qpos.copy_(torch.where(rows, states[:, : self._nq], state.qpos))
            state.qvel.copy_(torch.where(rows, states[:, self._nq :], state.qvel))
            env._elapsed.masked_fill_(done, 0)
            self.taken += done
        self._since_refill += 1
        if self._since_refill == self.depth:
            self.refill()

    def refill(self) -> None:
        """Draw as many states as each sub-env took since the last refill (one host read of the counts)."""
        self._since_refill = 0
        taken = self.taken.cpu().numpy().copy()  # on the CPU, .cpu() is the counter itself
        new = taken - self._seen
        rows = np.repeat(np.arange(len(new)), new)
        drawn = self._seen + self.depth
        self._seen = taken
        if not len(rows):
            return
        draws = drawn[rows] + (np.arange(len(rows)) - np.repeat(np.cumsum(new) - new, new))
        states = self.env.initial_states([self._rngs[i] for i in rows.tolist()])
        device = self.pool.device
        self.pool[torch.from_numpy(rows).to(device), torch.from_numpy(draws % self.depth).to(device)] = (
            torch.from_numpy(states).to(device)
        )

    def settle(self) -> None:
        """Rewind each sub-env's generator to just after the draws its resets took (the rest stay unused)."""
        taken = self.taken.cpu().numpy()
        for i, rng in enumerate(self._rngs):
            if self._seen[i] + self.depth == taken[i]:  # every state drawn was taken
                continue
            rng.bit_generator.state = self._start[i]
            self.env.initial_states([rng] * int(taken[i]))
