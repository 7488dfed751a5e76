"""The system prompt's model state kept on disk between runs (the embedded model).

A run's first call to the local model evaluates its whole prompt, and most of it is the
system prompt: ~360 tokens, ~3 s on 2 cores, the same in every run of a project. The state
llama.cpp holds after evaluating those tokens (their KV cells, ~28 KB a token) is saved
once here and loaded by a later run's first call instead (~35 ms), which then evaluates
only what follows (rlm.llm.local, `LocalModel._select_state`).

Only the system prompt's tokens are kept: never the user's words or a reply. A file is
named by the model's identity (its file, n_ctx, llama.cpp's version: `identity`) and the
hash of its tokens, and holds one JSON line (identity, tokens, the state's sha256 and
size) then the state. Anything that does not match (another model, a torn or altered
file, a symlink) is passed over, and the next save replaces it. The dir is private
(0700, files 0600) under $RLM_HOME/cache; at most MAX_FILES are kept, the least recently
used going first. Every failure here costs only the time it would have saved.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rlm.errors import RlmError
from rlm.paths import private_dir, write_private_atomic
from rlm.trust import open_regular

MAX_FILES = 4
MIN_TOKENS = 64  # a shorter shared start is not worth a file
MAX_HEADER = 1 << 20
SUFFIX = ".state"


@dataclass
class Prefix:
    tokens: list[int]
    data: bytes


def identity(path: Path, n_ctx: int, *extra: object) -> str:
    """What a saved state is valid for: this model file as it is now (path, size, mtime),
    this window, this llama.cpp (`extra`: its version, the load parameters)."""
    st = path.stat()
    raw = json.dumps([str(path.resolve()), st.st_size, st.st_mtime_ns, n_ctx,
                      [str(x) for x in extra]])
    return hashlib.sha256(raw.encode()).hexdigest()


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class PrefixStore:
    """Saved system-prompt states of one RLM_HOME."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def find(self, ident: str, tokens: Sequence[int]) -> tuple[int, Prefix | None]:
        """The saved state sharing the longest start with `tokens` (at least MIN_TOKENS),
        and how many tokens it shares; (0, None) when none does."""
        n, path, head = 0, None, None
        for candidate in self._files(ident):
            h = _header(candidate)
            if h is None or h.get("identity") != ident or not isinstance(h.get("tokens"), list):
                continue
            shared = common_prefix(h["tokens"], tokens)  # type: ignore[arg-type]
            if shared >= MIN_TOKENS and shared > n:
                n, path, head = shared, candidate, h
        if path is None or head is None:
            return 0, None
        got = _read(path, head)
        if got is None:
            return 0, None
        with contextlib.suppress(OSError):
            os.utime(path)  # recently used: kept longest
        return n, got

    def keep(self, ident: str, prefix: Prefix) -> None:
        """Save `prefix` (best effort: a cache that cannot be written is skipped)."""
        if len(prefix.tokens) < MIN_TOKENS:
            return
        key = hashlib.sha256(json.dumps(prefix.tokens).encode()).hexdigest()[:16]
        head = {"identity": ident, "tokens": prefix.tokens, "bytes": len(prefix.data),
                "sha256": hashlib.sha256(prefix.data).hexdigest()}
        try:
            private_dir(self.root)
            write_private_atomic(self.root / f"{ident[:16]}-{key}{SUFFIX}",
                                 json.dumps(head).encode() + b"\n" + prefix.data)
            self._trim()
        except (OSError, RlmError):  # unwritable, full, or the dir is a symbolic link
            return

    def _files(self, ident: str) -> list[Path]:
        try:
            return sorted(self.root.glob(f"{ident[:16]}-*{SUFFIX}"))
        except OSError:
            return []

    def _trim(self) -> None:
        def used(p: Path) -> float:
            try:
                return p.stat().st_mtime
            except OSError:
                return 0.0

        files = sorted(self.root.glob(f"*{SUFFIX}"), key=used)
        for old in files[: max(0, len(files) - MAX_FILES)]:
            with contextlib.suppress(OSError):
                old.unlink()


def _header(path: Path) -> dict[str, object] | None:
    try:
        with os.fdopen(open_regular(path), "rb") as f:
            line = f.readline(MAX_HEADER)
        head = json.loads(line)
    except (OSError, ValueError):
        return None
    return head if isinstance(head, dict) else None


def _read(path: Path, head: dict[str, object]) -> Prefix | None:
    """The state after the header, if it is whole and unchanged (its sha256)."""
    try:
        with os.fdopen(open_regular(path), "rb") as f:
            f.readline(MAX_HEADER)
            data = f.read()
    except OSError:
        return None
    tokens = head.get("tokens")
    if (not isinstance(tokens, list) or not all(type(t) is int for t in tokens)
            or len(data) != head.get("bytes")
            or hashlib.sha256(data).hexdigest() != head.get("sha256")):
        return None
    return Prefix(tokens, data)
