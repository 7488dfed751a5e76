"""Run candidate cells against isolated copies of the kernel's namespace (forked trials).

`trials_json(codes, timeout, cap)` forks the kernel once per code string. The child runs
the code, transformed and split like a cell (IPython's `transform_cell`; the last
expression evaluated apart, as IPython shows a cell's Out), against the user namespace it
inherited copy-on-write, sends a JSON result down a pipe and leaves with `os._exit`. The
parent (the kernel, inside a silent user_expression, so no cell runs meanwhile) collects
the results, at most `PARALLEL` children at a time, and SIGKILLs a child past `timeout`.

Isolation: the child's memory is its own, so nothing a candidate binds, mutates, deletes
or changes in the process (the cwd, environment, modules) reaches the real kernel. Side
effects OUTSIDE the process are NOT undone: a candidate that writes, moves or deletes a
file, or talks to a server, did so for real, in the same sandbox as every cell.

In the child, before the code runs: stdout/stderr and `display()` go to a capped buffer
(ipykernel's zmq sockets and threads exist only in the parent: touching them would hang
or corrupt the parent's channels), IPython's event callbacks are dropped and snapshots
disabled (a trial never writes one), `input()` refuses, and every bridge request but
`final` fails with "not available in a trial" (the single chokepoint: the bridge's local
handler); `final` is recorded as the trial's `final`. Children are their own process
group, killed as a group when they end, so a background process a candidate started
does not outlive its trial.

Risk: fork in a multi-threaded process copies only the calling thread; a lock another
thread held at fork time (a library's, not ours: the child never touches ipykernel's
streams) stays held in the child. Such a child hangs and ends as a "timeout".
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import gc
import inspect
import io
import json
import os
import selectors
import signal
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

from IPython.core.displayhook import DisplayHook
from IPython.core.displaypub import DisplayPublisher

from kernel_ext import bridge, snapshot

PARALLEL = 2  # children at once: the machines rlm runs on have few cores
ERROR_CAP = 2000  # characters of an exception's message
_REFUSED = "not available in a trial (a candidate cell runs isolated; only final() is recorded)"


def trials_json(codes: list[str], timeout: float, cap: int) -> str:
    """One result per code, in order: {status, output, final, error, seconds} (JSON)."""
    if not hasattr(os, "fork"):
        return json.dumps([_result("refused", error="trials need os.fork, which this "
                                   "platform lacks; run the candidates as cells instead")
                           for _ in codes])
    results: list[dict[str, Any] | None] = [None] * len(codes)
    waiting = list(enumerate(codes))
    running: dict[int, _Child] = {}
    sel = selectors.DefaultSelector()
    try:
        while waiting or running:
            while waiting and len(running) < PARALLEL:
                index, code = waiting.pop(0)
                child = _fork(index, code, timeout, cap)
                running[child.fd] = child
                sel.register(child.fd, selectors.EVENT_READ, child)
            for child in _step(sel, running, cap):
                sel.unregister(child.fd)
                del running[child.fd]
                results[child.index] = _finish(child)
    finally:  # an interrupt (KeyboardInterrupt) leaves no child behind
        for child in running.values():
            _kill(child)
            _reap(child)
            os.close(child.fd)
        sel.close()
    return json.dumps(results)


@dataclass
class _Child:
    index: int
    pid: int
    fd: int
    deadline: float
    started: float
    data: bytearray = field(default_factory=bytearray)
    eof: bool = False
    timed_out: bool = False
    status: int | None = None  # waitpid's


def _result(status: str, output: str = "", final: str | None = None,
            error: str | None = None, seconds: float = 0.0) -> dict[str, Any]:
    return {"status": status, "output": output, "final": final, "error": error,
            "seconds": round(seconds, 4)}


def _fork(index: int, code: str, timeout: float, cap: int) -> _Child:
    """Start one child on `code`; the parent keeps the pipe's read end."""
    r, w = os.pipe()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()  # or the child's copy of a pending print is lost (harmless) ...
        except Exception:  # noqa: BLE001 - ... and a closed stream is no reason to fail
            pass
    with warnings.catch_warnings():  # "This process is multi-threaded, use of fork()..."
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: never returns
        try:
            os.close(r)
            _child_main(w, code, cap)
        finally:
            os._exit(70)
    os.close(w)
    os.set_blocking(r, False)
    now = time.monotonic()
    return _Child(index, pid, r, now + timeout, now)


def _step(sel: selectors.BaseSelector, running: dict[int, _Child], cap: int) -> list[_Child]:
    """Read what is ready, kill the late; the children that are done."""
    limit = 4 * cap + 8 * ERROR_CAP + 4096  # a result is bounded in the child; a guard
    wait = max(0.0, min(c.deadline for c in running.values()) - time.monotonic())
    for key, _ in sel.select(timeout=min(wait, 1.0)):
        child: _Child = key.data
        try:
            chunk = os.read(child.fd, 1 << 16)
        except BlockingIOError:
            continue
        if not chunk:
            child.eof = True
        elif len(child.data) < limit:
            child.data += chunk
    done = []
    now = time.monotonic()
    for child in running.values():
        if child.eof or child.data.endswith(b"\n"):
            done.append(child)  # the result ends with a newline: no need to wait for EOF,
            # which a grandchild holding the pipe open would delay
        elif now >= child.deadline:
            child.timed_out = True
            done.append(child)
    return done


def _finish(child: _Child) -> dict[str, Any]:
    """The child's result, or what its end says (timeout, died); the child reaped."""
    seconds = time.monotonic() - child.started
    complete = child.data.endswith(b"\n")
    if child.timed_out or complete:
        _kill(child)  # a finished child is about to _exit anyway; its group goes too
    _reap(child)
    _kill_group(child)  # what the child left in its group (its pid is reaped: never kill it)
    os.close(child.fd)
    if complete:
        try:
            res = json.loads(child.data)
            res["seconds"] = round(seconds, 4)
            return dict(res)
        except ValueError:
            pass
    if child.timed_out:
        return _result("timeout", error=f"killed after {seconds:.1f} s", seconds=seconds)
    return _result("died", error=_exit_text(child.status), seconds=seconds)


def _kill(child: _Child) -> None:
    """SIGKILL the (unreaped) child and its process group."""
    _kill_group(child)
    try:
        os.kill(child.pid, signal.SIGKILL)  # if its setpgid failed, it is not a group
    except ProcessLookupError:
        pass


def _kill_group(child: _Child) -> None:
    """SIGKILL the child's process group. Safe after the child is reaped: a pid that is
    still some process's group id is never reused."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _reap(child: _Child) -> None:
    if child.status is not None:
        return
    try:
        _, child.status = os.waitpid(child.pid, 0)
    except ChildProcessError:  # reaped elsewhere (a SIGCHLD handler): exit unknown
        child.status = -1


def _exit_text(status: int | None) -> str:
    if status is None or status < 0:
        return "the trial ended without a result"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        return f"the trial ended without a result: killed by signal {name}"
    return f"the trial ended without a result (exit code {os.WEXITSTATUS(status)})"


# -- the child ----------------------------------------------------------------------------
class _Capped:
    """A text sink that keeps the first `cap` characters and counts the rest."""

    def __init__(self, cap: int) -> None:
        self.cap, self.kept, self.total = max(0, cap), 0, 0
        self.parts: list[str] = []

    def write(self, text: Any) -> int:
        text = text if isinstance(text, str) else str(text)
        self.total += len(text)
        room = self.cap - self.kept
        if room > 0:
            self.parts.append(text[:room])
            self.kept += min(room, len(text))
        return len(text)

    def text(self) -> str:
        out = "".join(self.parts)
        if self.total > self.kept:
            out += f"\n[trial output cut at {self.kept} of {self.total} characters]"
        return out


class _Stream(io.TextIOBase):
    """sys.stdout / sys.stderr in the child: both write to one shared sink, in order."""

    def __init__(self, sink: _Capped, name: str) -> None:
        super().__init__()
        self.sink, self.name = sink, name

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def writable(self) -> bool:
        return True

    def write(self, text: Any) -> int:
        return self.sink.write(text)


class _Publisher(DisplayPublisher):
    """The child's display publisher: text/plain of what `display()` shows."""

    def __init__(self, sink: _Capped) -> None:
        super().__init__()
        self.sink = sink

    def publish(self, data: Any, metadata: Any = None, source: Any = None, *,
                transient: Any = None, update: Any = False, **kwargs: Any) -> None:
        text = data.get("text/plain")
        if text is not None:
            self.sink.write(str(text) + "\n")

    def clear_output(self, wait: bool = False) -> None:
        pass


class _Recorder:
    """The bridge's local handler in a trial: `final` recorded, everything else refused."""

    def __init__(self) -> None:
        self.final: str | None = None

    def __call__(self, method: str, params: dict[str, Any]) -> Any:
        if method == "final":
            value = params.get("value")
            self.final = value if isinstance(value, str) else json.dumps(value, default=str)
            return {"ok": True}
        raise RuntimeError(_REFUSED)


def _child_main(fd: int, code: str, cap: int) -> None:
    """Run `code` in this forked child, write one JSON line to `fd`, and `os._exit`."""
    try:
        result = _run_isolated(code, cap)
        payload = (json.dumps(result) + "\n").encode()
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view):]
    except BaseException:  # noqa: BLE001 - nothing may escape into the kernel's loop
        os._exit(70)
    os._exit(0)


def _run_isolated(code: str, cap: int) -> dict[str, Any]:
    sink = _Capped(cap)  # first of all: ipykernel's streams would write to a dead thread
    sys.stdout, sys.stderr = _Stream(sink, "stdout"), _Stream(sink, "stderr")
    ip = _isolate()
    ip.display_pub = _Publisher(sink)
    # IPython's plain displayhook prints to sys.stdout (ipykernel's sends on IOPub): for
    # a candidate that runs a cell itself; no "Out[n]:" prompt with cache_size=0
    ip.displayhook = DisplayHook(shell=ip, cache_size=0)
    ip.display_trap.hook = sys.displayhook = ip.displayhook
    recorder = _Recorder()
    bridge.set_local_handler(recorder)
    status, error = "ok", None
    try:
        value = _run_cell_code(ip, code)
        if value is not None:
            sink.write(_out_text(ip, value) + "\n")
    except BaseException as e:  # noqa: BLE001 - SystemExit and KeyboardInterrupt too
        status, error = "error", f"{type(e).__name__}: {e}"[:ERROR_CAP]
    return _result(status, sink.text(), recorder.final, error)


def _isolate() -> Any:
    """Cut this child off the kernel's machinery; returns the shell."""
    try:
        os.setpgid(0, 0)  # its own group: killed with whatever it starts
    except OSError:
        pass
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
    gc.freeze()  # the inherited heap is never scanned: its pages stay shared
    snapshot.disable_here()
    from IPython import get_ipython

    ip = get_ipython()
    for callbacks in ip.events.callbacks.values():
        callbacks.clear()  # post_run_cell (snapshots, provenance) and the rest

    def no_input(*_: Any, **__: Any) -> str:
        raise RuntimeError(f"input() is {_REFUSED}")

    builtins.input = no_input
    import getpass

    getpass.getpass = no_input
    return ip


def _run_cell_code(ip: Any, code: str) -> Any:
    """Run `code` as IPython runs a cell; the value of a last expression (else None)."""
    source = ip.transform_cell(code)
    tree = ip.transform_ast(ast.parse(source, filename="<trial>"))
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    flags = getattr(ip.compile, "flags", 0) | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    ns = ip.user_ns
    _await(eval(compile(tree, "<trial>", "exec", flags=flags, dont_inherit=True), ns))
    if last is None:
        return None
    return _await(eval(compile(last, "<trial>", "eval", flags=flags, dont_inherit=True), ns))


def _await(value: Any) -> Any:
    """A top-level `await` compiles to a coroutine: run it (the child has no running loop)."""
    return asyncio.run(value) if inspect.iscoroutine(value) else value


def _out_text(ip: Any, value: Any) -> str:
    """The text/plain IPython would show as the cell's Out."""
    try:
        data, _ = ip.display_formatter.format(value, include=("text/plain",))
        return str(data.get("text/plain", repr(value)))
    except Exception:  # noqa: BLE001 - a broken formatter: plain repr
        return repr(value)
