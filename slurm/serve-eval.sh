#!/bin/bash
# Serve a checkpoint's policy in one Slurm step and evaluate it from the batch step through --policy-server,
# on the node's loopback. Arguments before `--` go to `python -m simeval.serve_policy` (the checkpoint
# first), those after it to `python -m simeval.launch`:
#
#   sbatch slurm/serve-eval.sh runs/exp1/ckpt/step_000500000.pt -- --num-envs 64 --episodes 100
#   sbatch slurm/serve-eval.sh runs/pix/step_1.pt --policy mypkg.nets:pixel_actor --cameras track \
#       -- --cameras track --num-envs 64 --episodes 100
#   SIMEVAL_IMAGE=simeval.sif sbatch slurm/serve-eval.sh ...      # both steps in the image
#
# The server step (srun --overlap) binds 127.0.0.1 on a free port and gets the job's GPU (--device cuda:0
# when a driver answers and no --device is given); the launcher in the batch step steps the simulators
# on the CPUs and reaches it at ws://127.0.0.1:PORT. Each job makes its own token, in the environment of
# both steps only. The launcher gets the server's env (--env) unless given one. When the launcher ends,
# the server is stopped (SIGTERM: it prints what it served to the .err file). SIGTERM before the time
# limit or on preemption: as slurm/eval.sh, the launcher stops cleanly and the job requeues itself.
# SIMEVAL_SERVER_TIMEOUT (seconds, default 300): how long the server may take to listen.
#
#SBATCH --job-name=simeval-serve-eval
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

cd "${SIMEVAL_HOME:-${SLURM_SUBMIT_DIR:-.}}" || exit 2
source slurm/lib.sh

serve_args=()
while (($#)) && [[ "$1" != "--" ]]; do
    serve_args+=("$1")
    shift
done
if ((${#serve_args[@]} == 0 || $# == 0)); then
    echo "simeval: slurm/serve-eval.sh takes CHECKPOINT [serve_policy flags] -- [launcher flags]." >&2
    exit 2
fi
shift  # the --
timeout=$(whole_number SIMEVAL_SERVER_TIMEOUT "${SIMEVAL_SERVER_TIMEOUT:-300}" 1 86400) || exit 2

has_flag() {  # has_flag FLAG ARGS...: whether FLAG (or FLAG=...) is among ARGS
    local flag=$1 arg
    shift
    for arg in "$@"; do
        [[ "$arg" == "$flag" || "$arg" == "$flag="* ]] && return 0
    done
    return 1
}

device=()
if ! has_flag --device "${serve_args[@]}" && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    device=(--device cuda:0)
fi
SIMEVAL_POLICY_SERVER_TOKEN=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
export SIMEVAL_POLICY_SERVER_TOKEN

# How each step runs Python: in SIMEVAL_IMAGE (Apptainer for .sif, else pyxis), else the venv's.
step=(srun --ntasks=1 --overlap)
if [[ -n "${SIMEVAL_IMAGE:-}" ]]; then
    if [[ "${SIMEVAL_IMAGE}" == *.sif || "${SIMEVAL_IMAGE}" == *.simg ]]; then
        python=(apptainer exec --nv --bind "$PWD" --pwd "$PWD" "${SIMEVAL_IMAGE}" python)
    else
        step+=(--container-image="${SIMEVAL_IMAGE}" --container-mounts="$PWD:$PWD" --container-workdir="$PWD")
        python=(python)
    fi
else
    venv="${SIMEVAL_PYTHON:-.venv/bin/python}"
    [[ -x "$venv" ]] || venv=python3
    python=("$venv")
fi

log=$(mktemp "${TMPDIR:-/tmp}/simeval-serve-${SLURM_JOB_ID:-$$}.XXXXXX") || exit 2
"${step[@]}" --job-name=simeval-policy-server "${python[@]}" -m simeval.serve_policy "${serve_args[@]}" "${device[@]}" --host 127.0.0.1 --port 0 \
    >"$log" &
server=$!

# SIGTERM to srun would end the step at once (srun: forcing job termination): signal the step's task
# itself through scancel, so that the server stops cleanly and prints what it served.
stop_server() {
    local steps
    steps=$(squeue --steps --jobs "${SLURM_JOB_ID:-0}" --noheader --format "%i %j" 2>/dev/null |
        awk '$2 == "simeval-policy-server" { print $1 }')
    if [[ -n "$steps" ]]; then
        # shellcheck disable=SC2086 # one step id per word
        scancel --signal=TERM $steps
    else
        kill -TERM "$server" 2>/dev/null
    fi
    wait "$server" 2>/dev/null
    cat "$log"
    rm -f "$log"
}

# The server's ready line: "serving CHECKPOINT (ENV, step N) on ws://127.0.0.1:PORT".
ready='^serving .* \(([^(),[:space:]]+), step -?[0-9]+\) on ws://127\.0\.0\.1:([0-9]+)$'
env_name="" port=""
for ((tick = 0; tick < timeout * 5; tick++)); do
    while IFS= read -r line; do
        if [[ "$line" =~ $ready ]]; then
            env_name=${BASH_REMATCH[1]} port=${BASH_REMATCH[2]}
        fi
    done <"$log"
    [[ -n "$port" ]] && break
    if ! kill -0 "$server" 2>/dev/null; then
        wait "$server"
        status=$?
        cat "$log"
        rm -f "$log"
        echo "simeval serve-eval job ${SLURM_JOB_ID:-?}: the policy server's step exited (${status}) before it listened; its error is above." >&2
        exit 1
    fi
    sleep 0.2
done
if [[ -z "$port" ]]; then
    stop_server
    echo "simeval serve-eval job ${SLURM_JOB_ID:-?}: the policy server did not listen within ${timeout} s (SIMEVAL_SERVER_TIMEOUT)." >&2
    exit 1
fi
echo "simeval job ${SLURM_JOB_ID:-?} (restart ${SLURM_RESTART_COUNT:-0}) on $(hostname): policy server" \
     "for ${env_name} on ws://127.0.0.1:${port}"

launch=("${python[@]}" -m simeval.launch)
if [[ -n "${SIMEVAL_IMAGE:-}" && "${SIMEVAL_IMAGE}" != *.sif && "${SIMEVAL_IMAGE}" != *.simg ]]; then
    launch=("${step[@]}" python -m simeval.launch)
fi
extra=(--policy-server "ws://127.0.0.1:${port}")
has_flag --env "$@" || extra+=(--env "$env_name")
run_and_requeue_on_term "${launch[@]}" "$@" "${extra[@]}"
status=$?
stop_server
exit "$status"
