"""scripts/acceptance_survey.py reads llama-speculative's statistics lines as real trees print
them, and the pending `speculative-acceptance` history's extract matches every one of them
(docs/acceptance-rate-notes.md). Fast: no build, no download."""

import math
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
from acceptance_survey import read_stats  # noqa: E402
from llama_eras import PRESET_HISTORIES, e2e_preset  # noqa: E402

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


def test_pending_history_extract_matches_both_kinds_of_line():
    spec = PRESET_HISTORIES["speculative-acceptance"]
    assert spec.pending and [v for v, *_ in spec.eras] == ["0.2.53", "0.2.54", "0.2.55", "0.2.56", "0.2.57", "0.2.58"]
    pattern = spec.init_args[spec.init_args.index("--extract") + 1]
    assert re.search(pattern, STDERR_0_2_56).group(1) == "16.667"
    assert re.search(pattern, STDERR_0_3_36).group(1) == "16.667"
    assert re.search(pattern, STDERR_0_2_55_NOTHING_DRAFTED).group(1) == "-nan"


def test_pending_history_is_not_run(tmp_path):
    assert e2e_preset(tmp_path / "work", "speculative-acceptance") == 2
    assert not (tmp_path / "work").exists()
