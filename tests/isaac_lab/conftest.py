"""The Isaac Lab session's shared script process (isaac_script.py): one Isaac Lab start for every scripted module."""

from __future__ import annotations

import pytest
from isaac_script import SCRIPTED, run_scripts


@pytest.fixture(scope="session")
def isaac_scripts(request, tmp_path_factory) -> dict:
    """What the probes of this session's isaac_script.SCRIPTED modules wrote (or their tracebacks), from one
    Isaac Lab process; a module this session did not collect is left out."""
    collected = {getattr(item, "module", None) and item.module.__name__ for item in request.session.items}
    return run_scripts(tmp_path_factory.mktemp("isaac_scripts"), [m for m in SCRIPTED if m in collected])
