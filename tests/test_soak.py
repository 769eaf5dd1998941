"""Resources over many rounds do not grow: a short slice of benchmarks/soak.py (``make soak`` runs it long).

Open file descriptors, threads, live child processes and shared-memory segments of
this process and its descendants are the same after warm-up and at the end, and
resident memory grows by less than the slack, over rounds on the thread and process
backends and over a ``--watch --suite`` launcher taking checkpoints as they arrive.
"""

from __future__ import annotations

import pytest
import soak

pytestmark = pytest.mark.timeout(900)


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_many_rounds_leave_no_growth(backend):
    samples = soak.soak_backend(backend, rounds=60, every=10)
    assert soak.verdict(samples, rss_slack_mb=64.0) == [], samples


def test_a_watch_suite_launcher_leaves_no_growth():
    samples = soak.soak_watch_suite(checkpoints=6, interval=1.0, every=2)
    assert soak.verdict(samples, rss_slack_mb=64.0) == [], samples
