"""Whether a binary is the whole program: an ELF file that names no library search path of its
own (no DT_RPATH, no DT_RUNPATH). cmake gives a binary linked to the project's shared libraries
a runpath into the build tree, and those libraries change from commit to commit while the
binary's bytes may not; a script is not the program it starts. Either way two byte-identical
files need not run the same code, so only a self-contained binary's bytes identify a program."""

from __future__ import annotations

from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile


def self_contained(path: Path) -> bool:
    """True for an ELF file with no runpath (static, or linked to system libraries only)."""
    try:
        with path.open("rb") as f:
            elf = ELFFile(f)
            for section in elf.iter_sections():
                if isinstance(section, DynamicSection):
                    for tag in section.iter_tags():
                        if tag.entry.d_tag in ("DT_RPATH", "DT_RUNPATH"):
                            return False
    except (OSError, ELFError):
        return False  # unreadable, or not an ELF file (a script)
    return True
