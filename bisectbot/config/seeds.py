"""The seed layout: which seed each run of each commit gets, so runs can be compared and reused.

Why a layout, not a counter: a run's seed must be derivable from the commit and the run's index
alone, so that a resume, another strategy or another bisect in the same state directory replays
the very runs stored before, and two commits that behave alike print the same for the same run.
"""

from __future__ import annotations

# Seeds. Block 0, where a commit is tested (`bisectbot test`, a bisect's ends and steps, the
# bad-model runs), is one common block: run i of every commit uses the same seed. A deterministic
# program then prints the same at two commits that behave alike, so commits can be compared seed
# for seed (two_sample.log_e_alike), and any job in a state directory replays what another ran. Block
# 1 is each commit's own, for runs no other commit shares (the confirmation's fresh seeds, the
# sticky search, which multiplies evidence across commits and must not count a run twice):
#     block 0: first_seed + COMMON_BLOCK + i
#     block 1: first_seed + offset(sha) + SEED_BLOCK + i,  offset(sha) = (sha's first 32 bits mod 2^14)·2·SEED_BLOCK
# derived from the sha alone (a resume, another strategy or another bisect reuses the same runs).
# Indices stay below 2^29 + SEED_BLOCK, far from the control sample's (from 10^9 on).
SEED_BLOCK = 2**14
COMMON_BLOCK = 2**29  # past every commit's own blocks


def commit_seed_index(sha: str, block: int, i: int, first_seed: int = 1) -> int:
    """The index of run i of `block` at commit `sha` (see the comment above)."""
    if not 0 <= i < SEED_BLOCK or block not in (0, 1):
        raise ValueError(f"run {i} of block {block} is outside a commit's seeds")
    if block == 0:
        return first_seed + COMMON_BLOCK + i
    offset = (int(sha[:8], 16) % 2**14) * 2 * SEED_BLOCK
    return first_seed + offset + SEED_BLOCK + i


def mix31(x: int) -> int:
    """A bijection of [0, 2^31) that scatters neighbours (xorshift-multiply rounds, each one
    invertible), so hashed seeds never collide within a sequence."""
    mask = 0x7FFFFFFF
    x &= mask
    for _ in range(2):
        x ^= x >> 16
        x = (x * 0x45D9F3B) & mask
    x ^= x >> 16
    return x
