#!/bin/bash
# Evaluate with simeval on one GPU of a Slurm node; arguments go to `python -m simeval.launch`.
#
#   sbatch slurm/eval.sh --config launchers/mujoco-halfcheetah.yaml --watch runs/exp1/ckpt
#   SIMEVAL_IMAGE=simeval.sif sbatch slurm/eval.sh --checkpoint runs/exp1/ckpt/step_000500000.pt
#
# Preemption and time-outs: Slurm sends SIGTERM to this script 120 s before the
# limit (--signal=B:TERM@120) or on preemption; it is forwarded to the launcher,
# which abandons the running round without writing a partial result, and the job
# requeues itself. A requeued --watch job resumes from OUT/results.jsonl: no
# checkpoint is lost or evaluated twice. Partition, account and QOS are site
# settings: pass them to sbatch (-p, -A, -q). See slurm/README.md.
#
#SBATCH --job-name=simeval-eval
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=4
#SBATCH --mem=16G
#SBATCH --time=04:00:00
#SBATCH --output=simeval-%j.out
#SBATCH --error=simeval-%j.err
#SBATCH --open-mode=append
#SBATCH --requeue
#SBATCH --signal=B:TERM@120

set -uo pipefail

# The batch script runs from a spool copy: work from where sbatch was called.
cd "${SIMEVAL_HOME:-${SLURM_SUBMIT_DIR:-.}}" || exit 2

# Evaluate on the GPU Slurm gave this job (it appears as cuda:0) when there is a driver, as a
# default only: the launcher uses SIMEVAL_DEFAULT_DEVICE when neither a flag (--device X,
# --device=X) nor the --config profile names a device. One already set is kept.
if [[ -z "${SIMEVAL_DEFAULT_DEVICE:-}" ]] && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    export SIMEVAL_DEFAULT_DEVICE=cuda:0
fi

echo "simeval job ${SLURM_JOB_ID:-?} (restart ${SLURM_RESTART_COUNT:-0}) on $(hostname):" \
     "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-<unset>}" \
     "SIMEVAL_DEFAULT_DEVICE=${SIMEVAL_DEFAULT_DEVICE:-<unset>}"

if [[ -n "${SIMEVAL_IMAGE:-}" ]]; then
    if [[ "${SIMEVAL_IMAGE}" == *.sif || "${SIMEVAL_IMAGE}" == *.simg ]]; then
        # Apptainer/Singularity: --nv binds the NVIDIA driver and its EGL libraries. The job's
        # environment (SIMEVAL_DEFAULT_DEVICE too) passes into the container in both cases.
        cmd=(apptainer exec --nv --bind "$PWD" --pwd "$PWD" "${SIMEVAL_IMAGE}" python -m simeval.launch)
    else
        # pyxis/enroot: an image reference or a .sqsh file.
        cmd=(srun --ntasks=1 --container-image="${SIMEVAL_IMAGE}" --container-mounts="$PWD:$PWD"
             --container-workdir="$PWD" python -m simeval.launch)
    fi
else
    python="${SIMEVAL_PYTHON:-.venv/bin/python}"
    [[ -x "$python" ]] || python=python3
    cmd=("$python" -m simeval.launch)
fi

source slurm/lib.sh
run_and_requeue_on_term "${cmd[@]}" "$@"
