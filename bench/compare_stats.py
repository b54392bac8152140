"""Are two `bench_stats.py --results` files the same bisects? (issue 26: error rates unchanged)

    python bench/compare_stats.py bench/results/stats-8afe8fb.jsonl.gz NEW.jsonl[.gz]

Every bisect of the second file is looked up in the first by history, repetition (the same
simulated history and seeds) and the costs it was planned under (`--costs`: llama or demo; the
strategy depends on them) and compared on what it answered and what it cost: status, commit
named, stated confidence, runs, builds, strategy, seconds at llama.cpp's costs. When every one is
identical, the second code's rates on those repetitions are the first's, bisect for bisect.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

COMPARED = ("status", "named", "confidence", "runs", "builds", "strategy", "llama_s")


def load(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:  # type: ignore[operator]
        return [json.loads(line) for line in f if line.strip()]


def key(r: dict) -> tuple:
    return (r["label"], r["rep"], r.get("costs", "llama"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    args = parser.parse_args()
    before = {key(r): r for r in load(args.before)}
    same, differ, missing = 0, 0, 0
    for r in load(args.after):
        old = before.get(key(r))
        if old is None:
            missing += 1
            continue
        changed = {k: (old.get(k), r.get(k)) for k in COMPARED if old.get(k) != r.get(k)}
        if changed:
            differ += 1
            print(f"different: {r['label']}, repetition {r['rep']}, {r.get('costs')} costs: {changed}")
        else:
            same += 1
    print(
        f"{same + differ + missing} bisects: {same} identical, {differ} different, {missing} not in {args.before.name}"
    )


if __name__ == "__main__":
    main()
