"""Which line of the running cell read data, and what each line said.

The host's "verified" rule (rlm.agent.policy.dataflow) counts a figure only when a line of
a cell that depends on the task's data printed it. The host knows what each line reads
(names, by the cell's tree); only the kernel knows, as the cell runs, which line opened a
file and which line wrote which output. This module records both, per cell:

  read   the line numbers (of the cell's own code, as IPython ran it) that opened a file
         for reading (kernel_ext.fileops calls `note_read` from its audit hook);
  said   per line, the figures and words it wrote to stdout/stderr (kernel_ext.streams
         calls `note_output`), displayed (`display(...)`) or returned as the cell's value;
  wrote  per line, the files it opened for writing (`open(..., 'w')`, `to_csv`,
         `write_text`, `os.rename`'s target: kernel_ext.fileops calls `note_write`), at
         most MAX_WROTE: which statement a file's content comes from;
  partial the lines whose output was not all read for tokens (past PER_WRITE characters of
         one write or MAX_TOKENS of the cell): the host does not rule on what it cannot see.

  binds  the user names the cell bound: new, rebound or deleted (`del` binds, as in
         Python's execution model). Observed: each user name's id() before and after the
         cell (kernel_ext.user_names, the snapshot's rule for "the user's"), so `exec`,
         `globals()[...]` and a function's `global` count, and a cell that raised bound
         what ran before its error; a function's or a comprehension's locals never do. A
         cell that ended well also bound the names its own code assigns at module level
         that it left holding the very object they held (`n = 5` again, `lst += [1]`),
         read from its tree, which also counts a branch not taken over a name that
         existed. A loop's variable is bound, `def f` binds
         `f`, `import x as y` binds `y`. At most MAX_BINDS names, identifiers only; None
         when the namespace holds more than MAX_SCAN_NAMES names (two passes a cell over
         it are the cost).

A line is the cell's own: the outermost frame running in the user's namespace as a module
(an `exec` of a string inside the cell is the line that called it). Output written by a
thread (an earlier cell's, or this one's) belongs to no line. The record goes back in the
cell's execute_reply metadata (`wire.CELL_PROVENANCE`), as the files read do.
"""

from __future__ import annotations

import ast
import re
import sys
import threading
from typing import Any

from kernel_ext import cell_syntax, wire
from kernel_ext.user_names import UserNames

PER_WRITE = 1 << 16  # characters of one write read for tokens
MAX_TOKENS = 20_000  # tokens kept per cell
_TOKEN = re.compile(r"-?\d+(?:[.,]\d+)*(?:[eE][-+]?\d+)?|[^\W_](?:[\w'-]*[^\W_])?")

_ns: dict[str, Any] | None = None
_active = False
_read: set[int] = set()
_said: dict[int, set[str]] = {}
_partial: set[int] = set()
_wrote: dict[int, set[str]] = {}  # line -> the files it opened for writing (absolute)
MAX_WROTE = 64  # files a cell's record names as written, at most
_count = 0
MAX_BINDS = 1000  # names a cell's record carries (sorted: the first ones)
MAX_SCAN_NAMES = 250_000  # past this many names in the namespace a cell's binds are not told
_names = UserNames()  # the user's names -> id() when the running cell started
_hidden: dict[str, Any] = {}  # the shell's user_ns_hidden
_binds: list[str] | None = None  # the running (or last) cell's, once it ended
_code = ""  # the running cell's code, as the user wrote it


def cell_line() -> int | None:
    """The line of the running cell the current call comes from, or None (no cell runs,
    or another thread)."""
    if not _active or _ns is None or threading.current_thread() is not threading.main_thread():
        return None
    frame: Any = sys._getframe(1)
    while frame is not None:
        if frame.f_globals is _ns and frame.f_code.co_name == "<module>":
            back = frame.f_back  # an exec() of a string inside the cell runs below it
            if back is None or back.f_globals is not _ns:
                return int(frame.f_lineno)
        frame = frame.f_back
    return None


def note_read() -> None:
    line = cell_line()
    if line is not None:
        _read.add(line)


def note_write(path: str) -> None:
    """The line of the running cell that opened `path` for writing (kernel_ext.fileops'
    audit hook: every spelling of a write goes through an open)."""
    line = cell_line()
    if line is not None and sum(map(len, _wrote.values())) < MAX_WROTE:
        _wrote.setdefault(line, set()).add(path)


def note_output(text: str) -> None:
    """Record the tokens of `text`, written now, against the line writing it."""
    global _count
    if not text or not _active:
        return
    line = cell_line()
    if line is None:
        return
    if len(text) > PER_WRITE:
        _partial.add(line)
        text = text[:PER_WRITE]
    got = _said.setdefault(line, set())
    for m in _TOKEN.finditer(text):
        if _count >= MAX_TOKENS:
            _partial.add(line)
            return
        token = m.group(0).lower()
        if token not in got:
            got.add(token)
            _count += 1


def note_data(data: Any) -> None:
    """Record the text/plain of a displayed or returned value against its line."""
    _data_text(data)


def _data_text(data: Any) -> None:
    if isinstance(data, dict):
        text = data.get("text/plain")
        if isinstance(text, str):
            note_output(text)


def _started(info: Any = None, *_: Any) -> None:
    global _active, _count, _binds, _code
    _code = str(getattr(info, "raw_cell", "") or "")
    _read.clear()
    _wrote.clear()
    _said.clear()
    _partial.clear()
    _count = 0
    _scan()  # what changed between cells (a silent request, a restore) is not this cell's
    _binds = None
    _active = True


def _ended(result: Any = None, *_: Any) -> None:
    global _active
    _active = False
    _close_binds(result is not None and getattr(result, "success", False))


def _scan() -> set[str] | None:
    """The user names bound since the last scan (None: too many names to look at)."""
    if _ns is None or len(_ns) > MAX_SCAN_NAMES:
        return None
    changed, deleted = _names.scan(dict(_ns), _hidden)
    return changed | deleted


def _close_binds(succeeded: bool = False) -> None:
    global _binds
    if _binds is None:
        bound = _scan()
        if bound is not None and succeeded and _code:
            bound |= _assigned(_code) & _names.ids.keys()  # rebound to what they held
        _binds = None if bound is None else sorted(n for n in bound if n.isidentifier())[
            :MAX_BINDS]


def _assigned(code: str) -> set[str]:
    """The names the cell's own code binds at module level: not inside a function, a
    class body, a lambda or a comprehension (IPython's transforms first when it has
    magics)."""
    tree = _parse(code)
    out: set[str] = set()
    todo: list[ast.AST] = list(tree.body) if tree is not None else []
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Name):
            if not isinstance(node.ctx, ast.Load):
                out.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
            todo.extend(node.decorator_list)
        elif not isinstance(node, _SCOPES):
            todo.extend(cell_syntax.children(node))
    return out


_SCOPES = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _parse(code: str) -> ast.Module | None:
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError):
        pass
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        return ast.parse(TransformerManager().transform_cell(code))
    except Exception:  # noqa: BLE001 - a cell neither Python nor IPython reads binds nothing
        return None


def record() -> dict[str, Any]:
    _close_binds()
    return {"read": sorted(_read), "said": {str(k): sorted(v) for k, v in _said.items()},
            "partial": sorted(_partial), "binds": _binds,
            "wrote": {str(k): sorted(v) for k, v in _wrote.items()}}


_undo: list[Any] = []
_outer: list[tuple[Any, bool, UserNames, dict[str, Any]]] = []


class _Cell:
    def __init__(self, code: str) -> None:
        self.raw_cell = code


def begin(ns: dict[str, Any], hidden: dict[str, Any] | None = None, code: str = "") -> None:
    """A cell (`code`) starts in a namespace this module was not installed on (`%%rlm`
    runs the agent's cells in the user's own kernel: rlm.notebook.inprocess; `hidden`:
    that shell's user_ns_hidden); `end` gives its record and puts back what was there."""
    global _names, _hidden
    _outer.append((_ns, _active, _names, _hidden))
    _names, _hidden = UserNames(), hidden if hidden is not None else {}
    _set_ns(ns)
    _started(_Cell(code))


def end(result: Any = None) -> dict[str, Any]:
    """The record of the cell `begin` started (`result`: IPython's ExecutionResult, whose
    `success` says it ended well; None: it did not end)."""
    global _active, _names, _hidden
    _ended(result)
    out = record()
    ns, _active, _names, _hidden = _outer.pop() if _outer else (None, False, UserNames(), {})
    _set_ns(ns)
    return out


def _set_ns(ns: Any) -> None:
    global _ns
    _ns = ns


def install(ip: Any) -> None:
    global _ns, _hidden
    _ns = getattr(ip, "user_ns", None)
    hidden = getattr(ip, "user_ns_hidden", None)
    _hidden = hidden if isinstance(hidden, dict) else {}  # the shell's own: it grows
    if hasattr(ip, "events"):
        ip.events.register("pre_run_cell", _started)
        ip.events.register("post_run_cell", _ended)
    pub = getattr(ip, "display_pub", None)
    if pub is not None and "publish" not in vars(pub):
        own = pub.publish

        def publish(data: Any = None, *a: Any, **kw: Any) -> Any:
            _data_text(data)
            return own(data, *a, **kw)

        pub.publish = publish
        _undo.append(lambda: vars(pub).pop("publish", None))
    hook = getattr(ip, "displayhook", None)
    if hook is not None and "write_format_data" not in vars(hook):
        own_write = hook.write_format_data

        def write_format_data(format_dict: Any, *a: Any, **kw: Any) -> Any:
            _data_text(format_dict)
            return own_write(format_dict, *a, **kw)

        hook.write_format_data = write_format_data
        _undo.append(lambda: vars(hook).pop("write_format_data", None))
    kernel = getattr(ip, "kernel", None)
    own_finish = getattr(kernel, "finish_metadata", None)
    if kernel is not None and own_finish is not None:

        def finish_metadata(parent: Any, metadata: Any, reply_content: Any) -> Any:
            metadata = own_finish(parent, metadata, reply_content)
            content = parent.get("content") if isinstance(parent, dict) else None
            if isinstance(metadata, dict) and isinstance(content, dict) \
                    and not content.get("silent"):
                metadata[wire.CELL_PROVENANCE] = record()
            return metadata

        kernel.finish_metadata = finish_metadata
        _undo.append(lambda: setattr(kernel, "finish_metadata", own_finish))


def uninstall(ip: Any) -> None:
    global _ns, _active, _names, _hidden
    _names, _hidden = UserNames(), {}
    if hasattr(ip, "events"):
        for event, fn in (("pre_run_cell", _started), ("post_run_cell", _ended)):
            try:
                ip.events.unregister(event, fn)
            except ValueError:
                pass
    while _undo:
        _undo.pop()()
    _ns, _active = None, False
