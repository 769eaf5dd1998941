"""A real single-node Slurm (munged, slurmctld, slurmd) on 127.0.0.1 for the tests.

Everything lives in a private temporary directory named by SLURM_CONF; the
node declares one GPU gres backed by a stand-in device file, so a job with
``--gres=gpu:1`` sees ``CUDA_VISIBLE_DEVICES=0`` as on a GPU node. Daemons
are stopped by the PIDs they wrote. Needs root; installs the Debian packages
when they are missing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator

from root_services import apt_install

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")


def ensure_installed() -> None:
    apt_install(("slurmctld", "slurmd", "sbatch", "munged"), PACKAGES)


def _munge_works() -> bool:
    enc = subprocess.run(["munge", "-n"], capture_output=True)
    if enc.returncode != 0:
        return False
    return subprocess.run(["unmunge"], input=enc.stdout, capture_output=True).returncode == 0


def _start_munge() -> int | None:
    """Start munged unless one already answers; returns the PID we started."""
    if _munge_works():
        return None
    subprocess.run(["install", "-d", "-o", "munge", "-g", "munge", "-m", "755", "/run/munge"], check=True)
    subprocess.run(["runuser", "-u", "munge", "--", "/usr/sbin/munged"], check=True)
    for _ in range(50):
        if _munge_works():
            with open("/run/munge/munged.pid") as f:
                return int(f.read().strip())
        time.sleep(0.1)
    raise RuntimeError("munged did not start")


CONF = """\
ClusterName=simeval-test
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MailProg=/bin/true
EnforcePartLimits=ALL
GresTypes=gpu
ReturnToService=2
StateSaveLocation={base}/state
SlurmdSpoolDir={base}/spool
SlurmctldPidFile={base}/slurmctld.pid
SlurmdPidFile={base}/slurmd.pid
SlurmctldLogFile={base}/slurmctld.log
SlurmdLogFile={base}/slurmd.log
KillWait=10
# A requeued job may start again only when its old credential has expired (default 120 s), and a job
# whose begin time passes waits for the main scheduling loop (default every 60 s): short on one node.
AuthInfo=cred_expire=30
SchedulerParameters=sched_interval=2
MinJobAge=3600
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=4000 Gres=gpu:1 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill_pidfile(path: str, timeout: float = 15.0) -> None:
    try:
        with open(path) as f:
            pid = int(f.read().strip())
    except (OSError, ValueError):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, 15)
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, 9)


@contextlib.contextmanager
def slurm_cluster() -> Iterator[dict]:
    """Yield the environment (SLURM_CONF, ...) under which sbatch/scontrol reach the cluster."""
    ensure_installed()
    munge_pid = _start_munge()
    base = tempfile.mkdtemp(prefix="simeval-slurm-")
    host = socket.gethostname().split(".")[0]
    for sub in ("state", "spool", "dev"):
        os.makedirs(os.path.join(base, sub))
    gpu = os.path.join(base, "dev", "nvidia0")
    os.mknod(gpu, 0o666 | 0o020000, os.makedev(1, 3))  # a character device standing in for a GPU
    conf = os.path.join(base, "slurm.conf")
    with open(conf, "w") as f:
        f.write(
            CONF.format(
                host=host, base=base, cpus=os.cpu_count() or 2, ctld_port=_free_port(), slurmd_port=_free_port()
            )
        )
    with open(os.path.join(base, "gres.conf"), "w") as f:
        f.write(f"NodeName={host} Name=gpu File={gpu}\n")
    env = dict(os.environ, SLURM_CONF=conf)
    try:
        subprocess.run(["slurmctld", "-c", "-i"], env=env, check=True)
        subprocess.run(["slurmd"], env=env, check=True)
        deadline = time.time() + 60
        state = ""
        while time.time() < deadline:
            state = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True).stdout.strip()
            if state == "idle":
                break
            time.sleep(0.3)
        else:
            raise RuntimeError(f"the Slurm node did not become idle (state {state!r}); see {base}/slurmd.log")
        yield {"SLURM_CONF": conf, "SIMEVAL_SLURM_BASE": base}
    finally:
        _kill_pidfile(os.path.join(base, "slurmd.pid"))
        _kill_pidfile(os.path.join(base, "slurmctld.pid"))
        if munge_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(munge_pid, 15)
        shutil.rmtree(base, ignore_errors=True)


def job_state(job_id: str, env: dict) -> dict[str, str]:
    """JobState, ExitCode, Restarts, ... of a job (sacct needs accounting, which is off)."""
    out = subprocess.run(["scontrol", "show", "job", job_id], env=env, capture_output=True, text=True).stdout
    fields = {}
    for token in out.split():
        if "=" in token:
            key, value = token.split("=", 1)
            fields[key] = value
    return fields


def wait_for(job_id: str, env: dict, states=("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), timeout=300.0) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        info = job_state(job_id, env)
        if info.get("JobState") in states:
            return info
        time.sleep(0.5)
    raise TimeoutError(f"job {job_id} still {job_state(job_id, env).get('JobState')} after {timeout} s")
