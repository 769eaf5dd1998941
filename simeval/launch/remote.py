"""``--policy-server URL``: a source of one "checkpoint" that is a policy served elsewhere.

The policy lives in the server, so the checkpoint holds no weights and no VecNorm statistics
(the server normalises what it is sent, as ``python -m simeval.serve_policy`` does); its policy is
the remote client (:func:`simeval.policy_kinds.remote.remote_policy`, which the config names with
the server's address). Results lines name the server's address as the checkpoint, format ``remote``.
"""

from __future__ import annotations

from simeval.checkpoints import Checkpoint
from simeval.extras import REMOTE_MODULES, require_extra
from simeval.launch.config import LaunchConfig


def remote_checkpoint(cfg: LaunchConfig) -> Checkpoint:
    """The checkpoint standing for ``cfg.policy_server``: step 0, the run's ``--env``, no weights."""
    require_extra(REMOTE_MODULES, "remote", "--policy-server")
    from tensordict import TensorDict

    return Checkpoint(path=cfg.policy_server, step=0, env=None, policy=TensorDict(), meta={"format": "remote"})
