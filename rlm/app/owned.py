"""What a child's changes may never reach in its parent's tree: the parent's project
memory (`.agent/`, rlm.memory). A child reads memory; the parent owns where the work
stands (rlm.app.memory: a child's `memory.*` writes are refused). A child on a working
copy (rlm.app.isolation) could still write the files themselves with plain file calls;
when its changes are brought back, every path that lands in the memory directory is
refused, whatever its spelling.

The test is the filesystem's, not a list of names: a changed path is refused when the
directory that would hold it, or any directory above it up to the parent's root, *is*
the memory directory (same device and inode, symlinks followed as the parent's
filesystem follows them). So `.agent/state.md`, `.agent/deep/new.md`, a file renamed
into `.agent/`, `mem/state.md` where the parent's `mem` is a link to `.agent` (or
`.agent` a link to `mem`), and `.AGENT/state.md` on a case-insensitive filesystem are
refused; `.AGENT/state.md` on a case-sensitive one is another directory and is not memory.
When the memory directory does not exist yet, a path that would create it is refused by
name, compared case- and normalisation-insensitively (the safe side: no stat to ask).
"""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path


def _fold(name: str) -> str:
    return unicodedata.normalize("NFC", name).casefold()


class Owned:
    """The parent's directory `owned` (its memory) as seen from its tree `root`."""

    def __init__(self, root: Path, owned: Path) -> None:
        self.root = Path(root)
        self.owned = Path(owned)
        try:
            self._stat: os.stat_result | None = os.stat(self.owned)
        except OSError:
            self._stat = None

    def refuses(self, rel: str) -> bool:
        """`root/rel` would land in the owned directory (or replace it)."""
        if self._stat is not None:
            p = self.root / rel
            while p != self.root and p != p.parent:
                try:
                    if os.path.samestat(os.stat(p), self._stat):
                        return True
                except OSError:  # not in the parent's tree (yet): a directory above may be
                    pass
                p = p.parent
            return False
        try:
            want = self.owned.relative_to(self.root).parts
        except ValueError:
            return False
        have = Path(rel).parts
        return bool(want) and len(have) >= len(want) and \
            all(_fold(a) == _fold(b) for a, b in zip(have, want, strict=False))

    def split(self, rels: list[str]) -> tuple[list[str], list[str]]:
        """(allowed, refused) of `rels`."""
        refused = [r for r in rels if self.refuses(r)]
        return [r for r in rels if r not in refused], refused


def refused_note(refused: list[str], owned: Path) -> str:
    """What the parent and its user are told of changes refused."""
    shown = ", ".join(refused[:10]) + (f" and {len(refused) - 10} more" if len(refused) > 10
                                        else "")
    return (f"not applied: {len(refused)} change(s) to the parent's project memory "
            f"({owned}), which a child may read but never change: {shown}; return what "
            "should be recorded in the answer, and the parent records it")
