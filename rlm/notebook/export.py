"""Export a session branch to a Jupyter notebook (nbformat v4).

Cell mapping, in branch order:

- the `--context` files (`context_vars` entry) -> a note and a code cell per file that loads
  it into the variable the agent had, by absolute path (a relative path of an old log is
  taken from the session's cwd); a file missing now gets a "⚠ missing" note and its cell
  the `raises-exception` tag. These come before the task, as they did in the run.
- the first user message -> markdown "**Task:** ..."; later user messages -> "**User:** ...";
  a user message the loop wrote itself (`origin` "nudge" or "continuation", or an old log's
  nudge text) -> an italic note "*rlm nudged the model: ...*", never the user's words
- an assistant message -> its prose (content without the fenced code the cells came from) as
  markdown, and one code cell per tool call, placed where its fence was in the prose
- a tool message -> the outputs of its code cell, rebuilt from the `cell` field
  (CellResult.to_dict()); mime payloads kept as artifacts are read back and embedded
- a compaction -> markdown "### Compaction summary (trigger, N tokens before)"
- a cell that killed or timed out the kernel, or a `kernel_restored` entry -> markdown
  "⚠ Kernel restarted: ..." right after the cell where it happened
- `final` -> markdown "**Final answer:** ..."; `notebook_import` -> the imported code cells
- the names the agent's kernel defined (kernel_ext.api, kernel_ext.aliases) that the cells
  use -> one first cell (`prelude`) defining them: `llm_query`, `llm_query_batched` and
  `rlm_query` answer from the session's `subcall` entries (rlm.agent.recursion), so "Run
  All" reproduces the session offline; `final`, `final_var`, `compact`, `goal`, `cron`,
  `heartbeat`, `memory` are no-ops that print so (a re-run never rewrites .agent/); `pd`, `np`, `plt` are imported
- a `context_vars` entry's files -> loader cells for the files that loaded (`loaded_inputs`)

Cells that raised carry the `raises-exception` tag so nbclient re-runs the notebook top to
bottom. Every string written is scanned for secrets (see `redact`).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import hashlib
import json
import os
import platform
import pprint
import re
import stat
from pathlib import Path
from typing import Any

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

import rlm
from kernel_ext.contract import ALIASES
from rlm import safeio
from rlm.agent.children import registry
from rlm.agent.context_files import loader_code, variable_name
from rlm.agent.nudge import WHY as _NUDGE_TEXTS
from rlm.agent.recursion import SUBCALL_ENTRY
from rlm.errors import RlmError
from rlm.ledger import spent_line
from rlm.outcome import RunOutcome
from rlm.paths import PRIVATE_FILE, fsync_dir
from rlm.secrets import known_secrets, redact_text, secret_values  # noqa: F401 - re-exported
from rlm.session.context import RELIEF_CUSTOM
from rlm.session.entries import (
    BranchSummaryEntry,
    CompactionEntry,
    CustomEntry,
    Entry,
    MessageEntry,
    ModelChangeEntry,
    SessionHeader,
    call_code,
)

_FENCE = re.compile(r"```[ \t]*(?:python|py|python3|ipython)?[ \t]*\n(.*?)```", re.DOTALL)
_TEXT_MIMES = ("text/", "image/svg+xml")
_API = ("llm_query_batched", "llm_query", "rlm_query", "rlm_spawn", "rlm_gather", "rlm_wait",
        "rlm_max_children", "yield_section", "final_var", "final", "compact", "history", "goal", "cron",
        "heartbeat", "memory")  # kernel_ext.api.NAMES (a test keeps them in step)
_SUB_CALLS = {"llm_query", "llm_query_batched", "rlm_query", "rlm_spawn", "rlm_gather",
              "rlm_wait"}
_USES = re.compile(r"\b(" + "|".join([*_API, *ALIASES]) + r")\b")


def memory_line(data: dict[str, Any]) -> str:
    """One line for a `memory_write` entry (rlm.app.memory): which file, how, by whom."""
    where = Path(str(data.get("path") or "")).name or str(data.get("file") or "?")
    how = data.get("mode") or data.get("action") or ""
    who = " (stated by the user)" if data.get("stated_by") == "user" else ""
    changed = data.get("changed_user_conventions") or []
    tail = f"; changed the user's convention(s): {' | '.join(map(str, changed))}" if changed else ""
    return f"{data.get('method', 'write')} -> .agent/{where}{f' ({how})' if how else ''}{who}{tail}"


class ExportError(RlmError):
    """The notebook cannot be written where asked."""


def export_session(store_or_path: Any, out_path: str | Path | None = None,
                   leaf: str | None = None, *, force: bool = False) -> Path:
    """Write the branch ending at `leaf` (default: the current leaf) as a notebook.

    `store_or_path` is a SessionStore, or a session id / directory / session.jsonl path.
    Returns the path written (default: ./<session id>.ipynb). The target must be a new
    file in an existing directory, or (with `force`) an existing regular file; anything
    else (a device, a directory, a symlink, a missing parent, no permission) is an
    `ExportError` and nothing is written. Each child the session spawned (rlm_spawn,
    rlm_query) is exported beside it, to `<name>.children/<child name>.ipynb` (its own
    children below it), and the notebook links them.
    """
    store = _open_store(store_or_path)
    session_dir = Path(store.dir) if store.dir is not None else Path.cwd()  # in-memory store
    out = Path(out_path) if out_path else Path.cwd() / f"{store.header.id}.ipynb"
    _check_target(out, force)
    branch = store.branch(leaf)
    kids = [(c, session_dir / "children" / str(c.get("id")) / "session.jsonl")
            for c in registry(branch)]
    kids = [(c, p) for c, p in kids if store.dir is not None and p.is_file()]
    links: dict[str, str] = {}
    for c, _ in kids:  # names are unique; made file-safe they may not be: the id tells apart
        stem = _file_name(str(c.get("name")))
        if f"{out.stem}.children/{stem}.ipynb" in links.values():
            stem += f"-{c.get('id')}"
        links[str(c.get("id"))] = f"{out.stem}.children/{stem}.ipynb"
    for link in links.values():  # nothing is written when a child's notebook would clobber
        if (out.parent / link).parent.is_dir():
            _check_target(out.parent / link, force)
    nb = build_notebook(branch, store.header, session_dir, links)
    _write_notebook(out, nbformat.writes(nb).encode() + b"\n", force)
    if kids:
        folder = out.parent / f"{out.stem}.children"
        folder.mkdir(exist_ok=True)
        for child, path in kids:
            export_session(path, out.parent / links[str(child.get("id"))], force=force)
    return out


def _file_name(name: str) -> str:
    return re.sub(r"[^\w.-]+", "_", name).strip("._")[:64] or "child"


def _check_target(out: Path, force: bool) -> None:
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise ExportError(f"cannot export to {out}: {e.strerror}") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise ExportError(f"{out} is a directory; give a file name, e.g. -o {out / 'session.ipynb'}")
        if not stat.S_ISREG(st.st_mode):
            raise ExportError(f"{out} exists and is not a regular file; choose another -o path")
        if not force:
            raise ExportError(f"{out} already exists; pass --force to overwrite it")
    parent = out.parent
    if not parent.is_dir():
        raise ExportError(f"the directory {parent} does not exist; create it first or choose another -o")


def _publish_new(tmp: Path, out: Path, data: bytes) -> None:
    """Make `out` hold `data` only if `out` does not exist (FileExistsError otherwise)."""
    try:
        os.link(tmp, out)  # atomic and never clobbers
    except (FileExistsError, FileNotFoundError):
        raise
    except OSError:  # no hard links on this file system (FAT, some FUSE): exclusive create
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, PRIVATE_FILE)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())


def _write_notebook(out: Path, data: bytes, force: bool) -> None:
    """Temp file beside the target, then rename (force) or hard link (never clobbers)."""
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if force:
            with contextlib.suppress(FileNotFoundError):
                if not stat.S_ISREG(os.lstat(out).st_mode):  # swapped in since the check
                    raise ExportError(f"{out} exists and is not a regular file; choose another -o path")
            os.replace(tmp, out)
        else:
            _publish_new(tmp, out, data)
        fsync_dir(out.parent)
    except FileExistsError:
        raise ExportError(f"{out} already exists; pass --force to overwrite it") from None
    except OSError as e:
        raise ExportError(f"cannot write {out}: {e.strerror or e}; choose another -o path") from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def _open_store(store_or_path: Any) -> Any:
    if hasattr(store_or_path, "branch") and hasattr(store_or_path, "header"):
        return store_or_path
    from rlm.config import load_config
    from rlm.session.store import SessionStore

    return SessionStore.open(store_or_path, load_config().home)


def build_notebook(branch: list[Entry], header: SessionHeader | None,
                   session_dir: Path, child_links: dict[str, str] | None = None
                   ) -> nbformat.NotebookNode:
    """Pure apart from reading artifacts: the notebook for one branch, validated, redacted.
    `child_links`: child id -> the relative path of its exported notebook."""
    builder = new_builder(session_dir, header)
    for entry in branch:
        builder.add(entry)
    return finish_notebook(builder, branch, header, child_links)


def new_builder(session_dir: Path, header: SessionHeader | None) -> _Builder:
    """A builder fed entries one at a time (`add`); `finish_notebook` reads it without
    changing it, so a live view (rlm.notebook.live) feeds it only the entries that are new."""
    return _Builder(session_dir, Path(header.cwd) if header is not None and header.cwd else None)


def finish_notebook(builder: _Builder, branch: list[Entry], header: SessionHeader | None,
                    child_links: dict[str, str] | None = None, *,
                    settled: dict[int, Any] | None = None) -> nbformat.NotebookNode:
    """The notebook of what `builder` was fed (`branch`: the same entries, for the children
    they spawned): the prelude, the task and the children's links added, redacted,
    validated. The builder's cells are copied, never changed.

    `settled` (a live view, which makes the notebook again at every cell): a cache kept
    between calls of the redacted copies of the builder's cells that can no longer change
    (all but those waiting for their result), so each call copies and redacts only what
    is new; the whole notebook's schema walk is skipped (each cell was checked as it was
    made)."""
    secrets = known_secrets()
    if settled is None:
        cells = copy.deepcopy(builder.cells)
    else:
        waiting = {id(c) for c in builder.pending.values()}
        cells = []
        for cell in builder.cells:
            done = settled.get(id(cell))
            if done is None:
                done = redact(copy.deepcopy(cell), secrets)
                if id(cell) not in waiting:
                    settled[id(cell)] = done
            cells.append(done)
    replies = copy.deepcopy(builder.replies)
    children = registry(branch)
    for child in children:  # rlm_spawn's answers by task, in the order spawned (a child
        if isinstance(child.get("task"), str):  # that failed answers None: none shift)
            sha = hashlib.sha256(child["task"].encode()).hexdigest()
            replies.setdefault("rlm_spawn", {}).setdefault(sha, []).append(
                child.get("result") if child.get("state") == "done" else None)
    made = []
    if children:
        made.append(new_markdown_cell(_children_cell(children, child_links or {}),
                                      id="children"))
        cells.append(made[-1])
    if not builder.saw_task and header is not None and header.task:
        made.append(new_markdown_cell(f"**Task:** {header.task}", id="task"))
        cells.insert(0, made[-1])
    if builder.uses:
        made.append(_prelude_cell(prelude(builder.uses, replies)))
        cells.insert(0, made[-1])
    if settled is None:
        nb = new_notebook(cells=cells, metadata=_metadata(header))
        redact(nb, secrets)
        nbformat.validate(nb)
        return nb
    redact(made, secrets)
    nb = new_notebook(metadata=redact(_metadata(header), secrets))
    nb.cells = cells
    return nb


def _metadata(header: SessionHeader | None) -> dict[str, Any]:
    return {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python", "version": platform.python_version(),
                          "mimetype": "text/x-python", "file_extension": ".py"},
        "rlm": {
            "session_id": header.id if header else None,
            "model": header.model if header else None,
            "rlm_version": rlm.__version__,
        },
    }


def _prelude_cell(source: str) -> nbformat.NotebookNode:
    cell = new_code_cell(source, id="rlm-prelude")
    cell.metadata["tags"] = ["rlm-prelude"]
    return cell


_REPLY = '''
import hashlib as _rlm_hashlib

_RLM_REPLIES = {replies}


def _rlm_reply(method, asked):
    """The reply the session recorded for this call (no model is called)."""
    key = _rlm_hashlib.sha256(str(asked).encode()).hexdigest()
    replies = _RLM_REPLIES.get(method, {{}}).get(key)
    if not replies:
        raise LookupError(f"{{method}}: the session recorded no reply to {{str(asked)[:80]!r}} "
                          "(a different prompt than the one asked in the session)")
    return replies.pop(0) if len(replies) > 1 else replies[0]
'''
_STAND_INS = {
    "llm_query": '''
def llm_query(prompt, model=None):
    """Recorded: the reply the session got for this prompt."""
    return _rlm_reply("llm_query", prompt)
''',
    "llm_query_batched": '''
def llm_query_batched(prompts, model=None):
    """Recorded: the replies the session got for these prompts, in order."""
    return [_rlm_reply("llm_query", p) for p in prompts]
''',
    "rlm_query": '''
def rlm_query(task, context=None):
    """Recorded: the answer the session's child agent gave for this task."""
    return _rlm_reply("rlm_query", task)
''',
    "rlm_spawn": '''
class _RlmChild:
    """Recorded: a child's handle answers with what the session's child answered."""

    def __init__(self, task, name):
        self.name, self._answer = name, _rlm_reply("rlm_spawn", task)

    def result(self, timeout=None):
        return self._answer

    def status(self):
        return {"name": self.name, "state": "done"}

    def __getattr__(self, attr):
        if attr.startswith("_"):
            raise AttributeError(attr)
        return lambda *a, **k: print(f"[rlm] child.{attr}() is a no-op outside rlm")


def rlm_spawn(task, name=None, context=None, schema=None, model=None, isolation=None):
    return _RlmChild(task, name)
''',
    "rlm_gather": '''
def rlm_gather(handles, timeout=None, return_exceptions=True):
    return [h.result() for h in handles]
''',
    "rlm_wait": '''
def rlm_wait(handles, any=True, timeout=None):
    return list(handles), []
''',
    "rlm_max_children": '''
def rlm_max_children(n=None):
    return {"limit": n or 0, "in_use": 0, "waiting": 0, "peak": 0}
''',
    "yield_section": '''
def yield_section(label, item):
    print(f"[rlm] yield_section() is a no-op outside rlm")
''',
    "final": '''
def final(value):
    print(f"[rlm] final() is a no-op outside rlm; the session's answer was: {value}")
''',
    "final_var": '''
def final_var(name):
    print(f"[rlm] final_var() is a no-op outside rlm; the session's answer was {name}: "
          f"{globals()[name]}")
''',
}
_NO_OP = '''
class _RlmNoOp:
    """compact, goal, cron, heartbeat, memory: the agent's controls mean nothing outside rlm."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        if attr.startswith("_"):
            raise AttributeError(attr)

        def no_op(*args, **kwargs):
            print(f"[rlm] {self._name}.{attr}() is a no-op outside rlm")
        return no_op

    def __repr__(self):
        return f"<{self._name}: a no-op outside rlm>"
'''
_CONTROLS = ("compact", "goal", "cron", "heartbeat", "memory")


def prelude(uses: set[str], replies: dict[str, dict[str, list[Any]]]) -> str:
    """The first cell: the names the kernel defined that the cells use. The sub-call
    helpers answer from the session's recorded replies, the agent's controls are no-ops
    that say so, the aliases are imported. Each is defined only where the name is not
    (run inside an rlm kernel, its own helpers stay)."""
    parts = ["# rlm: what the agent's kernel defined, so \"Run All\" re-runs this notebook "
             "outside rlm,\n# offline: llm_query and rlm_query answer from the replies the "
             "session recorded\n"]
    parts += [f"import {ALIASES[a]} as {a}\n" for a in ALIASES if a in uses]
    if uses & _SUB_CALLS:
        parts.append(_REPLY.format(replies=pprint.pformat(replies, width=96)))
    if uses & set(_CONTROLS):
        parts.append(_NO_OP)
    for name in _API:
        if name not in uses:
            continue
        body = _STAND_INS.get(name) or f"\n{name} = _RlmNoOp({name!r})\n"
        parts.append(f"\nif {name!r} not in globals():" + "".join(
            f"\n    {line}" if line else "\n" for line in body.strip("\n").splitlines()) + "\n")
    return "".join(parts).rstrip("\n") + "\n"


class _Builder:
    """Turns entries into cells; code cells wait for their tool result by tool_call_id."""

    def __init__(self, session_dir: Path, cwd: Path | None = None):
        self.session_dir = session_dir
        self.cwd = cwd or session_dir
        self.cells: list[nbformat.NotebookNode] = []
        self.pending: dict[str, nbformat.NotebookNode] = {}
        self.saw_task = False
        self.uses: set[str] = set()  # kernel-defined names the code cells use
        self.replies: dict[str, dict[str, list[Any]]] = {}  # method -> sha256 -> replies
        self.ids: set[str] = set()

    def _append(self, cell: nbformat.NotebookNode) -> nbformat.NotebookNode:
        base, n = cell.id, 1
        while cell.id in self.ids:
            cell.id = f"{base[:58]}-{n}"
            n += 1
        self.ids.add(cell.id)
        self.cells.append(cell)
        return cell

    def _md(self, text: str, entry: Entry, n: int = 0) -> None:
        if text.strip():
            self._append(new_markdown_cell(text.strip(), id=_cell_id(entry, "m", n)))

    def add(self, entry: Entry) -> None:
        if isinstance(entry, MessageEntry):
            self._message(entry)
        elif isinstance(entry, CompactionEntry):
            head = f"### Compaction summary ({entry.trigger}, {entry.tokens_before:,} tokens before)"
            self._md(f"{head}\n\n{entry.summary}", entry)
        elif isinstance(entry, BranchSummaryEntry):
            self._md(f"### Branch summary\n\n{entry.summary}", entry)
        elif isinstance(entry, ModelChangeEntry):
            self._md(f"*Model changed to `{entry.model}`.*", entry)
        elif isinstance(entry, CustomEntry):
            self._custom(entry)

    def _message(self, entry: MessageEntry) -> None:
        msg, role = entry.message, entry.role
        if entry.error:
            return
        if role == "user" and _loop_message(entry):
            note = "nudged the model" if entry.origin != "continuation" else "continued the run"
            self._md(f"*rlm {note}:* {_text(msg.get('content'))}", entry)
        elif role == "user":
            label = "User" if self.saw_task else "Task"
            self.saw_task = True
            self._md(f"**{label}:** {_text(msg.get('content'))}", entry)
        elif role == "assistant":
            self._assistant(entry)
        elif role == "tool":
            self._tool(entry)

    def _assistant(self, entry: MessageEntry) -> None:
        calls: list[tuple[str, str]] = []
        for i, c in enumerate(entry.message.get("tool_calls") or []):
            code = call_code(c)
            if code is not None:
                calls.append((str(c.get("id") or f"call{i}"), code))
        prose = _text(entry.message.get("content"))
        pos, n = 0, 0
        for m in _FENCE.finditer(prose):
            if n < len(calls) and m.group(1).strip() == calls[n][1].strip():
                self._md(prose[pos:m.start()], entry, n)
                self._code(entry, *calls[n], n)
                pos, n = m.end(), n + 1
        self._md(prose[pos:], entry, n)
        for i in range(n, len(calls)):
            self._code(entry, *calls[i], i)

    def _code(self, entry: Entry, call_id: str, code: str, n: int) -> None:
        cell = new_code_cell(code, id=_cell_id(entry, "c", n))
        self.uses.update(_USES.findall(code))
        self.pending[call_id] = self._append(cell)

    def _tool(self, entry: MessageEntry) -> None:
        cell = self.pending.pop(str(entry.message.get("tool_call_id")), None)
        if cell is None:
            cell = self._append(new_code_cell("# (code not recorded)", id=_cell_id(entry, "c", 0)))
        self._fill(cell, entry.cell or {}, entry)

    def _fill(self, cell: nbformat.NotebookNode, result: dict[str, Any], entry: Entry) -> None:
        count = result.get("execution_count")
        cell.execution_count = count if isinstance(count, int) else None
        cell.outputs = [o for o in (self._output(d, count) for d in result.get("outputs") or [])
                        if o is not None]
        status = result.get("status", "ok")
        cell.metadata["rlm"] = {"entry_id": entry.id, "status": status,
                                "duration_s": result.get("duration_s")}
        if status != "ok":
            cell.metadata["tags"] = ["raises-exception"]
        if status in ("died", "timeout") or result.get("restart"):
            cause = result.get("died_cause") or status
            self._restart_note(cause, result.get("restart"), entry)

    def _restart_note(self, cause: str, report: dict[str, Any] | None, entry: Entry) -> None:
        if report is None:
            self._md(f"⚠ Kernel died: {cause}; not restarted.", entry, 99)
            return
        restored = ", ".join(report.get("restored") or []) or "nothing"
        lost = [d.get("name", "?") for d in (report.get("failed") or []) + (report.get("skipped") or [])]
        self._md(f"⚠ Kernel restarted: {cause}; restored: {restored}; "
                 f"lost: {', '.join(lost) or 'nothing'}", entry, 99)

    def _custom(self, entry: CustomEntry) -> None:
        data = entry.data if isinstance(entry.data, dict) else {}
        if entry.custom_type == "kernel_restored":
            report = data.get("report", data)
            self._restart_note(str(data.get("cause") or "restart"), report, entry)
        elif entry.custom_type == "final":
            answer = data.get("answer", entry.data if not data else "")
            outcome = RunOutcome.from_dict(data.get("outcome"))
            said = f"\n\n*{_text(outcome.headline)}*" if outcome is not None else ""
            self._md(f"**Final answer:** {_text(answer)}{said}{_spent(data)}", entry)
        elif entry.custom_type == "run_end" and (
                ended := RunOutcome.from_dict(data.get("outcome"))) is not None:
            self._md(f"*Run ended: {_text(ended.headline)}*{_spent(data)}", entry)
        elif entry.custom_type == "context_vars" and data.get("files"):
            self._inputs(entry, loaded_inputs(data))
        elif entry.custom_type == SUBCALL_ENTRY:
            method = "rlm_query" if data.get("method") == "rlm_query" else "llm_query"
            for c in data.get("calls") or []:
                if isinstance(c, dict) and isinstance(c.get("sha256"), str):
                    self.replies.setdefault(method, {}).setdefault(c["sha256"], []).append(
                        c.get("reply"))
        elif entry.custom_type == RELIEF_CUSTOM:  # the outputs above stay whole here
            lines = "".join(f"\n- cell {r.get('cell')}: {r.get('reason')} "
                            f"({r.get('tokens_saved')} tokens)" for r in data.get("replaced", []))
            self._md(f"### Context {data.get('tier', 'relief')} ({data.get('trigger', '?')}, "
                     f"{data.get('tokens_before', '?')} -> {data.get('tokens_after', '?')} "
                     f"tokens)\n\nReplaced in the model's context:{lines}", entry)
        elif entry.custom_type == "rule_injection":  # a stream rule (rlm.agent.policy.stream)
            what = (f"stopped a reply (it matched `{_text(data.get('found'))}` in "
                    f"{data.get('where', '?')}) and the turn was retried" if data.get("interrupted")
                    else "was noted in the context")
            self._md(f"*Rule `{data.get('rule', '?')}` {what}; the model read:*\n\n"
                     + _quoted(entry.content or ""), entry)
        elif entry.custom_type == "advisory":  # the advisor's advice (rlm.app.advising)
            self._md("*The advisor:*\n\n" + _quoted(entry.content or ""), entry)
        elif entry.custom_type == "memory_write":
            self._md(f"*Project memory: {memory_line(data)}*", entry)
        elif entry.custom_type == "notebook_import":
            self._md(f"*Imported from notebook `{data.get('path', '?')}`:*", entry)
            for i, item in enumerate(data.get("cells") or []):
                cell = self._append(new_code_cell(item.get("code", ""), id=_cell_id(entry, "c", i)))
                self._fill(cell, item.get("cell") or {}, entry)

    def _inputs(self, entry: Entry, pairs: list[tuple[str, str]]) -> None:
        """Cells that load the run's `--context` files, so the notebook re-runs."""
        listed = ", ".join(f"`{name}`" for name, _ in pairs)
        self._md(f"*Inputs: the files given with `--context`, loaded as {listed}.*", entry, 0)
        for i, (name, raw) in enumerate(pairs):
            path = Path(raw).expanduser()
            path = path if path.is_absolute() else self.cwd / path
            cell = new_code_cell(loader_code(path, name), id=_cell_id(entry, "c", i))
            if not path.is_file():
                self._md(f"⚠ Input file `{path}` does not exist now: the next cell fails and "
                         f"so does every cell that uses `{name}`. Put the file back or change "
                         "the path in the next cell.", entry, i + 1)
                cell.metadata["tags"] = ["raises-exception"]
            cell.metadata["rlm"] = {"entry_id": entry.id, "input": str(path)}
            self._append(cell)

    def _output(self, d: dict[str, Any], count: Any) -> nbformat.NotebookNode | None:
        kind = d.get("kind")
        if kind == "stream":
            # an elided stream keeps its head, tail and the marker naming the full file:
            # embedding a 100 MB print would make the notebook unusable
            return new_output("stream", name=d.get("name") or "stdout", text=d.get("text") or "")
        if kind == "error":
            return new_output("error", ename=d.get("ename") or "Error",
                              evalue=d.get("evalue") or "", traceback=d.get("traceback") or [])
        if kind not in ("execute_result", "display_data"):
            return None
        data = self._bundle(d)
        extra = {"execution_count": count if isinstance(count, int) else None} \
            if kind == "execute_result" else {}
        return new_output(kind, data=data, metadata=d.get("metadata") or {}, **extra)

    def _bundle(self, d: dict[str, Any]) -> dict[str, Any]:
        data: dict[str, Any] = {}
        refs = d.get("refs") or {}
        for mime, value in (d.get("data") or {}).items():
            if mime not in refs and not _is_ref(value):
                data[mime] = value
        for mime, path in refs.items():
            value = _read_artifact(self.session_dir, path, mime)
            if value is not None:
                data[mime] = value
        if not data:
            missing = ", ".join(refs.values()) or "no data"
            data["text/plain"] = f"[output not available: {missing}]"
        return data


def loaded_inputs(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(variable, file) for each input file that loaded. `files` also lists those that
    failed (a named file that is not a table), so it is not zipped with `names`: since
    `loaded` exists it pairs them; an older entry's names are matched to the file whose
    stem gives that name (`load_context_files` names a variable after its file's stem)."""
    names = [str(n) for n in data.get("names") or []]
    loaded = data.get("loaded")
    if isinstance(loaded, list) and len(loaded) == len(names):
        return list(zip(names, [str(f) for f in loaded], strict=True))
    files = [str(f) for f in data.get("files") or []]
    if len(files) == len(names):
        return list(zip(names, files, strict=True))
    pairs, left = [], list(files)
    for name in names:
        match = next((f for f in left if _named_after(name, f)), None)
        if match is not None:
            left.remove(match)
            pairs.append((name, match))
    return pairs


def _named_after(name: str, path: str) -> bool:
    base = variable_name(Path(path), set())
    return name == base or (name.startswith(base + "_") and name[len(base) + 1:].isdigit())


def _loop_message(entry: MessageEntry) -> bool:
    """A user message the agent loop wrote itself (marked since issue 14; an older log's
    nudges are recognised by their text)."""
    if entry.origin is not None:
        return True
    return _text(entry.message.get("content")) in _NUDGE_TEXTS


def _is_ref(value: Any) -> bool:
    return isinstance(value, dict) and "artifact" in value


def _read_artifact(session_dir: Path, rel: str, mime: str) -> Any:
    """An artifact as nbformat wants it: text, parsed JSON, or base64 for binary mimes."""
    try:  # a file of the host's, opened without following a link (rlm.safeio)
        raw = safeio.read_bytes(session_dir, rel)
    except (OSError, ValueError):
        return None
    if mime == "application/json" or mime.endswith("+json"):
        return json.loads(raw)
    if mime.startswith(_TEXT_MIMES):
        return raw.decode("utf-8", errors="replace")
    try:  # already base64 text (as the kernel sent it)?
        text = raw.decode("ascii").strip()
        base64.b64decode(text, validate=True)
        return text
    except ValueError:
        return base64.b64encode(raw).decode("ascii")


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, list):  # OpenAI content parts
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)


def _children_cell(children: list[dict[str, Any]], links: dict[str, str]) -> str:
    """The run's children, each with its state and spend, linked to its notebook."""
    lines = ["### Children of this run (rlm_spawn, rlm_query)", ""]
    for c in children:
        name = _text(c.get("name")).replace("]", "")
        link = links.get(str(c.get("id")))
        shown = f"[{name}]({link})" if link else f"`{name}`"
        lines.append(f"- {shown}: {c.get('state')}, {int(c.get('tokens') or 0):,} tokens, "
                     f"{int(c.get('turns') or 0)} turn(s), {float(c.get('seconds') or 0):.1f} s "
                     f"— {_text(c.get('task'))[:120]}")
    return "\n".join(lines)


def _quoted(text: str) -> str:
    """`text` as a Markdown block quote."""
    return "\n".join("> " + line for line in text.strip().splitlines())


def _cell_id(entry: Entry, kind: str, n: int) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "-", f"{entry.id}-{kind}{n}")[:64]


# ---------------------------------------------------------------- secrets


def redact(node: Any, secrets: list[str] | None = None) -> Any:
    """Redact every string in a notebook in place (binary mime payloads are left alone)."""
    secrets = known_secrets() if secrets is None else secrets
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, str):
                if not _binary_mime(key):
                    node[key] = redact_text(value, secrets)
            else:
                redact(value, secrets)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            if isinstance(value, str):
                node[i] = redact_text(value, secrets)
            else:
                redact(value, secrets)
    return node


def _binary_mime(key: str) -> bool:
    return "/" in key and key.startswith(("image/", "audio/", "video/")) and key != "image/svg+xml"


def _spent(data: dict[str, Any]) -> str:
    """What the run spent, by role, as its end entry recorded it (rlm.ledger)."""
    line = spent_line(data).strip()
    return f"\n\n*{_text(line)}*" if line else ""
