"""The project's memory files in `.agent/`: templates, reads, atomic locked writes.

    .agent/state.md         where the work stands (the one authority)
    .agent/conventions.md   decisions and conventions, one line each, with who stated them
    .agent/history.log      JSON Lines: ts, action, target, note (the host adds one
                            `run` line at the end of each run: rlm.memory.runs); past
                            HISTORY_MAX bytes it is cut to its newest lines
    .agent/context.json     structured facts (datasets, paths, schemas, row counts)
    .agent/snapshots/NNN-<label>.md   copies of the above at milestones (gitignored)

Every write holds an exclusive `flock` on `.agent/.lock` (two processes, e.g. a worker and
a chat in one directory, or two children, never lose an update) and replaces the file
atomically (temp file in the same directory, fsync, rename). A write that would push a file
past its budget is refused with the reason, so the model condenses instead. Known secrets
are redacted before anything reaches the disk.

Trust (rlm.trust): these files are data. The host never reads a setting from them; they
are read only as text for the model, only when they are regular files (a symlink planted
as `.agent/state.md` is not followed), and only up to their budgets.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rlm import safeio
from rlm.errors import RlmError
from rlm.secrets import known_secrets, redact_text

DIRNAME = ".agent"
FILES = {"state": "state.md", "conventions": "conventions.md", "context": "context.json"}
HISTORY = "history.log"
SNAPSHOTS = "snapshots"
MODES = ("replace", "append", "merge")
# characters a file may hold: small on purpose (LLM-written context files that grow cost
# tokens and lower success; short factual ones help: arXiv 2602.11988)
LIMITS = {"state": 4000, "conventions": 4000, "context": 6000}
HISTORY_READ = 64 * 1024  # bytes of history.log read from its end
HISTORY_MAX = 256 * 1024  # history.log past this is cut to its newest HISTORY_READ bytes
NOTE_LIMIT = 300  # characters of one history line's note
# memory is the project's (often committed): readable by the group, unlike a session's files
SHARED_DIR, SHARED_FILE = 0o755, 0o644

TEMPLATES = {
    "state": ("# State\n\n## In progress\n\n## Recently done\n\n## Known problems\n\n"
              "## Next steps\n"),
    "conventions": "# Conventions\n\n",
    "context": "{}\n",
}
GITIGNORE = "snapshots/\n.lock\n"
USER_MARK = "stated_by: user"


class MemoryRefused(RlmError):
    """A memory write that was not done; the message says why and what to do instead."""


@dataclass(frozen=True)
class WriteResult:
    file: str  # state | conventions | context | history | snapshot
    path: str
    chars: int
    changed_user_conventions: tuple[str, ...] = ()  # user-stated lines the write removed

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "path": self.path, "chars": self.chars,
                "changed_user_conventions": list(self.changed_user_conventions)}


def today() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d")


def now_ts() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


_THREAD_LOCK = threading.Lock()  # flock is per open file: threads of one process share it


class ProjectMemory:
    """The `.agent/` directory of `root` (the project's working directory)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.dir = self.root / DIRNAME
        # what `signature` stats, as strings: it is asked several times a step
        self._watched = tuple(str(p) for p in (self.dir, *(self.dir / rel for rel in FILES.values()),
                                               self.dir / HISTORY))

    # ------------------------------------------------------------------- paths
    def path(self, name: str) -> Path:
        if name == "history":
            return self.dir / HISTORY
        if name not in FILES:
            raise MemoryRefused(f"no memory file {name!r}: use one of "
                                f"{', '.join(repr(k) for k in FILES)}")
        return self.dir / FILES[name]

    def exists(self) -> bool:
        return self.dir.is_dir() and not self.dir.is_symlink()

    def signature(self) -> tuple[Any, ...]:
        """What the reads depend on: the directory's and each file's inode, size and
        times (None when missing). Equal signatures: the files read the same, short of a
        same-size rewrite within one tick of the file system's clock."""
        out: list[Any] = []
        for p in self._watched:
            try:
                st = os.lstat(p)
            except OSError:
                out.append(None)
                continue
            out.append((st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
        return tuple(out)

    # ------------------------------------------------------------------- reads
    def read(self, name: str) -> str:
        """A file's text ("" when missing or not a regular file); see `read_sized`."""
        return self.read_sized(name)[0]

    def read_sized(self, name: str) -> tuple[str, int]:
        """A file's text and its size in bytes on disk (0 when missing). At most
        `read_limit(name)` bytes are read, from the file's END: a file a user or a cell
        grew past its budget (50 MB) is never read whole, and what is kept is its newest
        lines (the first, cut in the middle, is dropped). context.json is JSON, whose tail
        means nothing: past the limit its text is "" and the size says why."""
        limit = read_limit(name)
        data, size, start = self._tail(self.path(name), limit)
        if start > 0 and name == "context":
            return "", size
        text = data.decode("utf-8", errors="replace")
        if start > 0:
            text = text.split("\n", 1)[1] if "\n" in text else ""
        return text, size

    def _tail(self, path: Path, nbytes: int) -> tuple[bytes, int, int]:
        """The last `nbytes` of a regular file below the root, its size, and where they
        start (b"", 0, 0 when it is missing, not regular, or unreadable)."""
        if not self.exists():
            return b"", 0, 0
        try:
            fd = safeio.open_file(self.root, path)
        except OSError:
            return b"", 0, 0
        try:
            size = os.fstat(fd).st_size
            start = max(0, size - nbytes)
            os.lseek(fd, start, os.SEEK_SET)
            chunks, left = [], nbytes
            while left > 0:
                chunk = os.read(fd, left)
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
        except OSError:
            return b"", 0, 0
        finally:
            os.close(fd)
        return b"".join(chunks), size, start

    def mtime(self, name: str) -> float | None:
        try:
            st = os.lstat(self.path(name))
        except OSError:
            return None
        return st.st_mtime

    def history_lines(self, n: int) -> tuple[list[str], int]:
        """The last `n` lines of history.log, and how many lines the file holds (counted
        only in its last HISTORY_READ bytes when it is bigger: then a lower bound)."""
        data, _size, start = self._tail(self.path("history"), HISTORY_READ)
        lines = data.decode("utf-8", errors="replace").splitlines()
        if start > 0 and lines:
            lines = lines[1:]  # the first one is cut in the middle
        lines = [ln for ln in lines if ln.strip()]
        total = len(lines) if start == 0 else len(lines) + 1  # more before: at least one
        return lines[-n:] if n > 0 else [], total

    def snapshots(self) -> list[Path]:
        d = self.dir / SNAPSHOTS
        return sorted(d.glob("*.md")) if d.is_dir() else []

    # ------------------------------------------------------------------ writes
    def init(self) -> list[str]:
        """Create `.agent/` from the templates; existing files are kept. Returns the files
        created."""
        if self.dir.is_symlink():
            raise MemoryRefused(f"{self.dir} is a symlink: rlm writes memory only into a "
                                "real .agent/ directory (remove the link)")
        safeio.make_dirs(self.root, DIRNAME, dir_mode=SHARED_DIR)
        made = []
        with self._locked():
            for name, rel in [*FILES.items(), ("history", HISTORY), (".gitignore", ".gitignore")]:
                path = self.dir / rel
                if path.exists() or path.is_symlink():
                    continue
                self._write_atomic(path, GITIGNORE if name == ".gitignore"
                                   else TEMPLATES.get(name, ""))
                made.append(rel)
        return made

    def update(self, name: str, content: Any, mode: str = "replace", *,
               stated_by: str = "agent") -> WriteResult:
        """Write `content` into state | conventions | context (see `compose`)."""
        if name not in FILES:
            raise MemoryRefused(f"memory.update: no file {name!r}; use 'state' (where the work "
                                "stands), 'conventions' (decisions, rules) or 'context' "
                                "(structured facts as a dict)")
        if mode not in MODES:
            raise MemoryRefused(f"memory.update: mode {mode!r} is not one of {', '.join(MODES)}")
        self.init()
        with self._locked():
            old = self.read(name)
            new = compose(name, old, content, mode, stated_by=stated_by)
            new = redact_text(new, known_secrets())
            if len(new) > LIMITS[name]:
                raise MemoryRefused(
                    f"memory.update refused: {FILES[name]} would hold {len(new):,} characters, "
                    f"over its budget of {LIMITS[name]:,}. Condense it: memory.update("
                    f"{name!r}, <a shorter whole file>, mode='replace') keeping only what is "
                    "still true (decisions, where the work stands), no narrative")
            removed = removed_user_lines(old, new) if name == "conventions" else ()
            self._write_atomic(self.path(name), new)
            if removed:
                self._append_history("convention_changed", "conventions.md",
                                     "user-stated convention changed by the agent; was: "
                                     + " | ".join(removed))
        return WriteResult(name, str(self.path(name)), len(new), tuple(removed))

    def log(self, action: str, target: str = "", note: str = "") -> WriteResult:
        """One history.log line (ts, action, target, note)."""
        if not str(action).strip():
            raise MemoryRefused("memory.log needs an action, e.g. memory.log('fixed', "
                                "'clean.py', 'dates parsed as UTC')")
        if len(str(note)) > NOTE_LIMIT:
            raise MemoryRefused(f"memory.log refused: the note has {len(str(note))} characters, "
                                f"over {NOTE_LIMIT}; one short factual line")
        self.init()
        with self._locked():
            line = self._append_history(str(action), str(target), str(note))
        return WriteResult("history", str(self.path("history")), len(line))

    def snapshot(self, label: str) -> WriteResult:
        """`.agent/snapshots/NNN-<label>.md`: state, conventions and context now."""
        slug = re.sub(r"[^A-Za-z0-9_-]+", "-", str(label)).strip("-")[:40] or "snapshot"
        self.init()
        with self._locked():
            d = safeio.make_dirs(self.root, Path(DIRNAME, SNAPSHOTS), dir_mode=SHARED_DIR)
            nums = [int(m.group(1)) for p in d.glob("*.md") if (m := re.match(r"(\d+)-", p.name))]
            path = d / f"{max(nums, default=0) + 1:03d}-{slug}.md"
            text = (f"# Snapshot {path.stem} ({now_ts()})\n\n" + "\n\n".join(
                f"## {FILES[n]}\n\n{self.read(n).strip()}" for n in FILES) + "\n")
            self._write_atomic(path, text)
            self._append_history("snapshot", f"snapshots/{path.name}", str(label)[:NOTE_LIMIT])
        return WriteResult("snapshot", str(path), len(text))

    # --------------------------------------------------------------- internals
    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with _THREAD_LOCK:
            fd = safeio.open_file(self.root, self.dir / ".lock", os.O_RDWR | os.O_CREAT,
                                  SHARED_FILE)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # releases the flock

    def _write_atomic(self, path: Path, text: str) -> None:
        # the working directory is the kernel's: nothing below it is followed (rlm.safeio);
        # a link at the name is replaced, never written through
        safeio.write_atomic(self.root, path, text.encode("utf-8"), mode=SHARED_FILE)

    def _append_history(self, action: str, target: str, note: str) -> str:
        secrets = known_secrets()
        line = json.dumps({"ts": now_ts(), "action": action[:60],
                           "target": redact_text(target[:200], secrets),
                           "note": redact_text(note, secrets)}, ensure_ascii=False)
        fd = safeio.open_append(self.root, self.path("history"), SHARED_FILE)
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            size = f.tell()
        if size > HISTORY_MAX:  # bounded: the newest lines kept, whole (under the lock)
            data, _size, start = self._tail(self.path("history"), HISTORY_READ)
            kept = data.split(b"\n", 1)[1] if start > 0 and b"\n" in data else data
            self._write_atomic(self.path("history"), kept.decode("utf-8", errors="replace"))
        return line


def read_limit(name: str) -> int:
    """Bytes of a memory file read, from its end: twice its budget at up to 4 bytes a
    character (a user may have edited it past the budget: the injection cuts it, saying so)."""
    return 2 * LIMITS.get(name, 4000) * 4


# ---------------------------------------------------------------------- pure helpers
def compose(name: str, old: str, content: Any, mode: str, *, stated_by: str = "agent") -> str:
    """The file's new text. context: a dict or JSON text (replace, or merge: keys updated);
    markdown: replace the whole file, append lines, or merge `## Section`s (a section in
    `content` replaces the section of that heading, the others are kept). A conventions
    line without `stated_by:` gets `(stated_by: <who>, <date>)`."""
    if name == "context":
        return _compose_context(old, content, mode)
    if not isinstance(content, str):
        raise MemoryRefused(f"memory.update({name!r}, ...): content must be text (markdown)")
    if name == "conventions":
        content = "\n".join(_tag(line, stated_by) for line in content.splitlines())
    if mode == "replace":
        out = content
    elif mode == "append":
        out = old.rstrip("\n") + "\n" + content.strip("\n") if old.strip() else content
    else:
        out = merge_sections(old, content) if name == "state" else _merge_lines(old, content)
    return out.rstrip("\n") + "\n"


def _tag(line: str, who: str) -> str:
    s = line.strip()
    if not s or s.startswith("#") or "stated_by:" in s:
        return line
    if not s.startswith(("- ", "* ")):
        s = "- " + s
    return f"{s} (stated_by: {who}, {today()})"


def _compose_context(old: str, content: Any, mode: str) -> str:
    if isinstance(content, str):
        try:
            content = json.loads(content)
        except ValueError as e:
            raise MemoryRefused(f"memory.update('context', ...): not JSON ({e}); pass a dict") from None
    if not isinstance(content, dict):
        raise MemoryRefused("memory.update('context', ...): pass a dict, e.g. {'datasets': "
                            "{'sales': {'path': 'sales.csv', 'rows': 1200}}}")
    if mode == "append":
        raise MemoryRefused("memory.update('context', ...): use mode='merge' (keys updated) or "
                            "'replace'; 'append' is for the markdown files")
    base: dict[str, Any] = {}
    if mode == "merge":
        try:
            loaded = json.loads(old) if old.strip() else {}
            base = loaded if isinstance(loaded, dict) else {}
        except ValueError:
            base = {}
    return json.dumps({**base, **content}, indent=1, ensure_ascii=False, default=str)


_HEADING = re.compile(r"^##\s+(.+?)\s*$")


def _sections(text: str) -> list[tuple[str | None, list[str]]]:
    out: list[tuple[str | None, list[str]]] = [(None, [])]
    for line in text.splitlines():
        m = _HEADING.match(line)
        if m:
            out.append((m.group(1).strip().lower(), [line]))
        else:
            out[-1][1].append(line)
    return out


def merge_sections(old: str, new: str) -> str:
    """`old` with each `## Section` of `new` replacing the section of that heading (new
    headings go at the end); text of `new` before its first heading is appended."""
    olds, news = _sections(old), _sections(new)
    given = {h: lines for h, lines in news if h is not None}
    out: list[str] = []
    for h, lines in olds:
        out.extend(given.pop(h) if h in given else lines)
    for h, _lines in news:
        if h in given:
            out.extend(given.pop(h))
    lead = [ln for ln in news[0][1] if ln.strip()]
    return "\n".join([*out, *lead])


def _merge_lines(old: str, new: str) -> str:
    """`old` with the lines of `new` whose rule it does not hold yet (dates and who stated
    it aside: a rule stated again is not written twice)."""
    have = {_rule_of(ln) for ln in old.splitlines()}
    add = [ln for ln in new.splitlines() if ln.strip() and _rule_of(ln) not in have]
    return "\n".join([old.rstrip("\n"), *add]) if add else old


def _rule_of(line: str) -> str:
    """A conventions line without its `(stated_by: ..., date)` tag."""
    return re.sub(r"\s*\(stated_by:[^)]*\)\s*$", "", line.strip()).lstrip("-* ").strip()


def removed_user_lines(old: str, new: str) -> list[str]:
    """User-stated conventions of `old` whose rule `new` no longer holds word for word."""
    kept = {_rule_of(ln) for ln in new.splitlines()}
    return [ln.strip() for ln in old.splitlines()
            if USER_MARK in ln and _rule_of(ln) not in kept]
