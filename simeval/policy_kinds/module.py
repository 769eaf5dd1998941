"""In-process policies: a torch module (a TensorDictModule, a ProbabilisticActor) in the worker's process.

Weights stream into it (``trigger_eval``, ``--watch``); what it declares with
:func:`~simeval.policy_kinds.declare` says how its calls map onto env steps. It owns every
policy no other kind claims.
"""

from __future__ import annotations

from typing import Any

from simeval.policy_kinds.base import PolicyKind


class ModulePolicy(PolicyKind):
    """A callable on TensorDicts ("observation" -> "action") in the worker's process."""

    name = "module"
    title = "in-process module"

    def owns(self, policy: Any) -> bool:
        """Any callable: the fallback kind."""
        return callable(policy)
