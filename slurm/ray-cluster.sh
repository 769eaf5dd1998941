#!/bin/bash
# A Ray cluster over a Slurm allocation, then `python -m simeval.launch --backend ray` against it.
#
#   sbatch --nodes=2 slurm/ray-cluster.sh --num-gpus 1 --watch runs/exp1/ckpt
#
# Ray's documented Slurm recipe: one `ray start --head --block` on the first node,
# one `ray start --address=HEAD --block` per other node (each an srun step), with
# explicit CPU and GPU counts and ports, then the driver in the batch step. The
# workers and the driver start once the head answers (`ray health-check`); a head
# that exits, or does not answer within SIMEVAL_RAY_HEAD_TIMEOUT seconds (default
# 120), fails the job with one line on stderr. The cluster stops when the driver
# ends (the srun steps are killed by PID; never `ray stop`, which kills every Ray
# process on a shared node). Ports default to a range derived from the job id so
# several jobs can share a node.
#
#SBATCH --job-name=simeval-ray
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=8
#SBATCH --mem=32G
#SBATCH --time=04:00:00
#SBATCH --output=simeval-ray-%j.out
#SBATCH --error=simeval-ray-%j.err
#SBATCH --open-mode=append
#SBATCH --requeue
#SBATCH --signal=B:TERM@120

set -uo pipefail
cd "${SIMEVAL_HOME:-${SLURM_SUBMIT_DIR:-.}}" || exit 2
# shellcheck source=slurm/lib.sh
source slurm/lib.sh

# Every numeric setting, checked before any use: a bad one is one line on stderr and exit 2.
many=999999999
job_id=$(whole_number SLURM_JOB_ID "${SLURM_JOB_ID:-0}" 0 "$many") || exit 2
# Ray's ports: BASE (GCS), BASE+1, BASE+2 and BASE+10..BASE+99 (workers); from the job id unless set.
base_port=$(whole_number SIMEVAL_RAY_BASE_PORT "${SIMEVAL_RAY_BASE_PORT:-$((20000 + (job_id % 400) * 100))}" \
    1024 65436) || exit 2
head_timeout=$(whole_number SIMEVAL_RAY_HEAD_TIMEOUT "${SIMEVAL_RAY_HEAD_TIMEOUT:-120}" 1 "$many") || exit 2
cpus=$(whole_number SLURM_CPUS_PER_TASK "${SLURM_CPUS_PER_TASK:-1}" 0 "$many") || exit 2
# GPUs per node: as many as CUDA_VISIBLE_DEVICES lists (what Slurm's --gres gave), unless set.
gpus=$(whole_number SIMEVAL_RAY_GPUS_PER_NODE \
    "${SIMEVAL_RAY_GPUS_PER_NODE:-$(awk -F, '{print NF}' <<<"${CUDA_VISIBLE_DEVICES:-}")}" 0 "$many") || exit 2

# The srun steps of the Ray cluster, stopped by PID when the script exits.
steps=()
cleanup() { for pid in "${steps[@]}"; do kill -TERM "$pid" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT
# Stop the cluster, then fail the job with one line, the last of its .err file.
fail() { trap - EXIT; cleanup; echo "simeval ray job ${SLURM_JOB_ID:-?}: $*" >&2; exit 1; }

python="${SIMEVAL_PYTHON:-.venv/bin/python}"
[[ -x "$python" ]] || python=python3
ray_bin="$(dirname "$python")/ray"
[[ -x "$ray_bin" ]] || ray_bin=ray

mapfile -t nodes < <(scontrol show hostnames "${SLURM_JOB_NODELIST}")
head_node="${nodes[0]}"
head_ip="${SIMEVAL_RAY_HEAD_IP:-$(srun --overlap --nodes=1 --ntasks=1 -w "$head_node" hostname --ip-address | awk '{print $1}')}"
port=$base_port
temp_dir="${SIMEVAL_RAY_TMPDIR:-/tmp/ray-${SLURM_JOB_ID:-$$}}"
ports=(--node-manager-port=$((base_port + 1)) --object-manager-port=$((base_port + 2))
       --min-worker-port=$((base_port + 10)) --max-worker-port=$((base_port + 99)))

# Ray's token authentication with a token of this job's own, exported to every srun step
# and to the driver (only processes of this job can join or submit work).
export RAY_AUTH_MODE=token
export RAY_AUTH_TOKEN="${RAY_AUTH_TOKEN:-$("$python" -c 'import secrets; print(secrets.token_hex(32))')}"

echo "simeval ray job ${SLURM_JOB_ID:-?}: head ${head_node} (${head_ip}:${port}), ${#nodes[@]} node(s)," \
     "${cpus} CPUs and ${gpus} GPUs per node, CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-<unset>}"

srun --overlap --nodes=1 --ntasks=1 -w "$head_node" \
    "$ray_bin" start --head --block --node-ip-address="$head_ip" --port="$port" "${ports[@]}" \
    --num-cpus="$cpus" --num-gpus="$gpus" --include-dashboard=false --disable-usage-stats \
    --temp-dir="$temp_dir" &
head_step=$!
steps+=("$head_step")

# Wait until the head answers (`ray health-check` reaches its GCS with this job's token, so
# another job's head on the same port does not count), at most SIMEVAL_RAY_HEAD_TIMEOUT
# seconds; fail at once if the head's srun step has ended. Each probe gives up on an
# unreachable GCS after a few seconds instead of Ray's 40 s default.
started=$SECONDS
deadline=$((started + head_timeout))
until RAY_py_gcs_connect_timeout_s=2 RAY_gcs_rpc_server_connect_timeout_s=2 \
        timeout 20 "$ray_bin" health-check --address="${head_ip}:${port}" >/dev/null 2>&1; do
    if ! kill -0 "$head_step" 2>/dev/null; then
        wait "$head_step"
        fail "the Ray head on ${head_node} exited (status $?) before it answered at ${head_ip}:${port};" \
             "its own messages are in this job's output files."
    fi
    if ((SECONDS >= deadline)); then
        fail "the Ray head on ${head_node} did not answer at ${head_ip}:${port} within ${head_timeout} s" \
             "(SIMEVAL_RAY_HEAD_TIMEOUT); its own messages are in this job's output files."
    fi
    sleep 1
done
echo "Ray head answered at ${head_ip}:${port} after $((SECONDS - started)) s."

for node in "${nodes[@]:1}"; do
    srun --overlap --nodes=1 --ntasks=1 -w "$node" \
        "$ray_bin" start --block --address="${head_ip}:${port}" "${ports[@]}" \
        --num-cpus="$cpus" --num-gpus="$gpus" --disable-usage-stats &
    steps+=($!)
done

export RAY_ADDRESS="${head_ip}:${port}"
run_and_requeue_on_term "$python" -m simeval.launch --backend ray "$@"
