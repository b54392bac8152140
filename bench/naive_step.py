"""One step of the naive bisect a maintainer could write instead of bisectbot (issue 26), for
`git bisect run python bench/naive_step.py` in a llama.cpp checkout:

build incrementally (one build directory, ccache), run the #29975 command on seeds 1..1000 (as
many at once as there are cores), and apply a chi-square test of the token after a first `f`
against the reference: exit 0 (good) when p ≥ 0.001, 1 (bad) otherwise or when an outcome the
reference never gives appears, 125 (skip) when the build fails. No error guarantee across steps,
no reruns of cut output, no confirmation: what the simplest script does.

Environment: NAIVE_BUILD (the build directory), NAIVE_FIXTURES (target.gguf, draft.gguf),
NAIVE_REFERENCE (JSON: outcome -> probability), NAIVE_CMAKE_ARGS (JSON list).
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from scipy.stats import chisquare

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from llama_e2e import speculative_argv  # noqa: E402


def main() -> int:
    build = Path(os.environ["NAIVE_BUILD"])
    fixtures = Path(os.environ["NAIVE_FIXTURES"])
    reference: dict[str, float] = json.loads(os.environ["NAIVE_REFERENCE"])
    cmake_args: list[str] = json.loads(os.environ["NAIVE_CMAKE_ARGS"])
    if not (build / "build.ninja").exists():
        configure = ["cmake", "-S", ".", "-B", str(build), "-G", "Ninja", *cmake_args]
        if subprocess.run(configure, capture_output=True).returncode != 0:
            return 125
    made = subprocess.run(["cmake", "--build", str(build), "--target", "llama-speculative"], capture_output=True)
    if made.returncode != 0:
        return 125
    binary = build / "bin" / "llama-speculative"

    def generated(seed: int) -> str:
        out = subprocess.run(speculative_argv(binary, fixtures, seed), capture_output=True, timeout=60).stdout
        text = out.decode(errors="replace").strip()
        return text[len("bcdbc") :] if text.startswith("bcdbc") else ""

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        texts = list(pool.map(generated, range(1, 1001)))
    after_f = collections.Counter(t[1] for t in texts if len(t) > 1 and t[0] == "f")
    if set(after_f) - set(reference):
        return 1
    outcomes = sorted(reference)
    n = sum(after_f.values())
    if n == 0:
        return 125
    observed = [after_f[o] for o in outcomes]
    expected = [n * reference[o] / sum(reference.values()) for o in outcomes]
    return 0 if chisquare(observed, expected).pvalue >= 0.001 else 1


if __name__ == "__main__":
    sys.exit(main())
