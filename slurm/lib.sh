# shellcheck shell=bash
# Sourced by the sbatch scripts: run the launcher, forward SIGTERM to it, requeue after a signal.
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
