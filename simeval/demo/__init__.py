"""``make demo`` (``python -m simeval.demo``): evaluate the shipped PPO training run on batched HalfCheetah-v5.

An application of its own on top of the launcher and the report: it runs them
as a user would (``simeval.launch.main``, ``simeval.report``'s CLI) and is
imported by nothing.

Runs the launcher on its embedded defaults (``--watch`` the shipped run's
checkpoints, thread backend, 8 envs, 16 episodes, seed 0): the eval curve of
the training run. Then two reference rows on the final checkpoint: the
trained policy without its VecNorm statistics, and an untrained policy of the
same architecture. Prints the table, the machine it came from (CPU model and
numpy/torch/mujoco versions: :func:`~simeval.demo.fingerprint.fingerprint`), and
draws the curve with its 95% bands.
Then the shipped suite (``suites/halfcheetah-robustness.yaml``: nominal,
observation and action noise, action delay, heavier bodies, less friction),
the final checkpoint against the first, decided adaptively (``--until-decided``:
looks of 4 episodes on common seeds, each cell stopped once its anytime-valid
interval excludes 0, at most 16 episodes): the episodes used against a fixed
run's, and the comparison the files reproduce: the table, and ``compare.html``.
Last, the best of the shipped run's eight checkpoints chosen with a guarantee
(``--select-best --margin 50 --look-every 4 --max-episodes 32``): the selection table and
the episodes it used against a fixed 32-episode sweep's.
"""

from __future__ import annotations

import os
import time

from simeval import launch, load_checkpoint, save_checkpoint
from simeval.checkpoints.shipped import shipped_checkpoint
from simeval.demo.fingerprint import fingerprint
from simeval.envs import make_env
from simeval.policies import gaussian_actor


def main(argv: list[str] | None = None) -> int:
    """Run the demo (``argv`` is not used): the eval curve, the reference rows, the plot; 0, or 1 if a run failed."""
    from simeval.report import curves, runs  # NumPy: the demo's report, not the launcher's start

    root = os.path.join("runs", time.strftime("demo-%Y%m%d-%H%M%S"))
    trained = os.path.join(root, "trained")
    print("$ python -m simeval.launch --out", trained, flush=True)
    if launch.main(["--out", trained]) != 0:
        return 1

    # An untrained actor of the same architecture.
    import torch

    final = shipped_checkpoint()
    shipped = load_checkpoint(final)
    torch.manual_seed(0)
    env = make_env(shipped.env, num_envs=1)
    untrained = save_checkpoint(
        os.path.join(root, "untrained.pt"), gaussian_actor(env, **shipped.policy_kwargs), 0, env=shipped.env
    )
    env.close()
    references = {}
    for label, out, args in (
        ("final checkpoint, VecNorm stats left out", "no-vecnorm", ["--checkpoint", final, "--no-obs-norm"]),
        ("untrained policy", "untrained", ["--checkpoint", untrained]),
    ):
        out = os.path.join(root, out)
        print(f"\n$ python -m simeval.launch {' '.join(args)} --out {out}", flush=True)
        if launch.main([*args, "--out", out]) != 0:
            return 1
        references[label] = runs.read_results(out)[-1]

    curve = runs.read_results(trained)
    print(f"\n{shipped.env}, 16 episodes of 1000 steps per evaluation, seed 0 (the same initial states everywhere):\n")
    print(f"{'policy':<42}{'return':>10}{'95% CI':>22}")
    rows = [(f"trained, step {r['step']:>9,}", r) for r in curve] + list(references.items())
    for label, record in rows:
        m = record["metrics"]
        ci = "[{:.1f}, {:.1f}]".format(m["reward_ci_low"], m["reward_ci_high"])
        print(f"{label:<42}{m['reward']:>10.1f}{ci:>22}")
    png = curves.plot(
        {"training run (shipped checkpoints)": curve}, os.path.join(trained, "eval_curve.png"), references
    )
    print(f"\nmachine: {fingerprint()}")
    print(f"results: {os.path.join(trained, 'results.jsonl')}\nplot:    {png}")
    return _suite_part(root, curve)


def _suite_part(root: str, curve: list[dict]) -> int:
    """The shipped suite, final against first checkpoint, decided cell by cell on common seeds; then compared."""
    from simeval.report import cli

    suite = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "suites", "halfcheetah-robustness.yaml")
    suite = os.path.relpath(os.path.normpath(suite))
    out = os.path.join(root, "suite")
    args = ["--suite", suite, "--checkpoint", curve[-1]["checkpoint"], "--baseline", curve[0]["checkpoint"]]
    args += ["--until-decided", "--max-episodes", "16", "--look-every", "4", "--out", out]
    print(f"\n$ python -m simeval.launch {' '.join(args)}", flush=True)
    if launch.main(args) != 0:
        return 1
    html = os.path.join(root, "compare.html")
    args = ["compare", os.path.join(out, "a"), os.path.join(out, "b"), "--html", html]
    print(f"\n$ python -m simeval.report {' '.join(args)}", flush=True)
    if cli.main(args) != 0:
        return 1
    return _selection_part(root)


def _selection_part(root: str) -> int:
    """The best of the shipped run's checkpoints, chosen look by look on common seeds (``--select-best``)."""
    from simeval.checkpoints.shipped import SHIPPED_RUN

    out = os.path.join(root, "select-best")
    args = ["--select-best", "--watch", os.path.relpath(SHIPPED_RUN), "--margin", "50", "--look-every", "4"]
    args += ["--max-episodes", "32", "--out", out]
    print(f"\n$ python -m simeval.launch {' '.join(args)}", flush=True)
    return launch.main(args)
