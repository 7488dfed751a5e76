"""`Kernel`: a persistent IPython kernel that survives crashes (see docs/architecture.md).

Policy lives here: timeouts (interrupt, grace, restart), death (report the cause, restart,
restore the snapshot), helper calls into kernel_ext through `user_expressions` (silent, no
history, no snapshot hook), each one a `kernel_ext.contract.Call`. The process mechanics
are in runtime.py, the wait loop and output collection in execution.py, the bridge in
bridge.py, the host's queries over helper calls (`describe`, `list_namespace`, `file_ops`,
`trial`, `snapshot_now`, ...) in queries.py.

Thread model: the caller's thread (one at a time, `_shell_lock`) uses the shell socket;
the runtime's IOPub listener thread reads IOPub and writes control; bridge handlers run
on the dispatcher's pool. `on_output` callbacks run on the caller's thread. A namespace
listing asked while a cell runs goes to a kernel subshell through sockets of its own
(rlm/kernel/subshell.py), else comes from the last snapshot and says so.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from kernel_ext import contract, store_protocol
from kernel_ext.wire import CELL_PROVENANCE, CELL_READS
from rlm import __version__
from rlm.config import Config
from rlm.errors import KernelBusy, KernelDied, KernelError
from rlm.kernel.bridge import BridgeDispatcher, BridgeHandler
from rlm.kernel.execution import CellCollector, CellTags, WaitOutcome, wait_for
from rlm.kernel.interrupting import CellInterrupt
from rlm.kernel.kinds import Runtime, make_runtime
from rlm.kernel.queries import KernelQueries
from rlm.kernel.runtime import died_cause, network_note
from rlm.kernel.state import (
    expression_value,
    merge_rebuild,
    needs_rebuild,
    replay_announcement,
    replay_off,
    scrub_snapshot_url,
    snapshot_location,
    snapshot_size,
)
from rlm.kernel.subshell import RuntimeLister
from rlm.kernel.types import CellResult, Output, RestoreReport
from rlm.paths import private_dir

START_TIMEOUT_S = 60.0
# a restore reads the whole snapshot: allow this much on top of START_TIMEOUT_S per byte
# (pessimistic for a shared 2-core machine: unpickling measured at ~250 MB/s; dill is slower)
RESTORE_BYTES_PER_S = 20 * 1024 * 1024
NO_REPLY_NOTE = ("[the kernel ended this cell without a reply: an interrupt landed in the "
                 "kernel's own code around the cell (ipykernel catches it there); what the "
                 "cell printed is above, and its code may not have run to its end]")
HANDSHAKE_EXPR = contract.HANDSHAKE.expression()


def _tell_stderr(line: str) -> None:
    print(f"rlm: {line}", file=sys.stderr, flush=True)


class Kernel(KernelQueries):
    def __init__(
        self, session_dir: Path | str, config: Config, bridge_handler: BridgeHandler | None = None
    ):
        self.session_dir = private_dir(Path(session_dir))
        self.config = config
        self._bridge = BridgeDispatcher(bridge_handler, workers=max(4, config.batch_concurrency))
        self._rt: Runtime | None = None
        self._shell_lock = threading.RLock()
        self._int = CellInterrupt()  # the running cell's interrupt (rlm.kernel.interrupting)
        self._tags = CellTags(self.session_dir / "artifacts")  # each cell's spool/artifact name
        self._lister = RuntimeLister()  # names while a cell runs (a subshell)
        self.last_restart_cause: str | None = None
        self._restart_pending: str | None = None  # a restart after a cell failed; retried once
        # told before a restore re-runs recorded cells (which ones); default: a stderr line
        self.replay_notice: Callable[[str], None] = _tell_stderr
        # started once the kernel's process is spawned, while the host waits for it to
        # boot (returns at once; work that contends for the GIL earlier slows the spawn)
        self.while_booting: Callable[[], None] | None = None

    # -- lifecycle ------------------------------------------------------------------
    def start(self) -> RestoreReport:
        """Start the kernel (kernel_ext loaded) and restore the snapshot, if any."""
        with self._shell_lock:
            if self._rt is not None:
                raise KernelError("the kernel is already started; use restart() for a new one")
            self._rt = make_runtime(self.session_dir, self.config, self._bridge)
            if self.while_booting is not None:
                self.while_booting()
            return self._restore()

    def restart(self, cause: str = "restart requested") -> RestoreReport:
        """A new kernel process plus snapshot restore; the old one is killed."""
        with self._shell_lock:
            self.last_restart_cause, self._restart_pending = cause, None
            old, self._rt = self._rt, None
            self._lister.close(delete=False)
            if old is not None:
                old.close(now=True)
            self._rt = make_runtime(self.session_dir, self.config, self._bridge)
            return self._restore()

    def stop(self) -> None:
        """Shutdown request, then SIGTERM, then SIGKILL; idempotent."""
        with self._shell_lock:
            rt, self._rt = self._rt, None
            self._lister.close(delete=False)
            if rt is not None:
                rt.close(now=False)
        self._bridge.close()

    def __enter__(self) -> Kernel:
        if self._rt is None:
            self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def pid(self) -> int | None:
        return self._rt.pid if self._rt is not None else None

    def is_alive(self) -> bool:
        return self._rt is not None and self._rt.poll() is None

    def interrupt(self) -> None:
        """SIGINT to the kernel: a running cell ends with status "interrupted". Once per
        cell, and held until the kernel has started it (rlm.kernel.interrupting)."""
        rt = self._rt
        if rt is not None:
            self._int.request(rt)

    def set_bridge_handler(self, fn: BridgeHandler | None) -> None:
        self._bridge.handler = fn

    def _runtime(self) -> Runtime:
        if self._rt is None and self._restart_pending is not None:
            cause, self._restart_pending = self._restart_pending, None
            self.restart(f"{cause} (retried: the first restart failed)")  # KernelError if not yet
        if self._rt is None:
            raise KernelError(
                "the kernel is not started: call Kernel.start() or use it as a context manager"
            )
        return self._rt

    # -- execute --------------------------------------------------------------------
    def execute(
        self,
        code: str,
        timeout: float | None = None,
        on_output: Callable[[Output], None] | None = None,
    ) -> CellResult:
        """Run one cell. Never raises for what the cell does: see CellResult.status."""
        timeout = self.config.cell_timeout if timeout is None else timeout
        with self._shell_lock:
            rt = self._runtime()
            t0 = time.monotonic()
            col = CellCollector(self.session_dir, self.config.output_budget(), self._tags.next(),
                                on_output,
                                disk_cap=self.config.output_disk_cap)
            self._int.begin()

            def seen(msg: dict[str, Any]) -> None:
                self._int.seen(rt, msg)
                col.handle(msg)

            try:
                out = self._send_and_wait(rt, {"code": code}, t0 + timeout, seen)
                if out.timed_out:
                    rt.interrupt()
                    grace_end = time.monotonic() + self.config.interrupt_grace_s
                    out = self._continue_wait(rt, out, grace_end, seen)
            finally:
                self._int.end()
            result = self._conclude(out, col, t0)
            self._scrub_snapshot_url(result)
            return result

    def _scrub_snapshot_url(self, result: CellResult) -> None:
        """The local scrub ran in CellCollector.finish; a snapshot URL's new objects are
        scrubbed here. A store that cannot be reached is noted, not raised."""
        if not self.config.snapshot_url:
            return
        try:
            scrub_snapshot_url(self.session_dir, self.config.snapshot_url)
        except (store_protocol.StoreError, OSError) as e:
            result.shaped = _with_note(result.shaped, f"[the snapshot store could not be "
                                       f"checked for secrets: {e}]")

    def _conclude(self, out: WaitOutcome, col: CellCollector, t0: float) -> CellResult:
        res = CellResult(status="ok")
        if out.died_rc is not None:
            res.status, res.died_cause = "died", self._exit_text(out.died_rc)
            res.restart_error = self._restart_for(res, f"the kernel died during a cell: {res.died_cause}")
        elif out.timed_out and not out.done:
            res.status = "timeout"
            res.restart_error = self._restart_for(res, "a cell timed out and did not stop on interrupt")
        elif out.timed_out:
            res.status = "timeout"
        elif out.no_reply:  # ipykernel dropped the request (an interrupt in its own code)
            res.status = "interrupted" if self._int.sent else "error"
        else:
            status = (out.reply or {}).get("content", {}).get("status", "ok")
            if status != "ok":
                res.status = "interrupted" if self._int.sent else "error"
        content = (out.reply or {}).get("content", {})
        res.shaped, res.full_output_path, res.chars_total, res.elided_chars = col.finish()
        res.outputs = col.outputs
        res.execution_count = content.get("execution_count", col.execution_count)
        res.files_read = _files_read(out.reply)
        res.provenance = _provenance(out.reply)
        res.binds = cell_binds(out.reply)
        res.duration_s = time.monotonic() - t0
        if res.status in ("died", "timeout"):
            res.shaped = _with_note(res.shaped, _status_note(res))
        elif out.no_reply:
            res.shaped = _with_note(res.shaped, NO_REPLY_NOTE)
        elif res.status == "error" and (note := network_note(self.config, res.shaped)):
            res.shaped = _with_note(res.shaped, note)
        return res

    def _restart_for(self, res: CellResult, cause: str) -> str | None:
        """Restart after a cell killed or hung the kernel. A restart that fails (a gateway
        that went away, a kernel that cannot start) is part of the cell's result, not an
        exception: the next execute tries once more."""
        try:
            res.restart = self.restart(cause)
            return None
        except KernelError as e:
            self._restart_pending = cause
            return str(e)

    def _send_and_wait(
        self,
        rt: Runtime,
        content: dict[str, Any],
        deadline: float,
        on_msg: Callable[[dict[str, Any]], None] | None,
    ) -> WaitOutcome:
        full = {
            "silent": False,
            "store_history": True,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": False,
            **content,
        }
        msg = rt.session.msg("execute_request", full)
        msg_id = msg["header"]["msg_id"]
        q = rt.listener.route(msg_id)
        out = WaitOutcome(msg_id=msg_id, q=q)
        if rt.poll() is not None:
            out.died_rc = rt.poll()
            return out
        rt.send_shell(msg)
        try:
            return wait_for(rt, msg_id, q, out, deadline, on_msg)
        finally:
            if out.done or out.died_rc is not None:
                rt.listener.unroute(msg_id)

    def _continue_wait(
        self,
        rt: Runtime,
        out: WaitOutcome,
        deadline: float,
        on_msg: Callable[[dict[str, Any]], None],
    ) -> WaitOutcome:
        out.timed_out = False
        try:
            wait_for(rt, out.msg_id, out.q, out, deadline, on_msg)
        finally:
            rt.listener.unroute(out.msg_id)
        out.timed_out = True
        return out

    # -- helper calls into kernel_ext -------------------------------------------------
    def _expression(self, expr: str, timeout: float) -> str:
        """Evaluate one kernel_ext expression returning a str, silently. Raises on failure."""
        if not self._shell_lock.acquire(timeout=timeout):
            raise KernelBusy(f"a cell is still running after {timeout} s; try again when it ends")
        try:
            rt = self._runtime()
            out = self._send_and_wait(
                rt,
                {
                    "code": "",
                    "silent": True,
                    "store_history": False,
                    "user_expressions": {"r": expr},
                },
                time.monotonic() + timeout,
                None,
            )
            if out.died_rc is not None:
                raise KernelDied(self._exit_text(out.died_rc))
            if out.reply is None:
                rt.listener.unroute(out.msg_id)
                raise KernelBusy(
                    f"the kernel did not answer within {timeout} s (a cell is running)"
                )
            return expression_value(out.reply, expr)
        finally:
            self._shell_lock.release()

    def restore_timeout(self) -> float:
        """Start timeout plus the time to read the snapshot: a large snapshot is slow to
        restore, which is not a failed start."""
        size = snapshot_size(self.session_dir, self.config.snapshot_url)
        if size is None:
            size = snapshot_bytes(self.session_dir / "snapshot")
        return START_TIMEOUT_S + size / RESTORE_BYTES_PER_S

    def _exit_text(self, rc: int) -> str:
        return self._rt.exit_text(rc) if self._rt is not None else died_cause(rc)

    def _handshake(self, timeout: float) -> None:
        """kernel_ext's version must be ours (a remote image installs rlm-kernel-ext)."""
        try:
            hello = json.loads(self._expression(HANDSHAKE_EXPR, timeout))
        except RuntimeError as e:
            raise KernelError(f"the kernel cannot load kernel_ext ({e}); install it where the "
                              f"kernel runs: pip install 'rlm-kernel-ext=={__version__}'") from e
        if hello.get("version") != __version__:
            raise KernelError(
                f"the kernel runs kernel_ext {hello.get('version')} but this host is rlm "
                f"{__version__}: pip install 'rlm-kernel-ext=={__version__}' where the kernel runs")

    def _restore(self) -> RestoreReport:
        timeout = self.restore_timeout()
        try:
            self._handshake(timeout)
            text = self._expression(contract.RESTORE_REPORT.expression(), timeout)
            report = RestoreReport.from_dict(json.loads(text))
            if needs_rebuild(report):  # replay recorded cells for what was not snapshotted
                self._rebuild(report)
            return report
        except KernelDied as e:
            tail = self._rt.log_tail() if self._rt is not None else ""
            raise KernelError(
                f"the kernel died while starting ({e.cause}); its log ends with:\n{tail}"
            ) from e
        except KernelBusy as e:
            raise KernelError(
                f"the kernel did not become ready within {timeout:.0f} s (restoring the snapshot "
                f"in {snapshot_location(self.session_dir, self.config.snapshot_url)}); "
                "move it aside to start without it"
            ) from e
        except (RuntimeError, ValueError) as e:
            return RestoreReport(failed=[{"name": "*", "reason": f"restore failed: {e}"}])

    def _rebuild(self, report: RestoreReport) -> None:
        """Plan the replay (nothing runs), tell the user which cells it re-runs
        (`replay_notice`), then run it under a read-only filesystem — unless `config.replay`
        is off or the filesystem cannot be made read-only (no sandbox): the planner's
        allow-list is a first filter, the read-only mounts are the guarantee."""
        try:
            plan = json.loads(self._expression(contract.REBUILD_PLAN.expression(),
                                               self.config.cell_timeout))
            if not plan.get("cells"):
                merge_rebuild(report, plan)
                return
            if not self.config.replay:
                self._announce(replay_announcement(plan, False))
                merge_rebuild(report, replay_off(plan))
                report.replay_off = True
                return
            with self._runtime().read_only() as refused:
                self._announce(replay_announcement(plan, True, refused))
                if refused:
                    merge_rebuild(report, replay_off(plan, refused))
                    return
                try:
                    merge_rebuild(report, json.loads(self._expression(
                        contract.REBUILD.expression(), self.config.cell_timeout)))
                except KernelBusy:  # stopped while the files are still read-only
                    merge_rebuild(report, None,
                                  f"replay did not end within {self.config.cell_timeout} s")
                    self._stop_replay()
        except KernelBusy:
            merge_rebuild(report, None, f"replay did not end within {self.config.cell_timeout} s")
        except (RuntimeError, ValueError) as e:
            merge_rebuild(report, None, f"replay failed: {e}")

    def _stop_replay(self) -> None:
        """A replay past its time: interrupted, and the kernel idle again before its files
        are writable; one that ignores the interrupt is killed where it stands (it never
        runs on with write access)."""
        self.interrupt()
        try:
            self._expression("''", 10.0)
        except (KernelBusy, RuntimeError):
            rt = self._runtime()
            rt.note("a replay ignored its interrupt: killed while its files were read-only")
            rt.close(now=True)

    def _announce(self, line: str | None) -> None:
        if line is not None:
            self.replay_notice(line)


def _status_note(res: CellResult) -> str:
    if res.restart_error is not None:
        what = f"the kernel died: {res.died_cause}" if res.status == "died" else "the cell timed out"
        return f"[{what}; restarting it failed: {res.restart_error}; the next cell tries again]"
    if res.status == "died":
        note = f"[the kernel died: {res.died_cause}; it was restarted"
    else:
        note = "[the cell timed out" + (
            "; the kernel was restarted" if res.restart else "; it was interrupted"
        )
    if res.restart is not None:
        r = res.restart
        note += f"; restored {len(r.restored)} name(s)"
        lost = [d.get("name", "?") for d in (*r.failed, *r.skipped)]
        if lost:
            note += f", not restored: {', '.join(lost)}"
    return note + "]"


def _with_note(shaped: str, note: str) -> str:
    if shaped and not shaped.endswith("\n"):
        shaped += "\n"
    return shaped + note


def snapshot_bytes(folder: Path) -> int:
    """Bytes on disk under `folder` (0 when it does not exist); never raises."""
    total = 0
    stack = [folder]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(Path(entry.path))
                        elif entry.is_file(follow_symlinks=False):
                            total += entry.stat(follow_symlinks=False).st_size
                    except OSError:
                        continue
        except OSError:
            continue
    return total


MAX_PROVENANCE_TOKENS = 20_000  # kernel_ext.provenance.MAX_TOKENS: a kernel sends no more


def _provenance(reply: dict[str, Any] | None) -> dict[str, Any] | None:
    """The cell's line record from its execute_reply's metadata (kernel_ext.provenance),
    checked as what it is: the kernel's word, bounded (a failed cell's too: what ran
    before its error read and bound). None: no record, or one that is not well formed."""
    if reply is None:
        return None
    raw = (reply.get("metadata") or {}).get(CELL_PROVENANCE)
    if not isinstance(raw, dict):
        return None
    read, said, partial = raw.get("read"), raw.get("said"), raw.get("partial")
    if not (isinstance(read, list) and isinstance(said, dict) and isinstance(partial, list)):
        return None
    lines = [n for n in read + partial if isinstance(n, int) and not isinstance(n, bool)]
    if len(lines) != len(read) + len(partial):
        return None
    out: dict[str, list[str]] = {}
    budget = MAX_PROVENANCE_TOKENS
    for key, tokens in said.items():
        if not (isinstance(key, str) and key.isdigit() and isinstance(tokens, list)):
            return None
        kept = [t[:64] for t in tokens[:budget] if isinstance(t, str)]
        budget -= len(kept)
        out[key] = kept
    return {"read": sorted(set(read)), "said": out, "partial": sorted(set(partial)),
            "wrote": _wrote(raw.get("wrote"))}


MAX_WROTE = 64  # kernel_ext.provenance.MAX_WROTE: a kernel sends no more
MAX_PATH_CHARS = 4096


def _wrote(raw: Any) -> dict[str, list[str]]:
    """The lines that opened files for writing ({line: [absolute path]}), bounded; what
    is not well formed is left out (the kernel's word: it only decides which code a
    named file's content came from)."""
    out: dict[str, list[str]] = {}
    budget = MAX_WROTE
    for key, paths in (raw.items() if isinstance(raw, dict) else ()):
        if not (isinstance(key, str) and key.isdigit() and isinstance(paths, list)):
            continue
        kept = [p for p in paths[:budget] if isinstance(p, str) and p.startswith("/")
                and len(p) <= MAX_PATH_CHARS]
        budget -= len(kept)
        if kept:
            out[key] = kept
    return out


MAX_BINDS = 1000  # kernel_ext.provenance.MAX_BINDS: a kernel sends no more
MAX_NAME_CHARS = 256


def cell_binds(reply: dict[str, Any] | None) -> list[str] | None:
    """The names the cell bound, from its line record (kernel_ext.provenance): at most
    MAX_BINDS identifiers of at most MAX_NAME_CHARS; None when there is no such list or it
    is not one of names (the kernel's word, checked as what it is)."""
    raw = ((reply or {}).get("metadata") or {}).get(CELL_PROVENANCE)
    names = raw.get("binds") if isinstance(raw, dict) else None
    if not isinstance(names, list) or len(names) > MAX_BINDS or not all(
            isinstance(n, str) and len(n) <= MAX_NAME_CHARS and n.isidentifier()
            for n in names):
        return None
    return sorted(set(names))


def _files_read(reply: dict[str, Any] | None) -> list[str] | None:
    """The cell's reads from its execute_reply's metadata (kernel_ext.fileops; None: a
    failed cell, or no kernel_ext)."""
    if reply is None or reply.get("content", {}).get("status") != "ok":
        return None
    files = (reply.get("metadata") or {}).get(CELL_READS)
    return [f for f in files if isinstance(f, str)] if isinstance(files, list) else None
