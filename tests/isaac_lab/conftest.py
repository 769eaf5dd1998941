"""The Isaac Lab session's shared script process (isaac_script.py): one Isaac Lab start for every scripted module."""

from __future__ import annotations

import pytest
from isaac_script import run_scripts


@pytest.fixture(scope="session")
def isaac_scripts(tmp_path_factory) -> dict:
    """What each of isaac_script.SCRIPTED's probes wrote (or its traceback), from one Isaac Lab process."""
    return run_scripts(tmp_path_factory.mktemp("isaac_scripts"))
