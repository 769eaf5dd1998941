# shellcheck shell=bash
# Sourced by the sbatch scripts: check their numeric settings (whole_number); run the launcher, forward
# SIGTERM to it, requeue after a signal (run_and_requeue_on_term).
#
# Slurm signals only the batch shell (--signal=B:TERM@120, preemption). The launcher
# runs in the background so the trap can fire; it abandons its running round and exits,
# then the job requeues itself and a --watch job resumes from OUT/results.jsonl.

run_and_requeue_on_term() {
    local terminated=0 child status
    trap 'terminated=1; kill -TERM "$child" 2>/dev/null' TERM INT
    "$@" &
    child=$!
    # `wait` returns early when a trapped signal arrives: wait until the launcher is gone.
    while true; do
        wait "$child"
        status=$?
        kill -0 "$child" 2>/dev/null || break
    done
    if [[ "$terminated" == 1 && -n "${SLURM_JOB_ID:-}" ]]; then
        echo "simeval job ${SLURM_JOB_ID}: stopped by SIGTERM (launcher exit ${status}); requeueing."
        scontrol requeue "${SLURM_JOB_ID}"
        return 0
    fi
    return "$status"
}

# whole_number NAME VALUE MIN MAX: print VALUE (the setting NAME's) as a decimal number when it is a whole
# number from MIN to MAX; otherwise one line on stderr naming NAME, and status 2. VALUE is checked as text
# before any arithmetic sees it: bash arithmetic evaluates a value such as a[$(cmd)], which runs cmd.
#   base_port=$(whole_number SIMEVAL_RAY_BASE_PORT "${SIMEVAL_RAY_BASE_PORT:-20000}" 1024 65436) || exit 2
whole_number() {
    local name=$1 value=$2 min=$3 max=$4
    if [[ ! "$value" =~ ^[0-9]{1,9}$ ]] || ((10#$value < min || 10#$value > max)); then
        echo "simeval: ${name} must be a whole number from ${min} to ${max}, got '${value//$'\n'/ }'." >&2
        return 2
    fi
    echo $((10#$value))
}
