"""Run the agent's cells inside the user's own kernel, while the `%%rlm` cell is running.

The kernel's shell channel is busy with the magic's cell, so the agent's code cannot be
sent to it as an execute_request. Instead it runs through the live IPython shell with a
re-entrant `shell.run_cell(code, store_history=False)`: the code sees (and changes) the
user's namespace, and its outputs are published on IOPub with the magic cell as parent, so
they show up live in the magic cell's output area. While a cell runs we tee what is
published, to give the model the same outputs:

- stdout / stderr: `sys.stdout` / `sys.stderr` are swapped for tees that write through;
- the cell's result: `shell.displayhook.write_format_data` is wrapped (the mime bundle the
  user sees in the execute_result);
- `display()` and inline matplotlib figures: `shell.display_pub.publish` is wrapped;
- errors: `shell._showtraceback` is wrapped (the traceback is still published).

Limits (documented, not bugs):
- output written at the C level (os.write(1, ...), subprocesses inheriting the fd) reaches
  the notebook through ipykernel's fd capture but is not captured for the model;
- the timeout raises KeyboardInterrupt in the main thread (`_thread.interrupt_main`); a C
  loop that never returns to the interpreter cannot be stopped, and `restart()` is
  impossible: this is the user's own kernel;
- top-level `await` in the agent's code is not supported (the outer cell is synchronous).
"""

from __future__ import annotations

import _thread
import base64
import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernel_ext import fileops, provenance
from rlm.config import Config
from rlm.errors import KernelError
from rlm.kernel.types import CellResult, Output, RestoreReport

OnOutput = Callable[[Output], None]


class _Tee:
    """A text stream that writes through to `target` and records every write."""

    def __init__(self, target: Any, name: str, record: Callable[[str, str], None]):
        self._target, self._name, self._record = target, name, record
        # kernel_ext.streams.repair leaves a stream that writes through to the kernel's
        # own alone (no "[rlm: sys.stdout was rebound ...]" line after each agent cell)
        self.writes_through_to = target

    def write(self, text: str) -> int:
        if text:
            self._record(self._name, text)
            provenance.note_output(text)  # which line said it (the verified rule)
        return self._target.write(text)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._target, attr)


class _Capture:
    """Feeds what the shell publishes, in order, to the Kernel's own `CellCollector`.

    The collector shapes the model's text and writes images and large payloads to
    `artifacts/` exactly as for a separate kernel, so both executors give the same record.
    """

    def __init__(self, session_dir: Path, budget: int, on_output: OnOutput | None):
        from rlm.kernel.execution import CellCollector

        tag = f"inproc-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
        self.collector = CellCollector(session_dir, budget, tag, on_output)
        self.provenance: dict[str, Any] | None = None  # kernel_ext.provenance's record
        self.binds: list[str] | None = None  # the names the cell bound (the same record's)
        self.error = False
        self.lock = threading.Lock()

    def _feed(self, msg_type: str, content: dict[str, Any]) -> None:
        with self.lock:
            self.collector.handle({"header": {"msg_type": msg_type}, "content": content})

    def stream(self, name: str, text: str) -> None:
        self._feed("stream", {"name": name, "text": text})

    def bundle(self, kind: str, data: dict[str, Any], metadata: dict[str, Any] | None) -> None:
        self._feed(kind, {"data": _jsonable_bundle(data), "metadata": dict(metadata or {})})

    def traceback(self, etype: Any, evalue: Any, stb: list[str]) -> None:
        self.error = True
        self._feed("error", {"ename": getattr(etype, "__name__", str(etype)),
                             "evalue": str(evalue), "traceback": list(stb)})


def _jsonable_bundle(data: dict[str, Any]) -> dict[str, Any]:
    """Bytes payloads (PNG from some formatters) as base64 text, as the wire carries them."""
    return {mime: base64.b64encode(v).decode("ascii") if isinstance(v, bytes) else v
            for mime, v in data.items()}


class InProcessExecutor:
    """The Kernel interface the agent loop uses, over the shell the caller is running in."""

    run_in_caller_thread = True  # the loop must call execute() from the shell's thread

    def __init__(self, shell: Any, session_dir: str | Path, config: Config):
        self.shell = shell
        self.session_dir = Path(session_dir)
        self.config = config
        self.on_user_interrupt: Callable[[], None] | None = None
        self._count = 0
        self._lock = threading.Lock()
        self._running = False
        self._timed_out = False
        self._in_callback = False

    # ------------------------------------------------------------------ interface
    @property
    def pid(self) -> int:
        return os.getpid()

    def is_alive(self) -> bool:
        return True

    def start(self) -> None:
        return None

    def stop(self) -> None:
        """Leaves the user's kernel alone; only drops the bridge handler."""
        self.set_bridge_handler(None)

    def restart(self, cause: str = "restart requested") -> RestoreReport:
        """Refused: this is the user's own kernel (rlm.app.GAPS["notebook"]["snapshot"])."""
        raise KernelError(
            "cannot restart the notebook's own kernel from %%rlm"
            + (f" ({cause})" if cause else "")
            + "; restart it from JupyterLab (Kernel > Restart) and run the cell again"
        )

    def interrupt(self) -> None:
        """Called by the loop on Ctrl-C while no agent cell runs: ask the magic to stop."""
        self._notify_interrupt()

    def set_bridge_handler(self, fn: Callable[[str, dict[str, Any]], Any] | None) -> None:
        from kernel_ext import bridge

        bridge.set_local_handler(fn)

    def describe(self, names: list[str] | None = None, timeout: float = 30.0) -> list[dict[str, str]]:
        from kernel_ext import describe

        return list(json.loads(describe.describe_json(names, ip=self.shell)))

    def where_value(self, key: str, timeout: float = 5.0) -> list[dict[str, str]]:
        from kernel_ext import columns

        return list(json.loads(columns.where_value_json(key, ip=self.shell)))

    def how_written(self, filters: list[tuple[str, str, str]], timeout: float = 5.0
                    ) -> list[dict[str, Any]]:
        from kernel_ext import columns

        return list(json.loads(columns.how_written_json([list(f) for f in filters],
                                                        ip=self.shell)))

    def where_text(self, terms: list[str], timeout: float = 5.0) -> list[dict[str, Any]]:
        from kernel_ext import texts

        return list(json.loads(texts.where_text_json(list(terms), ip=self.shell)))

    def list_namespace(self, timeout: float = 5.0) -> dict[str, Any]:
        from kernel_ext import snapshot

        return json.loads(snapshot.namespace_json(self.shell))

    def file_ops(self) -> dict[str, list[str]]:
        from kernel_ext import fileops

        return json.loads(fileops.file_ops_json())

    # ------------------------------------------------------------------ execute
    def execute(self, code: str, timeout: float | None = None,
                on_output: OnOutput | None = None) -> CellResult:
        """Run `code` in the user's namespace; outputs go to the notebook and the result."""
        if threading.current_thread() is not threading.main_thread():
            raise KernelError("InProcessExecutor.execute must run on the kernel's main thread")
        timeout = self.config.cell_timeout if timeout is None else timeout
        cap = _Capture(self.session_dir, self.config.output_budget(), on_output)
        self._count += 1
        started = time.monotonic()
        timer = self._arm_timer(timeout)
        try:
            result = self._run_captured(code, cap)
        except KeyboardInterrupt:  # the timer fired just after the cell returned
            if not self._timed_out:
                raise
            result = None
        finally:
            with self._lock:
                self._running = False
            if timer is not None:
                timer.cancel()
        status = self._status(result, cap)
        if status == "interrupted":
            self._notify_interrupt()
        res = CellResult(status=status, execution_count=self._count)
        res.shaped, res.full_output_path, res.chars_total, res.elided_chars = cap.collector.finish()
        res.outputs = cap.collector.outputs
        res.duration_s = round(time.monotonic() - started, 4)
        res.provenance = cap.provenance
        res.binds = cap.binds
        if status == "timeout":
            res.shaped += f"\n[the cell ran past its {timeout} s timeout and was interrupted]"
        return res

    def _arm_timer(self, timeout: float | None) -> threading.Timer | None:
        self._timed_out = False
        with self._lock:
            self._running = True
        if not timeout:
            return None
        timer = threading.Timer(timeout, self._on_timeout)
        timer.daemon = True
        timer.start()
        return timer

    def _on_timeout(self) -> None:
        with self._lock:
            if self._running:
                self._timed_out = True
                _thread.interrupt_main()

    def _run_captured(self, code: str, cap: _Capture) -> Any:
        shell = self.shell
        hook, pub = shell.displayhook, shell.display_pub
        saved = (sys.stdout, sys.stderr, shell.__dict__.get("_showtraceback"),
                 hook.__dict__.get("write_format_data"), pub.__dict__.get("publish"))
        orig_showtb, orig_write, orig_publish = (shell._showtraceback, hook.write_format_data,
                                                 pub.publish)

        def showtb(etype: Any, evalue: Any, stb: list[str]) -> None:
            cap.traceback(etype, evalue, stb)
            orig_showtb(etype, evalue, stb)

        def write_format_data(format_dict: dict[str, Any], md_dict: Any = None) -> None:
            cap.bundle("execute_result", format_dict, md_dict)
            provenance.note_data(format_dict)
            orig_write(format_dict, md_dict)

        def publish(data: dict[str, Any], metadata: Any = None, *a: Any, **kw: Any) -> None:
            if not kw.get("update"):
                cap.bundle("display_data", data, metadata)
                provenance.note_data(data)
            orig_publish(data, metadata, *a, **kw)

        sys.stdout = _Tee(sys.stdout, "stdout", cap.stream)
        sys.stderr = _Tee(sys.stderr, "stderr", cap.stream)
        shell._showtraceback, hook.write_format_data, pub.publish = showtb, write_format_data, publish
        fileops.watch(True)  # the files it reads, and which line read them (kernel_ext)
        provenance.begin(shell.user_ns, shell.user_ns_hidden, code)
        result = None
        try:
            result = shell.run_cell(code, store_history=False)
            return result
        finally:
            record = provenance.end(result)
            cap.binds = record.pop("binds", None)
            cap.provenance = record
            fileops.watch(False)
            sys.stdout, sys.stderr = saved[0], saved[1]
            _restore_attr(shell, "_showtraceback", saved[2])
            _restore_attr(hook, "write_format_data", saved[3])
            _restore_attr(pub, "publish", saved[4])

    def _status(self, result: Any, cap: _Capture) -> str:
        if self._timed_out:
            return "timeout"
        if result is None:
            return "interrupted"
        err = result.error_in_exec or result.error_before_exec
        if isinstance(err, KeyboardInterrupt):
            return "interrupted"
        if err is not None:
            if not cap.error:  # not shown through _showtraceback (e.g. a custom handler)
                cap.traceback(type(err), err, [f"{type(err).__name__}: {err}"])
            return "error"
        return "ok"

    def _notify_interrupt(self) -> None:
        if self.on_user_interrupt is None or self._in_callback:
            return
        self._in_callback = True
        try:
            self.on_user_interrupt()
        finally:
            self._in_callback = False


def _restore_attr(obj: Any, name: str, saved: Any) -> None:
    if saved is None:
        obj.__dict__.pop(name, None)
    else:
        setattr(obj, name, saved)
