"""Observation history and action chunks, per sub-env: how the worker runs a policy that declares them.

:class:`ActingPolicy` sits between the env and a policy whose :class:`~simeval.policy_kinds.Acting`
is not plain. It keeps, for every sub-env, its last ``history`` observations and its current
chunk of actions, and clears both when the sub-env's episode restarts (torchrl's
``InitTracker`` flag ``is_init``, which the worker adds to the env). The policy is called
only for the sub-envs that need new actions (``execute`` steps since their last call, or
their episode restarted), on their rows alone, so a sub-env's actions do not depend on the others'.

It is also where ``inference_delay``'s chunk-tail mode is played (``{steps: d, while_waiting:
tail}``, :mod:`simeval.conditions`): the env sees one action per step, the chunks live here.
The worker hands it each sub-env's delay (:func:`simeval.envs.perturb.chunk_tail_delays`). A
chunk is then indexed by time: entry ``i`` of the answer to the query at step ``t`` is step
``t + i``'s action. The answer arrives at ``t + d``, so its entries ``0 .. d - 1`` are stale and
it plays from entry ``d``; until it arrives the previous chunk plays on (its tail); a chunk
played past its end holds its last entry; before an episode's first answer the action is zero.
The policy answers one query at a time: it is asked every ``max(execute, d)`` steps. With
``d = 0`` this is the plain schedule, step for step.
"""

from __future__ import annotations

from collections.abc import Callable
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
            (``[n, act_dim]`` with a chunk of 1). A policy whose ``in_keys`` are other observation
            keys (a LeRobot policy's ``observation.image`` and ``observation.state``, say) gets those
            keys of the rows it is asked for, with a history of 1.
        acting: what the policy declares.
        delays: where the env's condition is ``inference_delay`` with ``while_waiting: tail``: a function
            giving each sub-env's delay in steps for its current episode ([n] integers), read at every
            step (see the module docstring); None: no delay.
    """

    def __init__(self, policy: Any, acting: Acting, delays: Callable[[], torch.Tensor] | None = None) -> None:
        super().__init__()
        self.policy, self.acting, self.delays = policy, acting, delays
        keys = [k for k in getattr(policy, "in_keys", ["observation"]) if k != INIT_KEY] or ["observation"]
        if keys != ["observation"] and acting.history > 1:
            raise ValueError(
                f"a policy reading {len(keys)} observation keys cannot declare a history of {acting.history}: "
                "stack frames in the env instead (frame_stack)."
            )
        self.obs_keys = keys
        self.in_keys, self.out_keys = [*keys, INIT_KEY], ["action"]
        self._history: torch.Tensor | None = None  # [n, history, obs_dim]
        self._chunk: torch.Tensor | None = None  # [n, chunk, act_dim]: the chunk playing
        self._pending: torch.Tensor | None = None  # [n, chunk, act_dim]: the answer on its way
        self._steps: dict[str, torch.Tensor] = {}  # [n] each: see _restart

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Set "action" for every sub-env: its chunk's entry for this step, the policy called where one is due."""
        if self.obs_keys == ["observation"]:
            obs = tensordict.get("observation")
            lead = obs.shape[:-1]
            flat = obs.reshape(-1, obs.shape[-1])
        else:  # several keys: the rows' TensorDict of them (a history of 1)
            lead = tensordict.batch_size
            flat = tensordict.select(*self.obs_keys).reshape(-1)
        n = flat.shape[0]
        device = tensordict.get(INIT_KEY).device
        starts = tensordict.get(INIT_KEY).reshape(n).to(torch.bool)
        s = self._steps
        if not s or s["t"].shape[0] != n or s["t"].device != device:
            starts = torch.ones(n, dtype=torch.bool, device=device)
            self._history = self._chunk = self._pending = None
            s = self._steps = {
                name: torch.zeros(n, dtype=torch.long, device=device) for name in ("t", "next", "asked", "base")
            }
            s |= {name: torch.zeros(n, dtype=torch.bool, device=device) for name in ("playing", "waiting")}
        self._restart(starts)
        seen = self._observe(flat, starts)
        delay = self._delay(n, device)
        self._arrive(delay)
        ask = s["t"] >= s["next"]
        if bool(ask.any()):
            rows = ask.nonzero().reshape(-1)
            self._ask(rows, seen[rows], delay[rows])
            self._arrive(delay)  # a delay of 0: the answer plays at once
        entry = (s["t"] - s["base"]).clamp(0, self.acting.chunk - 1)
        action = self._chunk[torch.arange(n, device=device), entry]
        action = torch.where(s["playing"].reshape(n, *[1] * (action.dim() - 1)), action, torch.zeros_like(action))
        s["t"] += 1
        tensordict.set("action", action.reshape(*lead, *action.shape[1:]))
        return tensordict

    def _restart(self, starts: torch.Tensor) -> None:
        """Sub-envs ``starts`` begin an episode: step 0, a query due now, no chunk playing and none on its way.

        ``t``: the episode's step; ``next``: the step of the next query; ``asked``: the step of the query on its
        way (``waiting``); ``base``: the step of the query whose answer plays (``playing``), its entry 0's step.
        """
        s = self._steps
        for name in ("t", "next"):
            s[name][starts] = 0
        for name in ("playing", "waiting"):
            s[name][starts] = False

    def _delay(self, n: int, device: torch.device) -> torch.Tensor:
        """Each sub-env's inference delay in steps ([n] long): the condition's, or zeros."""
        if self.delays is None:
            return torch.zeros(n, dtype=torch.long, device=device)
        delay = self.delays().reshape(-1).to(device=device, dtype=torch.long)
        if delay.shape[0] != n:
            raise ValueError(f"the env's inference delays are for {delay.shape[0]} sub-envs, the policy sees {n}.")
        return delay

    def _arrive(self, delay: torch.Tensor) -> None:
        """Answers whose delay has passed replace the chunk playing."""
        s = self._steps
        due = s["waiting"] & (s["t"] >= s["asked"] + delay)
        if bool(due.any()):
            self._chunk[due] = self._pending[due]
            s["base"][due] = s["asked"][due]
            s["playing"][due] = True
            s["waiting"][due] = False

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

    def _ask(self, rows: torch.Tensor, seen: torch.Tensor | TensorDictBase, delay: torch.Tensor) -> None:
        """Call the policy on ``rows``' observations; the answer is on its way until its delay has passed."""
        if isinstance(seen, TensorDictBase):
            td = seen
        else:
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
            n = self._steps["t"].shape[0]
            self._chunk = torch.zeros(n, *out.shape[1:], dtype=out.dtype, device=out.device)
            self._pending = torch.zeros_like(self._chunk)
        s = self._steps
        self._pending[rows] = out
        s["asked"][rows] = s["t"][rows]
        s["waiting"][rows] = True
        s["next"][rows] = s["t"][rows] + delay.clamp(min=self.acting.steps_per_call)
