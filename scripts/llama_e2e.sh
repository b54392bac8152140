#!/usr/bin/env bash
# End-to-end on real llama.cpp (slow: a clean build of llama-speculative takes ~3 min on 2 cores,
# ccache makes a rerun fast). Downloads the llama-cpp-python 0.3.36 sdist (cached), makes a local
# history with a planted defect, and runs the real bisectbot CLI on it. Exit 0 when every check
# holds. Set BISECTBOT_E2E_SERVER=0 to skip the llama-server reference check (~1.5 min more),
# BISECTBOT_E2E_CLUSTER=0 to skip the same bisect on a two-worker Dask cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
args=(e2e --seed "${BISECTBOT_E2E_SEED:-1}")
if [ "${BISECTBOT_E2E_SERVER:-1}" != 0 ]; then
    args+=(--server)
fi
exec python3 scripts/llama_e2e.py "${args[@]}"
