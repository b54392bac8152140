"""A commit's own tree, kept for its runs: `{source}` in a run command is the tree of the commit
that runs, never the bot's clone.

Why: the clone moves from commit to commit as builds need it, and a stored build is reused
without checking anything out, so a run that read its commit's files through the clone (a
script, its modules, a model in the repository) would read whichever commit was checked out
last, and the runs of two commits prepared in turn would share one checkout. Each commit's tree
is exported once (`git archive`: no `.git`) into `kept/<key>/<sha>/tree`, the key that of
build.kind none's builds (gc removes it like kept binaries, least recently used first; it is
exported again when needed), with a manifest of
every file's sha256 and every link's target beside it. The manifest is checked before the tree
is reused (a run that edited a file gets the tree afresh; files a run added, such as Python's
`__pycache__`, are not the commit's and are left alone), and its sha256 is the tree's digest:
part of the key of the runs stored for it, so they replay only for the same files.

With build.kind none this tree is the whole "build" (`Builder.ensure`).

In untrusted code's box every read is made following no link (processes.boxfs); a tree is
exported there by the bot between the sandbox's steps, when no untrusted process runs, and is
not handed over to the sandbox's uid: its runs read it, they do not write it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from bisectbot.processes.boxfs import Box, BoxRefused
from bisectbot.state.files import content_hash, file_sha256

TREE = "tree"
MANIFEST = "tree.json"
MANIFEST_MAX_BYTES = 1 << 28  # read back at most this (in a box a run could have grown it)


@dataclass(frozen=True)
class KeptTree:
    """A commit's tree as kept: where it is, its manifest, and the manifest's sha256."""

    path: Path
    manifest: Path
    digest: str


def keep_tree(export: Callable[[str, Path], Path], sha: str, kept: Path, box: Box | None = None) -> KeptTree:
    """Export the tree of `sha` into `kept`/tree (`kept` made afresh) and write its manifest.
    `export` is the workspace's (`git archive` within a box's budget); GitError when it fails."""
    if box is not None:
        box.remove(kept)
        fd = box.open_dir(kept, create=True)
    else:
        shutil.rmtree(kept, ignore_errors=True)
        kept.mkdir(parents=True)
        fd = os.open(kept, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        tree = export(sha, kept / TREE)
        text = json.dumps(_listing(tree), sort_keys=True).encode()
        out = os.open(MANIFEST, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=fd)
        with os.fdopen(out, "wb") as fh:
            fh.write(text)
    finally:
        os.close(fd)
    return KeptTree(kept / TREE, kept / MANIFEST, hashlib.sha256(text).hexdigest())


def _listing(tree: Path) -> dict[str, dict[str, str]]:
    """Every regular file of a freshly exported tree with its sha256, every link with its target
    (relative paths; nothing followed)."""
    files: dict[str, str] = {}
    links: dict[str, str] = {}
    for top, dirs, names in os.walk(tree):
        for name in (*dirs, *names):
            path = os.path.join(top, name)
            rel = os.path.relpath(path, tree)
            if os.path.islink(path):
                links[rel] = os.readlink(path)
            elif name in names and os.path.isfile(path):
                files[rel] = file_sha256(Path(path))
    return {"files": files, "links": links}


def kept_tree(kept: Path, box: Box | None = None) -> KeptTree | None:
    """The tree kept in `kept` if every file and link of its manifest is there as exported;
    None when it is missing or anything of it changed (then it is exported again)."""
    manifest = kept / MANIFEST
    try:
        if box is not None:
            head = box.read_head(manifest, MANIFEST_MAX_BYTES)
            if head is None:
                return None
            text = head.encode()
        else:
            text = manifest.read_bytes()
        listing = json.loads(text)
        tree = kept / TREE
        for rel, digest in listing["files"].items():
            path = tree / rel
            found = box.sha256(path) if box is not None else content_hash(path) if not path.is_symlink() else None
            if found != digest:
                return None
        for rel, target in listing["links"].items():
            path = tree / rel
            if (box.readlink(path) if box is not None else os.readlink(path)) != target:
                return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, BoxRefused):
        return None
    return KeptTree(kept / TREE, manifest, hashlib.sha256(text).hexdigest())
