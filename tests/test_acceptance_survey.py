"""scripts/acceptance_survey.py reads llama-speculative's statistics lines as real trees print
them, and the preset's `accept` number (what `init --llama llama-speculative --statistic mean`
reads, as the `speculative-acceptance` history asks) matches every one of them
(docs/acceptance-rate-notes.md). Fast: no build, no download."""

import math
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
from acceptance_survey import read_stats  # noqa: E402
from llama_eras import PRESET_HISTORIES  # noqa: E402

from bisectbot.config import load_config  # noqa: E402

# the tail of stderr of 0.2.56 (LOG_TEE) and 0.2.55 with nothing drafted, as printed (seeds
# 1137309928 and 824515495); after the logging rewrite the lines are the same (LOG_INF)
STDERR_0_2_56 = """
encoded    5 tokens in    0.000 seconds, speed: 11876.484 t/s
decoded    4 tokens in    0.001 seconds, speed: 3584.229 t/s

n_draft   = 3
n_predict = 4
n_drafted = 6
n_accept  = 1
accept    = 16.667%

draft:
"""
# 0.3.36 (from 0.3.25's tree on): every log line behind a time stamp and a level
STDERR_0_3_36 = """
0.00.058.688 I
0.00.058.701 I n_draft   = 3
0.00.058.714 I n_predict = 4
0.00.058.726 I n_drafted = 6
0.00.058.739 I n_accept  = 1
0.00.058.752 I accept    = 16.667%
0.00.058.764 I
"""
STDERR_0_2_55_NOTHING_DRAFTED = """
n_draft   = 3
n_predict = 2
n_drafted = 0
n_accept  = 0
accept    = -nan%
"""


def test_read_stats_reads_each_line():
    expected = {"n_draft": 3, "n_predict": 4, "n_drafted": 6, "n_accept": 1, "accept": 16.667}
    assert read_stats(STDERR_0_2_56) == expected
    assert read_stats(STDERR_0_3_36) == expected


def test_read_stats_nothing_drafted_is_nan_and_a_missing_line_is_none():
    stats = read_stats(STDERR_0_2_55_NOTHING_DRAFTED)
    assert stats is not None and math.isnan(stats["accept"]) and stats["n_drafted"] == 0
    assert read_stats(STDERR_0_2_56.split("accept    =")[0]) is None  # cut before the line: rerun


def test_the_preset_number_reads_both_kinds_of_line_and_the_history_asks_for_it():
    spec = PRESET_HISTORIES["speculative-acceptance"]
    assert [v for v, *_ in spec.eras] == ["0.2.53", "0.2.54", "0.2.55", "0.2.56", "0.2.57", "0.2.58"]
    assert spec.init_args == ["--reference", "good", "--statistic", "mean"]  # the preset's first mean: accept
    preset = load_config(REPO / "configs" / "llama" / "llama-speculative.yaml").preset
    assert preset is not None and next(iter(preset.numbers)) == "accept"
    pattern = preset.numbers["accept"].extract
    assert re.search(pattern, STDERR_0_2_56).group(1) == "16.667"
    assert re.search(pattern, STDERR_0_3_36).group(1) == "16.667"
    assert re.search(pattern, STDERR_0_2_55_NOTHING_DRAFTED).group(1) == "-nan"
    speed = preset.numbers["speed"].extract
    assert re.search(speed, STDERR_0_2_56).group(1) == "3584.229"
