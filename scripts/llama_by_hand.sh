#!/usr/bin/env bash
# The real-llama.cpp runs CI leaves out to stay within its hour (docs/llama.md, "Real llama.cpp"),
# run by hand before a release or after a change to what they cover. Each prints its own verdict
# and exits non-zero when a check fails; this stops at the first that does.
#
#   sampling-refactor      llama.cpp #9294 in llama-speculative (0.2.88 … 0.3.2), from init --llama
#   server-repeat-penalty  the default repeat penalty in llama-server's /completion (0.2.55 … 0.2.60)
#   repeat-penalty         the same change through llama-cli (9 minutes)
#   same-outputs           the shipped config's -O1 build against cmake's -O3 default, 200 seeds
#
# Each keeps its work under ${BISECTBOT_CACHE:-~/.cache/bisectbot}; what each found and took when
# last run is in docs/llama.md.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 scripts/llama_eras.py e2e --history sampling-refactor
python3 scripts/llama_eras.py e2e --history server-repeat-penalty
python3 scripts/llama_eras.py e2e --history repeat-penalty
python3 scripts/llama_e2e.py same-outputs
