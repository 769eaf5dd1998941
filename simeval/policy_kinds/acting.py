"""Observation history and action chunks, per sub-env: how the worker runs a policy that declares them.

:class:`ActingPolicy` sits between the env and a policy whose :class:`~simeval.policy_kinds.Acting`
is not plain. It keeps, for every sub-env, its last ``history`` observations and the rest of
its current chunk of actions, and clears both when the sub-env's episode restarts (torchrl's
``InitTracker`` flag ``is_init``, which the worker adds to the env). The policy is called
only for the sub-envs that need new actions (their chunk is played out, or their episode
restarted), on their rows alone, so a sub-env's actions do not depend on the others'.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase

from simeval.policy_kinds.base import Acting

INIT_KEY = "is_init"


class ActingPolicy(TensorDictModuleBase):
    """``policy`` run with ``acting``'s observation history and action chunks ("observation", "is_init" -> "action").

    Args:
        policy: the policy ("observation" -> "action"): it reads ``[n, history, obs_dim]``
            (``[n, obs_dim]`` with a history of 1) and answers ``[n, chunk, act_dim]``
            (``[n, act_dim]`` with a chunk of 1).
        acting: what the policy declares.
    """

    def __init__(self, policy: Any, acting: Acting) -> None:
        super().__init__()
        self.policy, self.acting = policy, acting
        self.in_keys, self.out_keys = ["observation", INIT_KEY], ["action"]
        self._history: torch.Tensor | None = None  # [n, history, obs_dim]
        self._chunk: torch.Tensor | None = None  # [n, chunk, act_dim]
        self._index: torch.Tensor | None = None  # [n]: the next action of each sub-env's chunk

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Set "action" for every sub-env: the next of its chunk, the policy called where a chunk is needed."""
        obs = tensordict.get("observation")
        lead = obs.shape[:-1]
        flat = obs.reshape(-1, obs.shape[-1])
        n = flat.shape[0]
        starts = tensordict.get(INIT_KEY).reshape(n).to(torch.bool)
        if self._index is None or self._index.shape[0] != n or self._index.device != flat.device:
            starts = torch.ones(n, dtype=torch.bool, device=flat.device)
            self._index = torch.zeros(n, dtype=torch.long, device=flat.device)
            self._history = self._chunk = None
        seen = self._observe(flat, starts)
        call = starts | (self._index >= self.acting.steps_per_call)
        if bool(call.any()):
            rows = call.nonzero().reshape(-1)
            self._answer(rows, seen[rows])
        action = self._chunk[torch.arange(n, device=flat.device), self._index]
        self._index += 1
        tensordict.set("action", action.reshape(*lead, *action.shape[1:]))
        return tensordict

    def _observe(self, flat: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
        """What the policy reads for every sub-env: its observation, or its last ``history`` of them."""
        k = self.acting.history
        if k == 1:
            return flat
        if self._history is None:
            self._history = flat.unsqueeze(1).repeat(1, k, 1)
        else:
            self._history = torch.cat([self._history[:, 1:], flat.unsqueeze(1)], dim=1)
            self._history[starts] = flat[starts].unsqueeze(1).expand(-1, k, -1)
        return self._history

    def _answer(self, rows: torch.Tensor, seen: torch.Tensor) -> None:
        """Call the policy on ``rows``' observations; their chunks restart from its answer."""
        td = TensorDict({"observation": seen}, batch_size=[rows.shape[0]], device=seen.device)
        out = self.policy(td).get("action")
        chunk = self.acting.chunk
        if chunk == 1:
            out = out.unsqueeze(1)
        elif out.dim() < 3 or out.shape[1] != chunk:
            raise ValueError(
                f"the policy declares chunks of {chunk} actions but answered an action of shape "
                f"{tuple(out.shape)}: expected [n, {chunk}, act_dim]."
            )
        if self._chunk is None:
            self._chunk = torch.zeros(self._index.shape[0], *out.shape[1:], dtype=out.dtype, device=out.device)
        self._chunk[rows] = out
        self._index[rows] = 0
