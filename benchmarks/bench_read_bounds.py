"""Peak memory of reading hostile data files, beside a genuine checkpoint: what docs/security.md's caps cost.

    python benchmarks/bench_read_bounds.py [--out DIR]

Each case runs ``simeval-launch`` (thread backend, 2 episodes of 30 steps on 2 sub-envs) in a
process of its own and reads that process's peak resident memory from the kernel (``wait4``).
The genuine checkpoint is the scale: a refused file should cost about what Python, torch and the
launcher cost before any file is read, never what the file claims. Not a test: it prints a table.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SMALL = ("--episodes", "2", "--num-envs", "2", "--max-steps", "30", "--backend", "thread")


GENUINE = os.path.join(ROOT, "simeval/data/halfcheetah_ppo/step_001001472.pt")


def _save(path: str, **fields) -> str:
    """The genuine checkpoint's file with ``fields`` replaced, written to ``path``."""
    import torch

    data = torch.load(GENUINE, weights_only=True)
    data.update(fields)
    torch.save(data, path)
    return path


def thousand_views(d: str) -> str:
    """1000 views of one 4 MiB storage: 4 MiB on disk, 4 GiB once every view is copied."""
    import torch

    base = torch.zeros(1024 * 1024)
    views = {f"v{i}": base.view(1024, 1024) for i in range(1000)}
    return _save(os.path.join(d, "views.pt"), policy=views, policy_factory="simeval.policies:mlp_policy",
                 policy_kwargs={"hidden": [27000, 27000]})  # fmt: skip


def expanded(d: str) -> str:
    """One float expanded to 50000 x 50000: 4 bytes on disk, 10 GB copied."""
    import torch

    return _save(os.path.join(d, "expanded.pt"), policy={"w": torch.zeros(1).expand(50000, 50000)})


def huge_policy(d: str) -> str:
    """The genuine weights with ``hidden: [60000, 60000]``: a 14 GB MLP to build."""
    return _save(os.path.join(d, "huge.pt"), policy_kwargs={"hidden": [60000, 60000]})


def zip_bomb(d: str) -> str:
    """A torch zip whose 1 GiB of zeros is re-deflated to about 1 MiB."""
    import torch

    buf = io.BytesIO()
    torch.save({"policy": {"w": torch.zeros(256 * 2**20)}}, buf)
    path = os.path.join(d, "bomb.pt")
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as src, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    return path


def yaml_bomb(d: str) -> str:
    """A suite whose aliases expand to 10^9 nodes (the billion laughs)."""
    lines = ['a0: &a0 ["lol"]'] + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    path = os.path.join(d, "bomb.yaml")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\ntasks: *a9\n")
    return path


def launch(args: list[str], out: str) -> tuple[float, int, str]:
    """Run the launcher; (peak RSS in MiB, exit code, its last stderr line).

    This process must stay small: a child's peak counts the memory it was forked with.
    """
    small = () if "--suite" in args else SMALL
    cmd = [os.path.join(os.path.dirname(sys.executable), "simeval-launch"), *args, *small, "--out", out]
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        lines = err.read().decode(errors="replace").strip().splitlines()
    return usage.ru_maxrss / 1024, proc.returncode, (lines[-1] if lines else "")


def make_gadgets(d: str) -> dict[str, str]:
    """Every hostile file, written under ``d``: case name -> path."""
    return {
        "views": thousand_views(d),
        "expanded": expanded(d),
        "huge": huge_policy(d),
        "zip": zip_bomb(d),
        "yaml": yaml_bomb(d),
    }


def main() -> int:
    """Build the gadgets in a child (torch stays out of this process), launch on each, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="keep the gadgets and runs here (default: a temporary directory)")
    parser.add_argument("--make", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.make:
        print(json.dumps(make_gadgets(args.make)))
        return 0
    d = args.out or tempfile.mkdtemp(prefix="read-bounds-")
    os.makedirs(d, exist_ok=True)
    made = subprocess.run([sys.executable, __file__, "--make", d], capture_output=True, text=True, check=True)
    g = json.loads(made.stdout.strip().splitlines()[-1])
    cases = [
        ("genuine checkpoint (evaluated)", ["--checkpoint", GENUINE]),
        ("1000 views of one 4 MiB storage", ["--checkpoint", g["views"]]),
        ("one float expanded to 50000 x 50000", ["--checkpoint", g["expanded"]]),
        ("hidden: [60000, 60000]", ["--checkpoint", g["huge"]]),
        ("zip of 1 GiB of zeros, deflated", ["--checkpoint", g["zip"]]),
        ("suite of 10^9 YAML nodes", ["--checkpoint", GENUINE, "--suite", g["yaml"]]),
    ]
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"{when}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    print(f"{'case':<38} {'file':>9} {'peak RSS':>9} {'exit':>4}  outcome")
    for i, (name, argv) in enumerate(cases):
        size = os.path.getsize(argv[-1])
        rss, code, line = launch(argv, os.path.join(d, f"out{i}"))
        shown = "evaluated" if code == 0 else line.split(": ", 2)[-1].replace(d + os.sep, "")[:100]
        print(f"{name:<38} {size / 2**20:>7.1f}Mi {rss:>7.0f}Mi {code:>4}  {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
