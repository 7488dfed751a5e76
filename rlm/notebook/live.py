"""A run watched live in the user's own notebook (issue 61): `rlm run TASK --live NB.ipynb`.

`LiveView` is an event consumer, like the terminal's renderer: it keeps rlm's cells of the
run up to date in one notebook while the run goes on.

- **What rlm's cells are** (`LiveCells`): the export's own rules (rlm.notebook.export),
  fed the session's new entries as they land, so the live notebook is the record
  `rlm export` writes and re-runs like it. The one thing the log does not hold yet, the
  cell that is running, is laid over it: marked running (`metadata.rlm_live.status`, the
  `rlm-running` tag) with what it printed so far.
- **Where they go** (`plan`): into the notebook's cell list as it is now. rlm's cells carry
  `metadata.rlm_live = {"session", "id"}`; every other cell is the user's and is never
  moved, changed or removed. One of rlm's cells the user edited (its source is not what
  rlm last wrote) or deleted is theirs from then on: not updated, not put back. A new cell
  of rlm's goes after rlm's cell before it and after the user's cells that follow that
  one (at the end, as a run appends; the prelude before rlm's first cell).
- **How they are written** (`NotebookFile`): the whole notebook atomically (a temporary
  file renamed over it, never through a link), and only over the bytes rlm wrote last: a
  notebook changed outside rlm mid-run is left as it is and the run says so once (the
  stale-write guard). JupyterLab shows these changes on reload.
- **Or through the Jupyter server that serves it** (rlm.notebook.collab, `open_sink`): a
  server with real-time collaboration (jupyter-collaboration) has rlm join the notebook's
  room as one more client and edit the shared document, so JupyterLab shows the cells as
  they come; the server saves the file, rlm does not write it.
- **One run per notebook** (`LiveLock`): an flock on a hidden file beside the notebook,
  so runs of any rlm home or user meet it; a second `--live` run on it is refused with
  one line, before it starts.
- **Nothing secret**: the export's redaction, applied to every cell written.

A live view never stops the run: a write that fails says why once and the view stops.
"""

from __future__ import annotations

import copy
import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nbformat.corpus.words import generate_corpus_id
from nbformat.v4 import new_output

from rlm.events import (
    CellFinished,
    CellOutput,
    CellStarted,
    ChildProgress,
    Event,
    ModelCallStarted,
    ModelCode,
    ModelText,
    Notice,
    Phase,
    RunEnded,
    TurnStarted,
)
from rlm.notebook.export import finish_notebook, new_builder, redact
from rlm.notebook.livefile import (  # noqa: F401 - LiveError, NotebookFile re-exported
    LIVE,
    LiveError,
    LiveLock,
    NotebookFile,
    Op,
    Sink,
    apply,
    source_of,
)
from rlm.session.entries import Entry, SessionHeader

RUNNING_TAG = "rlm-running"
STREAM_CAP = 100_000  # characters of a running cell's output shown before the rest is elided
WRITE_EVERY_S = 0.5  # a running cell's printed output is written at most this often
# events that change nothing a notebook shows (the reply's tokens, progress lines)
_QUIET = (ModelText, ModelCode, ModelCallStarted, Phase, TurnStarted, ChildProgress, Notice)


# ---------------------------------------------------------------- rlm's cells
class LiveCells:
    """rlm's cells of a session, as `rlm export` would write them, kept current: the
    branch's new entries are fed to one export builder (a branch that no longer extends
    what was fed, after a rewind, starts a new one), and the running cell is laid over."""

    def __init__(self, header: SessionHeader, session_dir: Path):
        self.header, self.session_dir = header, session_dir
        self._builder = new_builder(session_dir, header)
        self._fed: list[str] = []  # ids of the entries fed, in order
        self._base: list[Any] = []  # the cells of what was fed (never changed once made)
        self._settled: dict[int, Any] = {}  # finish_notebook's copies of settled cells
        self.running: str | None = None  # the running cell's code
        self.printed: list[tuple[str, str]] = []  # (stream name, text) it printed so far
        self._printed_chars = 0

    def feed(self, branch: Sequence[Entry]) -> None:
        """The branch's entries not fed yet; the cells are made again only when some were."""
        entries = list(branch)
        n = len(self._fed)
        if len(entries) < n or (n and entries[n - 1].id != self._fed[-1]):
            self._builder = new_builder(self.session_dir, self.header)
            self._fed, self._settled, n = [], {}, 0
        if n == len(entries) and self._fed:
            return
        for entry in entries[n:]:
            self._builder.add(entry)
            self._fed.append(entry.id)
        nb = finish_notebook(self._builder, entries, self.header, settled=self._settled)
        for cell in nb.cells:
            cell.metadata[LIVE] = {"session": self.header.id, "id": cell.id}
        self._base = list(nb.cells)

    def start(self, code: str | None) -> None:
        """A cell started (None: the one running ended)."""
        self.running, self.printed, self._printed_chars = code, [], 0

    def print(self, name: str, text: str) -> None:
        """What the running cell printed; past STREAM_CAP characters only the fact is kept
        (a cell printing 100 MB holds no more than that here; its result has it all)."""
        if self._printed_chars <= STREAM_CAP:
            self.printed.append((name, text[: STREAM_CAP + 1 - self._printed_chars]))
            self._printed_chars += len(self.printed[-1][1])

    def cells(self) -> list[Any]:
        """rlm's cells now, each marked with the session and its id; redacted. The cells
        of the log are shared between calls; the running one is a copy made here."""
        out = list(self._base)
        if self.running is not None:
            self._lay_running(out)
        return out

    def _lay_running(self, cells: list[Any]) -> None:
        for i in reversed(range(len(cells))):  # the newest code cell without its result yet
            cell = cells[i]
            if cell.cell_type != "code" or "rlm" in cell.metadata:
                continue
            if cell.source.strip() != redact([self.running or ""])[0].strip():
                return  # (the cell's source is redacted: so is the code compared)
            cell = cells[i] = copy.deepcopy(cell)
            cell.metadata[LIVE]["status"] = "running"
            cell.metadata["tags"] = [*cell.metadata.get("tags", []), RUNNING_TAG]
            cell.outputs = redact(_streams(self.printed))
            return


def _streams(printed: list[tuple[str, str]]) -> list[Any]:
    """What a running cell printed, as notebook outputs (consecutive text of one stream
    joined), its text past STREAM_CAP elided (the full output comes with the result)."""
    outs: list[Any] = []
    shown = 0
    for name, text in printed:
        kind = name if name in ("stdout", "stderr") else "stdout"
        if shown >= STREAM_CAP:
            break
        text = text[: STREAM_CAP - shown]
        shown += len(text)
        if shown >= STREAM_CAP:
            text += "\n[... more output: the whole of it appears when the cell ends]\n"
        if outs and outs[-1].name == kind:
            outs[-1].text += text
        else:
            outs.append(new_output("stream", name=kind, text=text))
    return outs


# ---------------------------------------------------------------- where they go
def fingerprint(cell: Any) -> str:
    return hashlib.sha256(source_of(cell).encode()).hexdigest()


def plan(current: Sequence[Any], ours: Sequence[Any], session_id: str,
         written: dict[str, str]) -> list[Op]:
    """The ops that bring rlm's cells in `current` (the notebook's cells as they are) up to
    `ours`, touching nothing else. `written`: each cell id rlm wrote -> the fingerprint of
    the source it wrote (a cell whose source differs now was edited by the user; one
    absent now was deleted by the user: both are left so). A cell of rlm's that `ours` no
    longer holds (the task line before the task's message landed, a rewound branch's) is
    removed, unless the user edited it."""
    cells = list(current)
    ops: list[Op] = []
    keep = {cell["metadata"][LIVE]["id"] for cell in ours}
    for i in reversed(range(len(cells))):
        key = _live_id(cells[i], session_id)
        if key is not None and key not in keep and \
                written.get(key) in (None, fingerprint(cells[i])):
            ops.append(Op("delete", i, cells[i]))
            del cells[i]
    where = {_live_id(c, session_id): i for i, c in enumerate(cells)}
    where.pop(None, None)
    after: int | None = None  # the index of rlm's cell before the one placed next
    for cell in ours:
        key = cell["metadata"][LIVE]["id"]
        found = where.get(key)
        if found is not None:
            i = after = found
            if written.get(key) not in (None, fingerprint(cells[i])):
                continue  # the user edited it: theirs now
            if _differs(cells[i], cell):
                cell = _with_id(cell, cells[i].get("id"))  # the cell keeps its id
                ops.append(Op("update", i, cell))
                cells[i] = cell
            continue
        if key in written:
            continue  # rlm wrote it and the user deleted it
        present = sorted(where.values())
        if after is None:  # before rlm's first cell present, else at the end
            at = present[0] if present else len(cells)
        else:  # after rlm's cell before it and the user's cells that follow that one
            at = next((j for j in present if j > after), len(cells))
        if cell.get("id") in {c.get("id") for c in cells}:  # ids are unique in a notebook
            cell = _with_id(cell, generate_corpus_id())  # (another run's `task`, a user's)
        ops.append(Op("insert", at, cell))
        cells.insert(at, cell)
        where = {k: (j + 1 if j >= at else j) for k, j in where.items()}
        where[key] = at
        after = at
    return ops


def _with_id(cell: Any, cell_id: Any) -> Any:
    if cell_id is None or cell.get("id") == cell_id:
        return cell
    cell = copy.copy(cell)
    cell["id"] = cell_id
    return cell


def _live_id(cell: Any, session_id: str) -> str | None:
    mark = (cell.get("metadata") or {}).get(LIVE)
    if isinstance(mark, dict) and mark.get("session") == session_id:
        return str(mark.get("id"))
    return None


def _differs(a: Any, b: Any) -> bool:
    return any(a.get(k) != b.get(k) for k in ("cell_type", "source", "outputs", "metadata",
                                                "execution_count", "attachments"))


# ---------------------------------------------------------------- the view
class LiveView:
    """`--live NB`: call it with every event of the run (`view(event)`); `close()` at the
    end. `branch` returns the session's branch as it is now; `say` tells the user a line
    (the stale-write guard, a write that failed)."""

    def __init__(self, path: str | Path, header: SessionHeader, session_dir: Path,
                 branch: Callable[[], Sequence[Entry]],
                 say: Callable[[str], None], clock: Callable[[], float] = time.monotonic):
        self.lock = LiveLock(Path(path))
        self.lock.acquire()
        try:  # the file, or the shared document of a Jupyter server that serves it
            from rlm.notebook.collab import open_sink

            self.file: Sink = open_sink(Path(path), header, say)
        except BaseException:
            self.lock.release()
            raise
        self.header, self.branch, self.say, self.clock = header, branch, say, clock
        self.cells = LiveCells(header, session_dir)
        self.written: dict[str, str] = {}
        self.stopped: str | None = None
        self._last_write = float("-inf")
        self._shown: list[Any] | None = None
        self._lock = threading.Lock()  # a flush from the timer and one from an event
        self._timer: threading.Timer | None = None
        self.flush()  # what the session already holds (a resume), before the first event

    def __call__(self, ev: Event) -> None:
        self.take(ev)

    def take(self, ev: Event, write: bool = True) -> None:
        """One event of the run; `write=False`: only what it says about the running cell is
        kept (`rlm attach` replays what happened before it came, then flushes once)."""
        if self.stopped is not None or isinstance(ev, _QUIET):
            return
        with self._lock:
            if not write:
                self._follow(ev)
                return
            if isinstance(ev, CellOutput):
                self._follow(ev)
                wait = WRITE_EVERY_S - (self.clock() - self._last_write)
                if wait > 0:  # written with what else it prints meanwhile, once `wait` is up
                    self._later(wait)
                    return
            self._follow(ev)
        self.flush()

    def _follow(self, ev: Event) -> None:
        if isinstance(ev, CellOutput):
            self.cells.print(ev.name, ev.text)
        elif isinstance(ev, CellStarted):
            self.cells.start(ev.code)
        elif isinstance(ev, CellFinished | RunEnded):
            self.cells.start(None)

    def _later(self, wait: float) -> None:
        if self._timer is None or not self._timer.is_alive():
            self._timer = threading.Timer(wait, self.flush, kwargs={"feed": False})
            self._timer.daemon = True
            self._timer.start()

    def flush(self, feed: bool = True) -> None:
        """Bring the notebook up to the session (`feed`: read its new entries; the timer's
        flush of a running cell's output reads none, only this process's own state)."""
        with self._lock:
            if self.stopped is None:
                self._flush(feed)

    def _flush(self, feed: bool) -> None:
        try:
            if feed:
                self.cells.feed(self.branch())
            ours = self.cells.cells()
            if ours == self._shown:
                return
            ops = plan(self.file.cells(), ours, self.header.id, self.written)
            if ops and not self.file.apply(ops):
                self._stop(self.file.stale or "the notebook changed")
                return
            for op in ops:
                key = op.cell["metadata"][LIVE]["id"]
                if op.kind == "delete":
                    self.written.pop(key, None)
                else:
                    self.written[key] = fingerprint(op.cell)
            self._shown = ours  # (its cells are never changed once made)
            self._last_write = self.clock()
        except Exception as e:  # noqa: BLE001 - the view never stops the run
            self._stop(f"the live notebook {self.file.path} stopped updating: {e}")

    def _stop(self, why: str) -> None:
        self.stopped = why
        self.say(why)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        with self._lock:
            self.cells.start(None)  # a run that ended mid-cell: no cell left "running"
        try:
            self.flush()
        finally:
            try:
                self.file.close()  # (a shared document: its last changes sent, the room left)
            finally:
                self.lock.release()


def attached(path: str | Path, session_dir: Path, say: Callable[[str], None]) -> LiveView:
    """`rlm attach SESSION --live NB`: the view of a run another process drives (a detached
    worker, an autonomous run with its heartbeats), its entries read from the session's log
    as they land (each flush opens the log read-only: O(the session) a cell, as `rlm log`)."""
    from rlm.session.store import SessionStore

    def branch() -> list[Entry]:
        store = SessionStore.open(session_dir, readonly=True)
        return list(store.branch())

    header = SessionStore.open(session_dir, readonly=True).header
    return LiveView(path, header, session_dir, branch, say)
