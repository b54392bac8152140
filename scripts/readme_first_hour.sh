#!/usr/bin/env bash
# A newcomer's first hour, literally: in a fresh `git clone` of this repository (its committed
# HEAD), with a minimal environment (env -i: HOME, PATH=/usr/bin:/bin, nothing else, so python3 is
# the system interpreter, externally managed on Debian 12), the README's first ```sh block
# (apt-get, venv, install, the demo) and its second (the tests) are run as written, each with
# `bash -e`. Then the same again in a second fresh clone, from inside an already active virtual
# environment. Exit 0 when the demo named its planted commit (exit 0) and the tests passed, both
# times. Runs as root (the README's first line is apt-get). Took 4.4 minutes for both passes on 2
# cores (the fresh HOME's pip cache filled by the first pass; most of the time the two demo bisects).
#
# FIRST_HOUR_TESTS: what the test block runs. The block is run unchanged; pytest reads extra
# arguments from PYTEST_ADDOPTS. Default: tests/test_doctor.py tests/test_packaging.py (the
# doctor, the Dockerfile lint, the type check and the README/CI checks: what the [test] extra
# brings); "all" runs the whole default suite, as the README says (CI runs that already, in
# .ci/run, before this script).
#
# The one thing taken from the caller's home is pip's user configuration (~/.config/pip/pip.conf,
# e.g. a package index mirror), copied into the fresh HOME, since it is the machine's way to
# reach packages, not part of the README's commands.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tests=${FIRST_HOUR_TESTS:-tests/test_doctor.py tests/test_packaging.py}
[ "$tests" = all ] && tests=""

if [ "$(id -u)" != 0 ]; then
    echo "readme_first_hour: run as root: the README's first command is apt-get (as a user: sudo $0)" >&2
    exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/first-hour.XXXXXX")
trap 'rm -rf "$work"' EXIT
home="$work/home"
mkdir -p "$home"
if [ -f "${HOME:-/nonexistent}/.config/pip/pip.conf" ]; then
    mkdir -p "$home/.config/pip"
    cp "$HOME/.config/pip/pip.conf" "$home/.config/pip/pip.conf"
fi

# Two fresh clones of one commit (HEAD may move while the first pass runs), and the first two
# ```sh blocks of its README, as files.
git clone -q "$repo" "$work/clone"
git clone -q "$work/clone" "$work/clone-in-venv"
echo "readme_first_hour: $(git -C "$work/clone" log -1 --format='%h %s' | cut -c1-100)"
/usr/bin/python3 - "$work/clone/README.md" "$work" <<'EOF'
import re, sys
from pathlib import Path
blocks = re.findall(r"^```sh\n(.*?)^```", Path(sys.argv[1]).read_text(), re.S | re.M)
assert len(blocks) >= 2, "the README has fewer than two ```sh blocks"
for i, block in enumerate(blocks[:2], 1):
    Path(sys.argv[2], f"block{i}.sh").write_text(block)
    print(f"--- block {i}:\n{block.rstrip()}")
EOF

# run_blocks CLONE PATH [VAR=VALUE…]: both blocks in CLONE, in a minimal environment.
run_blocks() {
    local clone=$1 path=$2
    shift 2
    local env=(env -i "HOME=$home" "PATH=$path" "LANG=C.UTF-8" "$@")
    echo "readme_first_hour: python3 is $("${env[@]}" sh -c 'command -v python3') in $clone"
    (cd "$clone" && "${env[@]}" bash -e "$work/block1.sh") || {
        echo "readme_first_hour: FAILED: the README's first block (install, demo) in $clone" >&2
        return 1
    }
    (cd "$clone" && "${env[@]}" PYTEST_ADDOPTS="$tests" bash -e "$work/block2.sh") || {
        echo "readme_first_hour: FAILED: the README's test block in $clone (PYTEST_ADDOPTS=$tests)" >&2
        return 1
    }
}

# 1. The system interpreter; show that it is the externally managed one the README is about.
/usr/bin/python3 - <<'EOF'
import sys, sysconfig
from pathlib import Path
marker = Path(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")
print(f"readme_first_hour: /usr/bin/python3 {sys.version.split()[0]}, "
      f"{'externally managed (PEP 668)' if marker.exists() else 'not externally managed'}")
EOF
run_blocks "$work/clone" /usr/bin:/bin

# 2. Inside an already active virtual environment (as `. outer/bin/activate` leaves it).
/usr/bin/python3 -m venv "$work/outer"
run_blocks "$work/clone-in-venv" "$work/outer/bin:/usr/bin:/bin" "VIRTUAL_ENV=$work/outer"

echo "readme_first_hour: both README blocks passed, with the system python3 and inside a venv"
