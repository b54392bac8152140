"""Choosing a command variant from a binary's --help, and the keys stored runs are filed under."""

from __future__ import annotations

from pathlib import Path

from bisectbot.config.sections import Variant
from bisectbot.judge.runner import missing_for_variant, pick_variant, run_key
from bisectbot.state.files import content_hash

NEW_HELP = "----- common params -----\n  --draft-max N   tokens to draft\n  -fa, --flash-attn [on|off|auto]\n"
OLD_HELP = "usage: speculative [options]\n  --draft N   tokens to draft\n  -ctk, --cache-type-k TYPE\n"


def test_flags_help_texts_and_absent_texts_decide_the_fit() -> None:
    newest = Variant(argv=["{binary}", "--draft-max", "3", "-fa", "off"], help_contains=["[on|off|auto]"])
    old_format = Variant(argv=["{binary}", "--draft", "3"], help_lacks=["----- common params -----"])
    assert missing_for_variant(NEW_HELP, newest) == []
    assert missing_for_variant(OLD_HELP, newest) == ["--draft-max", "-fa", "[on|off|auto]"]
    assert missing_for_variant(OLD_HELP, old_format) == []
    # a newer binary also has --draft as an alias: the old output format must not be chosen there
    assert missing_for_variant(NEW_HELP + "  --draft N\n", old_format) == ["no '----- common params -----'"]
    assert pick_variant(OLD_HELP, [newest, old_format]) == (1, "variant 1")
    index, why = pick_variant(OLD_HELP, [newest, old_format], failed={1: "runs crash: killed by SIGSEGV"})
    assert index is None and "variant 1 failed at run time (runs crash: killed by SIGSEGV)" in why
    assert "variant 0 lacks --draft-max, -fa, [on|off|auto]" in why


def test_run_keys_follow_their_inputs_and_content_hashes_follow_edits(tmp_path: Path) -> None:
    base = {"argv": ["{binary}", "-m", "{fixtures}/m.gguf"], "files": {"{fixtures}/m.gguf": "aa"}, "env": {}}
    assert run_key(base) == run_key(dict(reversed(list(base.items()))))  # order-free
    assert run_key(base) != run_key({**base, "files": {"{fixtures}/m.gguf": "ab"}})
    f = tmp_path / "binary"
    f.write_bytes(b"v1")
    first = content_hash(f)
    f.write_bytes(b"v2 longer")
    assert content_hash(f) != first
