"""Where a live view's cells are written (issue 61): the notebook file, and what every
sink shares. rlm.notebook.live decides what rlm's cells are and where they go (`Op`s);
this module writes them to the file (`NotebookFile`: whole and atomic, only over what rlm
wrote last) and keeps one run per notebook (`LiveLock`); rlm.notebook.collab writes them to
a Jupyter server's shared document instead.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import nbformat
from nbformat.corpus.words import generate_corpus_id
from nbformat.v4 import new_notebook

from rlm import safeio
from rlm.errors import RlmError, SessionError
from rlm.longrun.lock import SessionBusy, SessionLock
from rlm.notebook.export import _metadata
from rlm.paths import PRIVATE_FILE
from rlm.session.entries import SessionHeader

LIVE = "rlm_live"  # cell metadata: {"session": id, "id": the export's cell id, "status"?}


class LiveError(RlmError):
    """The notebook cannot be watched live (a second run on it, not a notebook, a link)."""


@dataclass(frozen=True)
class Op:
    """One change to a notebook's cell list: `insert` a cell at `index`, or `update` the
    cell at `index` to `cell`. Applied in order, each index is valid when its op applies."""

    kind: str  # insert | update | delete
    index: int
    cell: dict[str, Any]


def source_of(cell: Any) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def apply(cells: list[Any], ops: Sequence[Op]) -> None:
    for op in ops:
        if op.kind == "insert":
            cells.insert(op.index, op.cell)
        elif op.kind == "delete":
            del cells[op.index]
        else:
            cells[op.index] = op.cell


# ---------------------------------------------------------------- how they are written
class Sink(Protocol):
    """Where rlm's cells are written: the notebook file (`NotebookFile`) or the shared
    document a Jupyter server holds for it (rlm.notebook.collab.CollabNotebook)."""

    path: Path
    stale: str | None  # why it stopped writing, once it has

    def cells(self) -> list[Any]: ...  # the notebook's cells as they are now

    def apply(self, ops: Sequence[Op]) -> bool: ...  # False (and `stale`) when it cannot

    def close(self) -> None: ...


def check_path(path: Path) -> os.stat_result | None:
    """Refuse a --live path that cannot be rlm's notebook (no such directory, a link, not
    a regular file); its lstat, None when it does not exist yet."""
    if not path.parent.is_dir():
        raise LiveError(f"the directory {path.parent} does not exist; create it first or "
                        "choose another --live notebook")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file"
        raise LiveError(f"{path} is {what}; give the notebook's own path to --live")
    return st


def parse_notebook(path: Path, data: bytes) -> Any:
    try:
        nb = nbformat.reads(data.decode("utf-8"), as_version=4)
    except Exception as e:  # noqa: BLE001 - any reason it does not parse: one line
        raise LiveError(f"{path} is not a notebook nbformat can read ({e}); fix it "
                        "or give --live a new file name") from None
    if nb.nbformat_minor < 5:  # cells without ids (nbformat 4.4): rlm's cells need them
        nb.nbformat_minor = 5
        for cell in nb.cells:
            cell.setdefault("id", generate_corpus_id())
    return nb


class NotebookFile:
    """The notebook on disk, written whole and atomically, and only over what rlm wrote
    last (`stale` says why it stopped)."""

    def __init__(self, path: Path, header: SessionHeader):
        self.path = Path(os.path.abspath(path))
        self.dir, self.name = self.path.parent, self.path.name
        self.header = header
        self.stale: str | None = None
        self.mode = PRIVATE_FILE
        self._texts: dict[int, tuple[Any, str]] = {}  # id(cell) -> (cell, its JSON text)
        st = check_path(self.path)
        if st is None:
            self._nb = new_notebook(metadata=_metadata(header))
            self._last = self._write(self._nb)
        else:
            self.mode = stat.S_IMODE(st.st_mode)
            data = self._read()
            self._nb = self._parse(data)  # not a notebook: refused before the run
            self._last = hashlib.sha256(data).hexdigest()

    def _read(self) -> bytes:
        try:
            return safeio.read_bytes(self.dir, self.name)
        except (OSError, SessionError) as e:
            raise LiveError(f"cannot read {self.path}: {e}") from None

    def _parse(self, data: bytes) -> Any:
        return parse_notebook(self.path, data)

    def _write(self, nb: Any) -> str:
        data = (self._encode(nb) + "\n").encode()
        safeio.write_atomic(self.dir, self.name, data, mode=self.mode, durable=False)
        return hashlib.sha256(data).hexdigest()

    def _encode(self, nb: Any) -> str:
        """`json.dumps(nb, indent=1, sort_keys=True)`, nbformat's own layout, byte for byte,
        with each cell's text kept between writes (cells are never changed once made: a
        new state is a new cell object) — a running cell's output rewrites a notebook of
        hundreds of cells at every flush. No schema walk over the whole notebook either:
        rlm's cells were each made by nbformat's constructors, the user's read by it."""
        texts: dict[int, tuple[Any, str]] = {}
        parts = []
        for cell in nb.cells:
            hit = self._texts.get(id(cell))
            if hit is None or hit[0] is not cell:
                text = json.dumps(cell, indent=1, sort_keys=True, ensure_ascii=False)
                hit = (cell, "  " + text.replace("\n", "\n  "))
            texts[id(cell)] = hit
            parts.append(hit[1])
        self._texts = texts
        rest = json.dumps({k: v for k, v in nb.items() if k != "cells"}, indent=1,
                          sort_keys=True, ensure_ascii=False)
        cells = '{\n "cells": [\n' + ",\n".join(parts) + "\n ]," if parts else '{\n "cells": [],'
        return cells + rest[1:]

    def cells(self) -> list[Any]:
        """The notebook's cells: as rlm wrote them last (parsed once), or as they are on
        disk after a change made outside rlm (which `apply` then refuses to write over)."""
        data = self._read()
        if hashlib.sha256(data).hexdigest() == self._last:
            return list(self._nb.cells)
        return list(self._parse(data).cells)

    def apply(self, ops: Sequence[Op]) -> bool:
        """Write `ops` over the notebook as it is; False (and `stale` set) when it is no
        longer what rlm wrote last."""
        if self.stale is not None:
            return False
        data = self._read()
        if hashlib.sha256(data).hexdigest() != self._last:
            self.stale = (f"{self.path} changed outside rlm since rlm last wrote it: rlm stopped "
                          "writing to it and kept that version. The run goes on; its whole "
                          f"record afterwards: `rlm export {self.header.id} -o OTHER.ipynb`")
            return False
        cells = list(self._nb.cells)
        apply(cells, ops)
        nb = copy.copy(self._nb)
        nb.cells = cells
        self._last = self._write(nb)
        self._nb = nb
        return True

    def close(self) -> None:
        """Nothing to leave: every write is whole and done."""


# ---------------------------------------------------------------- one run per notebook
class LiveLock:
    """An flock on a hidden file beside the notebook (`.NAME.rlm-live`): one run at a time,
    whatever rlm home or user each run has. It is removed when the run ends; a lock won on
    a file that was removed meanwhile is given up and taken again on the new one."""

    def __init__(self, notebook: Path):
        self.notebook = Path(os.path.abspath(notebook))
        self.lock = SessionLock(self.notebook.with_name(f".{self.notebook.name}.rlm-live"),
                                kind="live")

    def acquire(self) -> None:
        for _ in range(100):
            try:
                self.lock.acquire()
            except SessionBusy as e:
                who = f"process {e.holder.pid}" if e.holder.pid else "another process"
                raise LiveError(f"{self.notebook} is already live for another run ({who}); "
                                "one run per notebook: wait for it to end or give --live "
                                "another notebook") from None
            except (OSError, SessionError) as e:
                raise LiveError(f"cannot lock {self.notebook} for a live view: {e}") from None
            assert self.lock._fd is not None
            try:
                if os.stat(self.lock.path, follow_symlinks=False).st_ino == \
                        os.fstat(self.lock._fd).st_ino:
                    return
            except FileNotFoundError:
                pass
            self.lock.release()  # won on a file its holder removed as it ended: again
        raise LiveError(f"cannot lock {self.notebook} for a live view: its lock file keeps "
                        "changing")

    def release(self) -> None:
        if self.lock.held:
            with contextlib.suppress(OSError):
                safeio.unlink(self.notebook.parent, self.lock.path.name)
        self.lock.release()
