"""The append-only session log: one JSONL file per session, entries forming a tree.

File: `$RLM_HOME/sessions/<id>/session.jsonl` (dir 0700, file 0600). Line 1 is a
`SessionHeader`; every other line one entry (`rlm.session.entries`). `parent_id` links
make a tree; the *leaf* is where the next append attaches. Resuming from an earlier entry
(`set_leaf`) makes the next append start a new branch. Nothing is ever rewritten in place.

Durability: the file is opened O_APPEND (a second writer cannot overwrite; one writer per
session is enforced by the worker lock elsewhere) and every append is one `os.write` of
the whole line followed by `fsync`.

Loading (`open`) is strict, as a trust boundary should be:
- bytes after the last newline are a torn write (host killed mid-append); so is an
  invalid-JSON last line. They are moved aside to `session.jsonl.torn-<ts>` (never lost)
  and the file is truncated to the last good newline; `store.recovered` names the file.
- any other malformed line raises `SessionCorrupt(path, line, reason)` and the file is
  left byte-identical.
- the header version selects migrations (`rlm.session.migrations`); a migrated file is
  rewritten atomically after the original is kept as `session.jsonl.v<N>.bak`.
- `readonly=True` (viewers such as `rlm log` on a live session) never touches the file:
  a torn tail is just ignored in memory.

Speed: the branch root->leaf is kept incrementally, and `messages()` keeps one incremental
`Projector` per (system prompt, tool mode), so a turn costs O(new entries), not O(log).
A long session opens through `session.index` (`rlm.session.index`, a cache rebuilt when
missing or stale): the header, the index and the lines appended since are read; the
branch's entries are read back by offset when first touched (`rlm.session.branch`), and
the projection starts at the latest compaction. Until something needs every entry
(`entries`, `tree`, `set_leaf`, `get` of an entry not read yet) the store is *partial*;
then it parses the whole file once (`_load_all`). A partial store checks a new entry's
id against the entries it has read only (ids are 48 random bits).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import stat
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rlm import safeio
from rlm.durability import LogFile
from rlm.errors import SessionCorrupt, SessionError
from rlm.paths import (
    check_session_id,
    check_session_layout,
    fsync_dir,
    private_dir,
    sessions_path,
    sessions_root,
    write_private_atomic,
)
from rlm.secrets import known_secrets, redact_text
from rlm.session import index, migrations
from rlm.session.branch import Branch
from rlm.session.context import Projections
from rlm.session.entries import (
    CompactionEntry,
    Entry,
    SessionHeader,
    entry_from_dict,
    new_id,
)
from rlm.session.lines import Parsed, build, read_records, reason
from rlm.session.lines import dumps as _dumps
from rlm.trust import open_regular

FILE_NAME = "session.jsonl"
INDEX_EVERY = 1000  # appends between two refreshes of session.index (also at compactions)


@dataclass
class SessionInfo:
    """One line of `rlm sessions`."""

    id: str
    path: Path
    model: str
    task: str | None
    created: str
    parent_session: str | None
    cwd: str = ""  # where it was started ("" in logs that did not record it)
    # why the header cannot be read (the session is listed, not hidden), else None
    problem: str | None = None
    header_id: str | None = None  # the id its header names, when not its directory's name


def _new_session_id() -> str:
    """Sortable by creation time, unique enough: 20250102-030405-1a2b3c."""
    return f"{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}-{new_id()[:6]}"


class SessionStore:
    """One session: its entries (file order), the tree, the current leaf."""

    def __init__(self, header: SessionHeader, path: Path | None) -> None:
        self.header = header
        self.path = path
        self.recovered: Path | None = None  # torn bytes moved here on load
        self._entries: list[Entry] = []
        self._by_id: dict[str, Entry] = {}
        self._leaf: str | None = None
        self._branch = Branch.of([])
        self._offset: dict[str, int] = {}  # entry id -> its line's offset (complete stores)
        self._count = 0  # entries in the file (header excluded)
        self._partial = False  # opened through the index: not every entry is in memory
        self._unindexed = 0  # appends since the index was last written
        self._last: str | None = None  # the id on the file's last line (a partial store)
        self._projections = Projections()
        self._file = LogFile(Path(str(path))) if path is not None else None
        # values of secret-looking env vars: replaced in every appended line (rlm.secrets)
        self._secrets = known_secrets()
        self._append_lock = threading.RLock()

    # -- construction -------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        home: Path | None = None,
        *,
        model: str = "",
        task: str | None = None,
        parent_session: str | None = None,
        session_dir: Path | None = None,
    ) -> SessionStore:
        """A new session file with its header; `session_dir` overrides the location
        (children of rlm_query live under their parent's `children/`)."""
        sid = _new_session_id() if session_dir is None else Path(session_dir).name
        folder = private_dir(Path(session_dir) if session_dir else sessions_root(home) / sid)
        path = folder / FILE_NAME
        header = SessionHeader(
            id=sid, cwd=os.getcwd(), model=model, task=task, parent_session=parent_session
        )
        try:
            fd = safeio.open_file(folder, FILE_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                                  | os.O_APPEND)
        except FileExistsError as e:
            raise SessionError(f"{path} already exists; open it with SessionStore.open") from e
        store = cls(header, path)
        store._file = LogFile(path, fd)
        line = _dumps(header)
        if store._secrets:  # a task may quote a key: the header is redacted like entries
            line = redact_text(line.decode(), store._secrets, patterns=False).encode()
            store.header = entry_from_dict(json.loads(line))  # type: ignore[assignment]
        store._write(line)
        fsync_dir(folder)
        return store

    @classmethod
    def in_memory(cls, *, model: str = "", task: str | None = None) -> SessionStore:
        """A store that never touches the disk (tests)."""
        return cls(SessionHeader(id=_new_session_id(), model=model, task=task), None)

    @classmethod
    def open(
        cls, id_or_path: str | Path, home: Path | None = None, *, readonly: bool = False
    ) -> SessionStore:
        """Load a session by id (or unique id prefix), directory or file path."""
        path = resolve_session_path(id_or_path, home)
        fast = index.load(path, index.line_reader)
        if fast is not None:
            return cls._from_index(path, fast)
        parsed, store = cls._parse(path)
        if not readonly:
            if parsed.cut is not None:
                store.recovered = _move_torn_tail(path, parsed.cut)
            elif parsed.unterminated is not None:  # a whole entry whose newline never reached disk
                _terminate(path)
            if store._needs_rewrite:
                _rewrite_migrated(path, store)
            store._save_index()
        elif parsed.cut is None and parsed.unterminated is None and not store._needs_rewrite:
            # a viewer caches what it parsed (the covered size is what it read)
            index.save(path, index.Covered(parsed.size, parsed.mtime_ns, parsed.hash,
                                           store._count, store._leaf, store._branch))
        return store

    @classmethod
    def _parse(cls, path: Path) -> tuple[Parsed, SessionStore]:
        """Parse the whole file (strict; torn tails found, nothing written)."""
        # Bulk load: hundreds of thousands of new containers would trigger repeated full
        # garbage collections (they cost more than the parsing); nothing here makes cycles.
        gc_was_on = gc.isenabled()
        gc.disable()
        try:
            parsed = read_records(path)
            try:
                store = cls._from_records(path, parsed)
            except SessionCorrupt as e:
                # an unterminated tail that parses but is no valid entry: torn after all
                if parsed.unterminated is None or e.line != parsed.records[-1][0]:
                    raise
                parsed = read_records(path, keep_unterminated=False)
                store = cls._from_records(path, parsed)
        finally:
            if gc_was_on:
                gc.enable()
        return parsed, store

    @classmethod
    def _from_index(cls, path: Path, fast: index.Loaded) -> SessionStore:
        store = cls(fast.header, path)
        store._partial = True
        store._count, store._leaf, store._branch = fast.count, fast.leaf, fast.branch
        store._last = fast.leaf  # the file's last entry, by construction
        store._by_id.update(fast.known)
        store._unindexed = len(fast.known)
        return store

    def _load_all(self) -> None:
        """Parse the whole file (a partial store, when every entry is needed)."""
        if not self._partial:
            return
        assert self.path is not None
        _, full = type(self)._parse(self.path)
        # keep the objects already handed out (the branch read so far, appends)
        known = {e.id: e for e in self._branch.read()} | self._by_id
        full_ids = {e.id: known.get(e.id, e) for e in full._entries}
        self._entries = list(full_ids.values())
        self._by_id = full_ids
        self._offset = full._offset
        self._count = len(self._entries)
        self._partial = False
        if self._leaf is not None and self._leaf not in self._by_id:
            raise SessionError(f"{self.path} changed under session {self.id}: reopen it")

    @classmethod
    def _from_records(cls, path: Path, parsed: Parsed) -> SessionStore:
        records = parsed.records
        line_nos = [n for n, _ in records]
        dicts = [d for _, d in records]
        if not dicts or dicts[0].get("type") != "session":
            raise SessionCorrupt(str(path), 1, "the first line is not a session header")
        old_version = dicts[0].get("version", 0)
        try:
            dicts = migrations.migrate(dicts)
        except ValueError as e:
            raise SessionCorrupt(str(path), 1, str(e)) from e
        header = build(path, line_nos[0], dicts[0])
        assert isinstance(header, SessionHeader)
        store = cls(header, path)
        store._needs_rewrite = old_version != dicts[0]["version"]
        store._old_version = old_version
        offsets = parsed.offsets
        for k, (line_no, d) in enumerate(zip(line_nos[1:], dicts[1:], strict=True), 1):
            entry = build(path, line_no, d)
            if isinstance(entry, SessionHeader):
                raise SessionCorrupt(str(path), line_no, "a second session header")
            if entry.id in store._by_id or entry.id == header.id:
                raise SessionCorrupt(str(path), line_no, f"duplicate entry id {entry.id}")
            if entry.parent_id is not None and entry.parent_id not in store._by_id:
                raise SessionCorrupt(str(path), line_no, f"unknown parent_id {entry.parent_id}")
            store._entries.append(entry)
            store._by_id[entry.id] = entry
            store._offset[entry.id] = offsets[k]
        store._count = len(store._entries)
        if store._entries:
            store._leaf = store._entries[-1].id
            store._branch = store._walk(store._leaf)
        return store

    _needs_rewrite = False
    _old_version: Any = None

    # -- properties ---------------------------------------------------------------------

    @property
    def id(self) -> str:
        return self.header.id

    @property
    def dir(self) -> Path | None:
        return self.path.parent if self.path else None

    @property
    def entries(self) -> list[Entry]:
        """Every entry in file order (all branches), header excluded."""
        self._load_all()
        return list(self._entries)

    @property
    def leaf_id(self) -> str | None:
        return self._leaf

    def get(self, entry_id: str) -> Entry:
        if entry_id not in self._by_id:
            self._load_all()
        try:
            return self._by_id[entry_id]
        except KeyError:
            raise SessionError(f"session {self.id} has no entry {entry_id}") from None

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Entry]:
        self._load_all()
        return iter(list(self._entries))

    # -- writing ------------------------------------------------------------------------

    def append(self, entry: Entry, durable: bool = True) -> Entry:
        """Record `entry` (parent defaults to the leaf), fsync, and make it the leaf. Safe
        from any thread (the checkpoint writer, children append too). durable=False: the
        next durable append (or `close`) fsyncs it; a killed process still loses nothing."""
        with self._append_lock:
            return self._append(entry, durable)

    def _append(self, entry: Entry, durable: bool = True) -> Entry:
        if isinstance(entry, SessionHeader):
            raise SessionError("the session header is written by SessionStore.create")
        if entry.id in self._by_id or entry.id == self.header.id:
            raise SessionError(f"entry id {entry.id} already exists in session {self.id}")
        if entry.parent_id is None:
            entry.parent_id = self._leaf
        elif entry.parent_id != self._leaf and entry.parent_id not in self._by_id:
            self._load_all()  # a partial store has read only the branch's tail
            if entry.parent_id not in self._by_id:
                raise SessionError(f"parent {entry.parent_id} is not in session {self.id}")
        line = _dumps(entry)
        if self._secrets:
            clean = redact_text(line.decode(), self._secrets, patterns=False).encode()
            if clean != line:  # keep memory and disk identical: a resume must see the same
                line = clean
                entry.__dict__.update(entry_from_dict(json.loads(clean)).__dict__)
        offset = self._write(line, durable) if self.path is not None else -1
        if not self._partial:
            self._entries.append(entry)
            self._offset[entry.id] = offset
        self._by_id[entry.id] = entry
        self._count += 1
        if entry.parent_id == self._leaf and (self._leaf is not None or not self._branch):
            self._branch.append(entry, offset)
        else:
            self._branch = self._walk(entry.id)
        self._leaf = self._last = entry.id
        self._unindexed += 1
        if isinstance(entry, CompactionEntry) or self._unindexed >= INDEX_EVERY:
            self._save_index()
        return entry

    def set_leaf(self, entry_id: str | None) -> None:
        """Resume from `entry_id` (None: before the first entry); the next append branches."""
        if entry_id is not None:
            self.get(entry_id)
        if entry_id == self._leaf:
            return
        self._load_all()
        self._leaf = entry_id
        self._branch = self._walk(entry_id) if entry_id else Branch.of([])

    def close(self) -> None:
        if self._unindexed:
            self._save_index()
        if self._file is not None:
            self._file.close()

    def __enter__(self) -> SessionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _save_index(self) -> None:
        """Refresh session.index (a cache: a failure to write it is ignored). Only while the
        leaf is the file's last entry: that is the leaf every open starts from."""
        last = self._entries[-1].id if not self._partial and self._entries else self._last
        if self.path is None or self._needs_rewrite or self._leaf != last:
            return
        covered = index.covered_now(self.path, self._count, self._leaf, self._branch.view())
        if covered is not None:
            index.save(self.path, covered)
        self._unindexed = 0

    def _write(self, line: bytes, durable: bool = True) -> int:
        """Append `line` (durably, unless told not to); returns the offset it starts at."""
        assert self._file is not None
        return self._file.write(line, durable)

    def sync_soon(self) -> None:
        """Begin making every appended line durable, beside the caller (`LogFile.sync_soon`):
        done before any model request (the seam waits for it) and by `close`."""
        with self._append_lock:
            if self._file is not None:
                self._file.sync_soon()

    # -- reading the tree ---------------------------------------------------------------

    def _walk(self, leaf: str) -> Branch:
        """The branch to `leaf` (a complete store: every entry is in memory)."""
        out: list[Entry] = []
        cur: str | None = leaf
        while cur is not None:
            e = self._by_id[cur]
            out.append(e)
            cur = e.parent_id
        out.reverse()
        return Branch.of(out, [self._offset.get(e.id, -1) for e in out])

    def branch(self, leaf: str | None = None) -> Branch:
        """Entries root -> `leaf` (default: the current leaf), header excluded: an O(1)
        snapshot (`Branch.view`) whose entries are read from disk when first touched."""
        if leaf is None or leaf == self._leaf:
            return self._branch.view()
        self.get(leaf)
        self._load_all()
        return self._walk(leaf)

    def tree(self) -> dict[str | None, list[str]]:
        """Children map: parent id (None for roots) -> child ids in file order."""
        self._load_all()
        children: dict[str | None, list[str]] = {}
        for e in self._entries:
            children.setdefault(e.parent_id, []).append(e.id)
        return children

    # -- context ------------------------------------------------------------------------

    def messages(self, *, system_prompt: str, native_tools: bool) -> list[dict[str, Any]]:
        """`build_messages(self.branch(), ...)`, maintained incrementally.

        The returned dicts are shared with the cache: treat them as read-only."""
        return self._projections.of(self._branch, system_prompt, native_tools).messages()

    def projection_of(self, branch: Sequence[Entry], *, system_prompt: str,
                      native_tools: bool) -> list[dict[str, Any]]:
        """`build_messages(branch, ...)`, from the incremental projection when `branch` is
        the current branch or a prefix of it. Read-only dicts, as `messages`."""
        return self._projections.project(self._branch, branch, system_prompt=system_prompt,
                                         native_tools=native_tools)


def _terminate(path: Path) -> None:
    """Write the missing newline after a whole last entry, so the next append starts a line."""
    fd = open_regular(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)


def _move_torn_tail(path: Path, cut: int) -> Path:
    """Copy the bytes from `cut` on aside (fsynced), then truncate the log at `cut`."""
    with os.fdopen(safeio.open_file(path.parent, path.name), "rb") as f:
        f.seek(cut)
        torn = f.read()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
    aside = path.with_name(f"{path.name}.torn-{stamp}")
    write_private_atomic(aside, torn)
    fd = open_regular(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, cut)
        os.fsync(fd)
    finally:
        os.close(fd)
    return aside


def _rewrite_migrated(path: Path, store: SessionStore) -> None:
    """Keep the original as session.jsonl.v<N>.bak, then atomically write the migrated log."""
    backup = path.with_name(f"{path.name}.v{store._old_version}.bak")
    if not backup.exists():
        write_private_atomic(backup, safeio.read_bytes(path.parent, path.name))
    lines = [_dumps(e) for e in [store.header, *store._entries]]
    write_private_atomic(path, b"".join(lines))
    store._needs_rewrite = False
    at = len(lines[0])
    for e, line in zip(store._entries, lines[1:], strict=True):  # where they are now
        store._offset[e.id] = at
        at += len(line)
    if store._leaf is not None:
        store._branch = store._walk(store._leaf)


LAST = "last"


def resolve_session_dir(ref: str | Path, home: Path | None = None) -> Path:
    """The directory of an EXISTING session, from what a user typed. Creates nothing.

    `ref` is one of:
    - `last`: the newest top-level session under $RLM_HOME/sessions;
    - an id, or a unique prefix or suffix of one (letters, digits, '.', '_', '-'; never
      used as a glob pattern), looked up among $RLM_HOME/sessions/*;
    - a path (a `Path`, or text containing '/'): a session directory or its session.jsonl.
      It counts as a session directory only if it holds a regular file `session.jsonl`
      (not a symlink) and is owned by this user and not writable by group or others.
      Such a directory may live outside $RLM_HOME (a copied session, a child session);
      anything else (`/etc`, `/srv/shared`, `../../victim`) is refused, so nothing rlm
      later writes there (worker.lock, scheduled-jobs.json, chmod) can reach it.
    Anything else raises a one-line SessionError.
    """
    found = _find_session_dir(ref, home)
    check_session_layout(found)
    return found


def _find_session_dir(ref: str | Path, home: Path | None) -> Path:
    if isinstance(ref, Path) or "/" in ref or ref in (".", ".."):
        return _session_dir_from_path(Path(ref))
    if ref == LAST:
        found = list_sessions(home)
        if not found:
            raise SessionError("no sessions yet, so no `last` one: start one with `rlm run TASK`")
        return found[-1].path.parent
    root = sessions_path(home)
    check_session_id(ref)
    exact = root / ref
    if _is_session_file(exact / FILE_NAME):
        return exact
    matches = []
    with contextlib.suppress(OSError):
        with os.scandir(root) as it:
            for d in it:
                if (d.name.startswith(ref) or d.name.endswith(ref)) and _is_session_file(
                    Path(d.path) / FILE_NAME
                ):
                    matches.append(d.name)
    if len(matches) == 1:
        return root / matches[0]
    if len(matches) > 1:
        names = ", ".join(sorted(matches)[:5])
        raise SessionError(f"session id {ref!r} is ambiguous ({names}); give more of it")
    raise SessionError(f"no session {ref!r} under {root}; list them with `rlm sessions`")


def _is_session_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except (OSError, ValueError):
        return False


def _session_dir_from_path(p: Path) -> Path:
    folder = p.parent if p.name == FILE_NAME and not p.is_dir() else p
    try:
        folder = folder.resolve(strict=True)
        st = os.stat(folder)
    except (OSError, RuntimeError, ValueError) as e:
        raise SessionError(f"no session directory at {p} ({reason(e)})") from None
    if not stat.S_ISDIR(st.st_mode) or not _is_session_file(folder / FILE_NAME):
        raise SessionError(
            f"{p} is not a session directory (no {FILE_NAME} in it); `rlm sessions` lists them"
        )
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise SessionError(
            f"{folder} is a session directory you do not own privately (owner uid "
            f"{st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}); rlm only uses sessions in "
            "directories owned by you and not writable by others"
        )
    return folder


def _mtime(path: Path) -> str:
    try:
        return datetime.fromtimestamp(os.lstat(path).st_mtime, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    except OSError:
        return ""


def resolve_session_path(id_or_path: str | Path, home: Path | None = None) -> Path:
    """The session.jsonl of an existing session (see `resolve_session_dir`)."""
    return resolve_session_dir(id_or_path, home) / FILE_NAME


def list_sessions(home: Path | None = None) -> list[SessionInfo]:
    """Top-level sessions under $RLM_HOME/sessions, oldest first (reads only headers)."""
    root = sessions_path(home)
    out: list[SessionInfo] = []
    try:
        with os.scandir(root) as it:
            paths = [Path(d.path) / FILE_NAME for d in it]
    except OSError:
        return out
    for path in paths:
        if not _is_session_file(path):
            continue
        head: Any = None
        try:
            with os.fdopen(open_regular(path), "rb") as f:  # no symlink, FIFO, device
                head = json.loads(f.readline(1 << 20))
            problem = None if isinstance(head, dict) and head.get("type") == "session" else \
                "the first line is not a session header"
        except ValueError as e:
            problem = f"corrupt header ({reason(e)})"
        except OSError:
            continue  # gone, or not a regular file: not a session
        if problem is None:
            try:  # a FIFO or symlinked lock, a symlinked snapshot/: listed with the reason
                check_session_layout(path.parent)
            except SessionError as e:
                problem = str(e)
        if problem is not None:  # listed, so it does not vanish; `rlm log` gives the detail
            out.append(SessionInfo(id=path.parent.name, path=path, model="", task=None,
                                   created=_mtime(path), parent_session=None, problem=problem))
            continue
        # the id is the directory's name (what `rlm resume ID` finds): a copied session
        # keeps its header's id, and must not be listed twice under it
        header_id = str(head.get("id", path.parent.name))
        out.append(
            SessionInfo(
                id=path.parent.name,
                header_id=header_id if header_id != path.parent.name else None,
                path=path,
                model=str(head.get("model", "")),
                task=head.get("task"),
                created=str(head.get("timestamp", "")),
                parent_session=head.get("parent_session"),
                cwd=str(head.get("cwd") or ""),
            )
        )
    out.sort(key=lambda s: (s.created, s.id))
    return out


__all__ = [
    "FILE_NAME", "LAST", "SessionInfo", "SessionStore", "list_sessions", "resolve_session_dir",
    "resolve_session_path",
]
