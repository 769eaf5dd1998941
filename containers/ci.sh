#!/usr/bin/env bash
# Build the eval image and run the MuJoCo tests inside it, on a GPU when one is present.
#
#   containers/ci.sh                                       # docker from PATH, base python:3.11-slim-bookworm
#   BASE_IMAGE=local/debian:bookworm TORCH_SPEC=torch==2.13.0 containers/ci.sh
#   SIMEVAL_CONTAINER_TESTS="tests/test_api.py" containers/ci.sh   # only these test files inside
#
# Used by .github/workflows/gpu-container.yml on a self-hosted GPU runner.
set -euo pipefail
cd "$(dirname "$0")/.."

docker_bin="${DOCKER:-docker}"
require_all="${SIMEVAL_REQUIRE_ALL:-0}"
if [[ ! "$require_all" =~ ^[01]$ ]]; then
    echo "containers/ci.sh: SIMEVAL_REQUIRE_ALL must be 0 or 1, got '${require_all//$'\n'/ }'." >&2
    exit 2
fi
image="${SIMEVAL_IMAGE_TAG:-simeval:ci}"
build_args=(--build-arg "BASE_IMAGE=${BASE_IMAGE:-python:3.11-slim-bookworm}")
[[ -n "${TORCH_SPEC:-}" ]] && build_args+=(--build-arg "TORCH_SPEC=${TORCH_SPEC}")

"$docker_bin" build --network host "${build_args[@]}" -f containers/Dockerfile -t "$image" .

gpus=()
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    gpus=(--gpus all)
fi
# SIMEVAL_CONTAINER_TESTS (space-separated test files) narrows the set: the host's test suite, which runs every one
# of these files itself, asks only for what shows that the image works.
read -r -a tests <<< "${SIMEVAL_CONTAINER_TESTS:-tests/test_envs.py tests/test_native_envs.py tests/test_metrics.py tests/test_api.py tests/test_checkpoint.py}"
# SIMEVAL_REQUIRE_ALL=1 (set by .ci/run) makes a skipped test inside the image a failure too.
"$docker_bin" run --rm --network none "${gpus[@]}" --env "SIMEVAL_REQUIRE_ALL=${require_all}" \
    --workdir /opt/simeval --entrypoint python "$image" \
    -m pytest -q -p no:cacheprovider "${tests[@]}"
