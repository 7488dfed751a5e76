"""One host process of a soak run: `python -m bench.soak_child STATE.json`.

It opens (or creates) the session, starts the agent (kernel + snapshot restore), follows
the plan from `start` on and reports to the parent, one JSON object per line on fd 1:
  {"ack": id}                an entry is appended (fsynced) -- the parent keeps these
  {"done": i}                action i is complete (the next host resumes after it)
  {"commit": {name: rec}}    ledger: a name now holds this value; {"fragile": [...]}
  {"drop": [names]}          fragile names gone with a kernel restart
  {"kernel": pid}            the current kernel process
  {"fault": kind, "i", "ok", "detail"}   a kernel/model fault happened and was checked
  {"violation": {...}}       an invariant failed
  {"killme": kind}           a host-kill point: the parent SIGKILLs this process now
  {"tick": tick_id, ...}     a heartbeat/cron tick was delivered and confirmed
  {"compaction": id, "ok"}   a compaction and its <ipython_state> check
  {"started": ..., "ok"}     after start: the restore check
  {"rss": kib}               peak RSS of this host so far
  {"stopped": kind, "i", "ok"}  the host stops on a planned disk fault (exit 75); resume
  {"sched_added": job, "i"}  another process added a one-shot job while the host idled
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.soak_boundary import report as _report
from bench.soak_boundary import reports as _reports
from bench.soak_model import PlanLLM, Summarizer
from bench.soak_plan import CRON, HEARTBEAT_S, canonical, check_code, clock_at

_OUT = -1
STOPPED = 75  # exit status of a host that stopped on a planned disk fault

# A second writer, as `rlm compact SESSION` would open it: the lock first, then the file.
SECOND_WRITER = """
import sys
from rlm.app import SessionRun
from rlm.longrun.lock import SessionBusy
try:
    with SessionRun.open("compact", sys.argv[1], build=False):
        pass
except SessionBusy as e:
    print("BUSY", e)
else:
    print("OPENED")
"""

# Another process (as `rlm schedule add` would) adds a one-shot job at the fake time.
ADD_JOB = """
import sys
from pathlib import Path
from rlm.longrun.clock import FakeClock
from rlm.longrun.schedule import Scheduler
job = Scheduler(Path(sys.argv[1]), FakeClock(float(sys.argv[2]))).add(
    "in 1s", "the idle job: report the ledger size", label=sys.argv[3])
print(job.id)
"""
RAW_CONTROL = ("\x1b", "\x07", "\x9b", "\x90", "\x9d")


class TerminalSink(io.TextIOBase):
    """Where the renderer's console writes: counts bytes, keeps raw control characters
    found (an ESC, BEL or C1 byte reaching the terminal is a violation)."""

    def __init__(self) -> None:
        self.chars, self.raw, self.tail = 0, [], ""  # type: ignore[var-annotated]

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.chars += len(text)
        self.tail = (self.tail + text)[-65536:]
        if any(c in text for c in RAW_CONTROL):
            self.raw.append(text[:200])
        return len(text)

    def isatty(self) -> bool:
        return False


class _FailingOS:
    """The session log's `os` (rlm.durability, where LogFile writes) for one write: ENOSPC
    after half the line, or EROFS."""

    def __init__(self, real: Any, err: int, sticky: bool):
        self.real, self.err, self.sticky, self.size = real, err, sticky, None  # type: ignore[var-annotated]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def write(self, fd: int, data: Any) -> int:
        import rlm.durability as st

        self.size = self.real.fstat(fd).st_size
        if not self.sticky:
            st.os = self.real
        if self.err == errno.ENOSPC:
            view = memoryview(data)
            self.real.write(fd, view[: max(1, len(view) // 2)])
        raise OSError(self.err, os.strerror(self.err))


def emit(**msg: Any) -> None:
    os.write(_OUT, (json.dumps(msg, default=str) + "\n").encode())


def killme(kind: str, i: int, delay: float = 0.0) -> None:
    """Ask the parent for SIGKILL; block until it comes (delay: the parent waits first).
    `i` is the action that armed this host fault: it fires once, never on a re-run."""
    emit(killme=kind, i=i, delay=delay)
    if delay == 0.0:
        time.sleep(120)
        os._exit(99)  # the parent never came


class Child:
    def __init__(self, state: dict[str, Any]):
        from rlm.config import Config
        from rlm.longrun.clock import FakeClock

        self.s = state
        self.plan: list[dict[str, Any]] = json.loads(Path(state["plan"]).read_text())
        self.ledger: dict[str, dict[str, Any]] = state["ledger"]
        self.fragile: set[str] = set(state["fragile"])
        self.clock = FakeClock(clock_at(self.plan, state["start"]))
        self.config = Config(home=Path(state["home"]), model="soak-plan",
                             compaction_model="soak-summarizer", **state["config"])
        self.current: tuple[dict[str, Any] | None, dict[str, Any]] | None = None
        self.fired: set[int] = set(state["fired"])
        # host fault kind -> the action that armed it (armed in an earlier host too)
        self.arm: dict[str, int] = {k: i for k, i in state["armed"].items() if i not in self.fired}
        self.pending_compactions: list[Any] = []
        self.fault_violations = 0
        self.watch_stop = threading.Event()
        self.sink = TerminalSink()
        self.stop_fault: tuple[str, int, Any] | None = None  # (kind, action, failing os)

    # ------------------------------------------------------------------ setup
    def open_session(self) -> Any:
        from rlm.longrun.lock import SessionLock
        from rlm.session.store import SessionStore

        if self.s.get("session"):
            # the one-writer lock first, as `rlm resume` takes it (two_writers probes it)
            self.lock = SessionLock.for_session(Path(self.s["session"]).parent, "resume")
            self.lock.acquire()
            session = SessionStore.open(self.s["session"])
            if session.recovered is not None:
                emit(note=f"torn tail recovered into {session.recovered.name}")
        else:
            session = SessionStore.create(Path(self.s["home"]), model="soak-plan", task="soak")
            self.lock = SessionLock.for_session(session.dir, "resume")
            self.lock.acquire()
            emit(session=str(session.path))
        orig = session.append

        def append(entry: Any, **kw: Any) -> Any:
            self._maybe_tear(session, entry)
            out = orig(entry, **kw)
            emit(ack=out.id)
            if getattr(out, "type", "") == "compaction":
                self.pending_compactions.append(out.id)
            return out

        session.append = append  # type: ignore[method-assign]
        return session

    def _maybe_tear(self, session: Any, entry: Any) -> None:
        """host_append: the next tool-result line is half written, then the host is killed."""
        if "host_append" not in self.arm or getattr(entry, "message", {}).get("role") != "tool":
            return

        def torn(line: bytes, durable: bool = True) -> None:
            fd = os.open(session.path, os.O_WRONLY | os.O_APPEND)
            os.write(fd, line[: len(line) // 2])
            os.fsync(fd)
            killme("host_append", self.arm.pop("host_append"))

        session._write = torn

    def build(self) -> None:
        from rlm.app import build_agent
        from rlm.longrun.goals import GoalManager
        from rlm.longrun.schedule import Scheduler

        self.session = self.open_session()
        self.llm = PlanLLM(self.s["seed"], lambda: self.ledger, self.on_action)
        self.summarizer = Summarizer(lambda: sorted(self.ledger))
        self.sched = Scheduler(self.session.dir / "scheduled-jobs.json", self.clock)
        if not self.s.get("session"):
            GoalManager(self.session, self.clock).set(
                "Keep the soak ledger correct through every fault.")
            self.sched.add(f"every {int(HEARTBEAT_S)}s", "report progress", heartbeat=True, label="hb")
            self.sched.add(CRON, "checkpoint the ledger", label="cron")
        # assembled by the composition root, as `rlm resume` assembles its agent: the soak's
        # figures speak for the root's wiring (compaction, goals, schedules, child runner)
        from rlm.app.options import RunOptions

        self.agent = build_agent(self.session, self.config, entry="resume", llm=self.llm,
                                 llm_factory=lambda spec: self.summarizer, clock=self.clock,
                                 options=RunOptions(gate=list(self.s.get("gate") or [])))
        _unbounded_gate_refusals(self.agent)
        from rich.console import Console

        from rlm.cli.render import Renderer

        # what a user's terminal would show: every event rendered, captured in a sink
        self.render = Renderer(console=Console(file=self.sink, force_terminal=False,
                                               color_system=None, width=120), animate=False)
        self.render.header("soak-plan", self.session)
        self._arm_summarizer()
        for d in self.sched.recover(self.clock.now()):
            emit(interrupted_tick=d["tick_id"])

    # ---------------------------------------------------------------- actions
    def on_action(self, action: dict[str, Any] | None, expect: dict[str, Any]) -> None:
        """The model is answering `action` (on the model thread): finish the previous one."""
        self.finish_current()
        self.current = (action, expect)
        kind = action["kind"] if action else "filler"
        if kind in ("host_append", "host_compact", "host_tick") and action["i"] not in self.fired:
            self.arm[kind] = action["i"]
            emit(armed=kind, i=action["i"])
            self._arm_summarizer()
        if "cell_timeout" in expect:
            self.config.cell_timeout, self.config.interrupt_grace_s = expect["cell_timeout"], 1.0
        if "model_error" in expect or "no_code" in expect:
            emit(fault=kind, i=action["i"] if action else -1, ok=True, detail="model reply")
        if action is None or action["i"] in self.fired:
            return
        if kind == "enospc_append":
            self._fail_appends(kind, action["i"], errno.ENOSPC, sticky=False)
        elif kind == "two_writers":
            self._second_writer(action["i"])

    def _fail_appends(self, kind: str, i: int, err: int, sticky: bool) -> None:
        import rlm.durability as st

        fake = _FailingOS(st.os, err, sticky)
        st.os = fake  # type: ignore[assignment]
        self.stop_fault = (kind, i, fake)

    def _second_writer(self, i: int) -> None:
        """Another process opens the session for writing while this host runs it."""
        path = self.session.path
        # this host's own background writers (the checkpoint writer's thread appends its
        # outcome) wait meanwhile: only the second process could change the log
        with self.session._append_lock:
            before = hashlib.sha256(path.read_bytes()).hexdigest()
            proc = subprocess.run([sys.executable, "-c", SECOND_WRITER, str(path)],
                                  capture_output=True, text=True, timeout=120)
            after = hashlib.sha256(path.read_bytes()).hexdigest()
        ok = proc.stdout.startswith("BUSY") and before == after
        if not ok:
            self.violation("second_writer_not_refused", i=i, out=proc.stdout[-300:],
                           err=proc.stderr[-600:], changed=before != after)
        emit(fault="two_writers", i=i, ok=ok, detail=proc.stdout.strip()[:200])

    def add_idle_job(self, i: int) -> None:
        """sched_idle: the turn is over and the host idles; another process adds a job."""
        proc = subprocess.run(
            [sys.executable, "-c", ADD_JOB, str(self.sched.path), repr(self.clock.now()),
             f"idle{i}"], capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            self.violation("sched_add_failed", i=i, err=proc.stderr[-600:])
            return
        emit(sched_added=proc.stdout.strip(), i=i)

    def _arm_summarizer(self) -> None:
        if "host_compact" in self.arm:
            i = self.arm["host_compact"]
            self.summarizer.on_call = lambda: killme("host_compact", i)

    def finish_current(self) -> None:
        if self.current is None:
            return
        action, _ = self.current
        self.current = None
        self.config.cell_timeout, self.config.interrupt_grace_s = self.s["config"]["cell_timeout"], 1.0
        if action is not None and action["kind"] == "sched_idle" and action["i"] not in self.fired:
            self.add_idle_job(action["i"])  # the turn is over: the host idles
        if action is not None and not action.get("nodone"):
            emit(done=action["i"])
        emit(rss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)

    def violation(self, kind: str, **detail: Any) -> None:
        self.fault_violations += 1
        emit(violation={"kind": kind, **detail})

    # ------------------------------------------------------------------ events
    def handle(self, ev: Any) -> None:
        from rlm.events import CellFinished, CellStarted, KernelRestarted

        self.render(ev)
        if isinstance(ev, CellStarted) and self.current is not None:
            self._arm_cell(self.current[1])
        elif isinstance(ev, CellFinished) and self.current is not None:
            self.on_cell(ev)
        elif isinstance(ev, KernelRestarted):
            self.on_restart(ev)
        self.check_compactions()

    def _arm_cell(self, expect: dict[str, Any]) -> None:
        pid = self.agent.executor.pid
        if "sigkill_after" in expect:
            threading.Timer(expect["sigkill_after"], _kill_quietly, args=(pid,)).start()
        if expect.get("kill_in_snapshot"):
            snap, self.watch_stop = self.session.dir / "snapshot", threading.Event()
            threading.Thread(target=_kill_in_snapshot, args=(pid, snap, self.watch_stop),
                             daemon=True).start()
        action = self.current[0] if self.current else None
        if expect.get("readonly") and action and action["i"] not in self.fired:
            self._read_only_home(action["i"])
        if "host_kill" in expect and action and action["i"] not in self.fired:
            killme("host_turn", action["i"], delay=expect["host_kill"])

    def on_cell(self, ev: Any) -> None:
        action, expect = self.current  # type: ignore[misc]
        kind = action["kind"] if action else "filler"
        res, ok = ev.result, True
        self.watch_stop.set()
        if expect.get("kill_in_snapshot") and res.status == "ok":
            emit(note=f"snap_kill at {action and action['i']}: the snapshot ended before the kill")
            return  # a timing miss of the harness, not a fault injected
        if res.status != expect.get("status", "ok"):
            ok = False
            self.violation("cell_status", i=action and action["i"], action=kind,
                           expected=expect.get("status"), got=res.status, shaped=ev.shaped[-300:])
        if "contains" in expect and expect["contains"] not in ev.shaped:
            ok = False
            self.violation("cell_output", i=action and action["i"], action=kind, wanted=expect["contains"])
        if expect.get("elided") and not (res.elided_chars > 0 and res.full_output_path):
            ok = False
            self.violation("print_not_spooled", i=action and action["i"])
        if expect.get("elided") and res.full_output_path and not (
                self.session.dir / res.full_output_path).is_file():
            ok = False
            self.violation("spool_missing", i=action and action["i"], path=res.full_output_path)
        if res.status == "ok":
            self._commit(expect)
            if "read" in expect:
                ok = self._check_read(expect["read"], ev.shaped, action) and ok
        i = action["i"] if action else -1
        if "enospc_snapshot" in expect and res.status == "ok":
            ok = self._check_enospc_snapshot(expect["enospc_snapshot"], i) and ok
        if expect.get("after_close"):
            after = self.agent.executor.execute("print('after close', 6 * 7)", timeout=60)
            if after.status != "ok" or "after close 42" not in after.shaped:
                ok = False
                self.violation("print_after_close", i=i, status=after.status,
                               out=after.shaped[-300:])
        if expect.get("hostile") and (self.sink.raw or "HOSTILE" not in self.sink.tail
                                      or "done" not in self.sink.tail):
            ok = False  # leaked (reported at exit), or the output was never rendered
            if not self.sink.raw:
                self.violation("hostile_not_rendered", i=i, tail=self.sink.tail[-300:])
        if "replay_victim" in expect and res.status == "ok":
            ok = self._check_replay_destructive(expect, i) and ok
        if "boundary" in expect:
            ok = self._check_boundary(expect, ev.shaped, res.status, i) and ok
        if expect.get("forge") is not None and res.status == "ok":
            ok = self._check_forge(ev.shaped, i) and ok
        if expect.get("secret"):
            found = secret_files(self.session.dir, os.environ.get("OPENAI_API_KEY", ""))
            if found:
                ok = False
                self.violation("secret_on_disk", i=i, files=found[:10])
        if action is not None and (expect.get("status") != "ok" or "fragile" in expect
                                   or "elided" in expect or kind == "broken_code"
                                   or "boundary" in expect
                                   or kind in ("enospc_snapshot", "close_stdout",
                                               "hostile_text", "secret_leak", "forge_control")):
            emit(fault=kind, i=action["i"], ok=ok, detail=res.status)

    def _check_enospc_snapshot(self, name: str, i: int) -> bool:
        """The snapshot after the cell failed (the name is not in the manifest); the next
        cell's snapshot, with space back, writes it."""
        def stored() -> bool:
            return name in _snapshot_entries(self.session.dir / "snapshot")

        if stored():
            self.violation("enospc_not_injected", i=i, name=name)
            return False
        res = self.agent.executor.execute("pass", timeout=60)
        if res.status != "ok" or not stored():
            self.violation("snapshot_after_enospc", i=i, name=name, status=res.status,
                           out=res.shaped[-300:])
            return False
        return True

    def _commit(self, expect: dict[str, Any]) -> None:
        if "commit" in expect:
            self.ledger.update(expect["commit"])
            emit(commit=expect["commit"])
        if "fragile" in expect:
            self.fragile |= set(expect["fragile"])
            emit(fragile=expect["fragile"])

    def _check_read(self, name: str, shaped: str, action: Any) -> bool:
        line = next((ln for ln in shaped.splitlines() if ln.startswith("READ ")), None)
        want = canonical(self.ledger[name]["expected"])
        got = canonical(json.loads(line[5:])) if line else None
        if got != want:
            self.violation("read_mismatch", i=action and action["i"], name=name, got=got, want=want)
            return False
        return True

    def _check_forge(self, shaped: str, i: int) -> bool:
        """The cell's own report of its attempts: the user's config must not have been
        writable (the sandbox; without it the attack of issue 26 item 1). A log line it
        could append (no sandbox) is the next host's to refuse: the end checks look for
        any sign that a host obeyed it."""
        line = next((ln for ln in shaped.splitlines() if ln.startswith("FORGE ")), None)
        if line is None:
            self.violation("forge_no_report", i=i, tail=shaped[-300:])
            return False
        tries = json.loads(line[len("FORGE "):])
        if tries.get("config") == "written":
            self.violation("cell_wrote_user_config", i=i, tries=tries)
            return False
        return True

    def _check_replay_destructive(self, expect: dict[str, Any], i: int) -> bool:
        """replay_destructive: restart the kernel now; its replay must not re-run the cell
        (the victim keeps its one line, nothing else outside $RLM_HOME changes) and the
        report names the cell and why. The cell's own first effect is then undone, so
        the end-of-run check of everything outside $RLM_HOME stays exact."""
        from bench.soak_checks import check_outside, tree_state
        from rlm.kernel.runtime import socket_base

        home = Path(self.config.home)
        # the new kernel's connection files (XDG_RUNTIME_DIR) are the restart's, not the replay's
        runtime = os.environ.get("XDG_RUNTIME_DIR")
        skip = (home, home.parent / "harness", *([Path(runtime)] if runtime else []))
        victim, name = Path(expect["replay_victim"]), expect["replay_name"]
        aliased = bool(expect.get("aliased"))
        first = victim.read_text() if victim.exists() else None
        # nor is the fallback dir of its unix sockets (`rlm-*` under a short TMPDIR)
        sockets = str(socket_base() / "rlm-")

        def state() -> dict[str, Any]:
            return {p: v for p, v in tree_state([home.parent], skip=skip).items()
                    if not p.startswith(sockets)}

        before = state()
        rep = self.agent.executor.restart("soak: replay of a destructive cell")
        # before any cell of the new kernel: its cell records file, once opened for
        # appending, stays open, and a mount with a file open for writing cannot be made
        # read-only (replay itself runs at the restart, before any cell)
        forced = self._forced_replay(expect["aliased"]) if aliased else ""
        touched = check_outside(before, state())
        self._restarted({d["name"] for d in rep.failed + rep.skipped}, "replay_destructive")
        why = rep.not_replayed.get(name, "")
        after = victim.read_text() if victim.exists() else None
        if aliased:
            # a spelling the planner may not know: whether it refused the cell or replayed
            # it, and when the harness re-runs it as a replay would, the read-only mounts
            # must keep the write from landing
            ok = first == "ran\n" and after == first and not touched and "refused" not in forced
            emit(note=f"aliased_replay at {i}: planner: " + (
                f"not replayed ({why[:100]})" if why else
                f"replayed (rebuilt {sorted(rep.rebuilt)}, failed "
                f"{[d['name'] for d in rep.failed]})") + f"; forced under the mounts: {forced}")
        else:
            ok = (first == "ran\n" and not touched and name not in rep.rebuilt
                  and why.startswith("cell "))
        if not ok:
            self.violation("aliased_replay" if aliased else "replay_destructive", i=i,
                           first=first, after=after, touched=touched[:1],
                           rebuilt=sorted(rep.rebuilt), why=why[:300])
        victim.unlink(missing_ok=True)
        return ok

    def _forced_replay(self, code: str) -> str:
        """What a replay the planner allowed would do: `code` run silently under the
        read-only mounts replay runs under (Kernel._rebuild: the runtime's read_only()).
        Returns how it ended: 'ran' (the mounts did not stop it), the error, or 'refused'."""
        kernel = self.agent.executor
        expr = (f"(lambda ns: (exec(compile({code!r}, '<forced replay>', 'exec'), ns), "
                "'ran')[1])({})")
        with kernel._runtime().read_only() as refused:
            if refused:
                return f"refused: {refused}"
            try:
                return kernel._expression(expr, 60.0)
            except Exception as e:
                return f"{type(e).__name__}: {str(e)[-160:]}"

    def _check_boundary(self, expect: dict[str, Any], shaped: str, status: str, i: int) -> bool:
        """What a boundary cell's own report says it reached (bench.soak_boundary); the
        parent then checks every host file (Soak.check_host_files). What the cell left in
        the working folder is removed after (the end-of-run check of it stays exact)."""
        from bench.soak_boundary import GATE_FILES, PLANTED_CWD, SITE_MARK, report_problems

        kind = expect["boundary"]
        bad = report_problems(kind, shaped, status, expect, os.environ.get("OPENAI_API_KEY", ""))
        report = _report(shaped, "PLANT") if kind == "planted_links" else None
        if kind == "planted_links":
            for d in PLANTED_CWD:
                _remove(Path.cwd() / d)
            if report is not None:
                planted = sum(1 for k, v in report.items() if k.startswith("symlink") and v == "ok")
                emit(note=f"planted_links at {i} ({expect['trigger']}): {planted} links planted")
        elif kind == "gate_tamper":
            runs = [r["by"] for r in _reports(shaped, "GATE")]
            emit(note=f"gate_tamper at {i}: the gate ran {runs}")
            for name in (*GATE_FILES, expect["mark"]):
                (Path.cwd() / name).unlink(missing_ok=True)
            _remove(Path.cwd() / "__pycache__")
        elif kind == "site_packages_write":
            for what, v in (_report(shaped, "SITE") or {}).items():
                verb, _, where = what.partition(" ")
                if v != "ok":
                    continue
                if verb in ("pth", "module"):  # undone at once: never left on this machine
                    ext = ".pth" if verb == "pth" else ".py"
                    Path(where, f"{SITE_MARK}_{i}{ext}").unlink(missing_ok=True)
                elif verb == "append":
                    text = Path(where).read_text()
                    Path(where).write_text(text.replace(f"\n# {SITE_MARK}\n", ""))
        if bad:
            self.violation(f"{kind}_reached", i=i, what=bad[:20])
        return not bad

    def on_restart(self, ev: Any) -> None:
        self._restarted(set(ev.lost), ev.cause)

    def _restarted(self, lost: set[str], cause: str) -> None:
        gone = sorted(self.fragile)
        unreported = [n for n in gone if n not in lost and n in self.ledger]
        if unreported:
            self.violation("fragile_not_reported", names=unreported)
        self.fragile.clear()
        for n in gone:
            self.ledger.pop(n, None)
        if gone:
            emit(drop=gone)
        emit(kernel=self.agent.executor.pid)
        self.check_ledger(f"restart ({cause})")

    def _read_only_home(self, i: int) -> None:
        """readonly_home, host side: from now until this host stops, opening a file under
        $RLM_HOME for writing fails with EROFS, and so does the session log's write."""
        import builtins

        home = str(self.config.home)
        real_open, real_bopen = os.open, builtins.open

        def under(path: Any) -> bool:
            try:
                return os.path.abspath(os.fsdecode(os.fspath(path))).startswith(home)
            except TypeError:
                return False

        def ro_open(path: Any, flags: int, *a: Any, **k: Any) -> int:
            if under(path) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
            return real_open(path, flags, *a, **k)

        def ro_bopen(file: Any, mode: str = "r", *a: Any, **k: Any) -> Any:
            if under(file) and any(c in mode for c in "wax+"):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(file))
            return real_bopen(file, mode, *a, **k)

        os.open, builtins.open = ro_open, ro_bopen  # type: ignore[assignment]
        self._fail_appends("readonly_home", i, errno.EROFS, sticky=True)

    def stopped(self, err: BaseException) -> None:
        """The host met its planned disk fault: check the log took nothing partial,
        report, and stop (the parent starts the next host, which resumes)."""
        import builtins

        import rlm.durability as st
        from rlm.errors import RlmError

        kind, i, fake = self.stop_fault  # type: ignore[misc]
        os.open, builtins.open = _REAL_OPEN, _REAL_BOPEN  # type: ignore[assignment]
        st.os = fake.real
        data = self.session.path.read_bytes()
        whole = data.endswith(b"\n") and (fake.size is None or len(data) == fake.size)
        oneline = isinstance(err, RlmError) and "\n" not in str(err)
        ok = whole and oneline
        if not ok:
            self.violation("disk_fault_handling", i=i, kind=kind, whole_lines=whole,
                           error=f"{type(err).__name__}: {err}"[:400])
        self.check_compactions()  # one appended before the stop is this host's to check
        emit(stopped=kind, i=i, ok=ok, detail=f"{type(err).__name__}: {err}"[:300])

    # ----------------------------------------------------------------- checks
    def check_ledger(self, why: str) -> bool:
        names = {n: r for n, r in self.ledger.items() if r["restorable"]}
        items, ok = sorted(names.items()), True
        for k in range(0, len(items), 40):
            chunk = dict(items[k:k + 40])
            res = self.agent.executor.execute(check_code(chunk), timeout=120)
            line = next((ln for ln in res.shaped.splitlines() if ln.startswith("LEDGER ")), None)
            if res.status != "ok" or line is None:
                self.violation("ledger_check_failed", why=why, status=res.status, out=res.shaped[-400:])
                return False
            got = json.loads(line[7:])
            for n, rec in chunk.items():
                if canonical(got.get(n)) != canonical(rec["expected"]):
                    ok = False
                    lost = got.get(n) == "<MISSING>"
                    self.violation("name_lost" if lost else "value_changed", why=why, name=n,
                                   got=str(got.get(n))[:200], want=str(rec["expected"])[:200])
        return ok

    def check_compactions(self) -> None:
        from rlm.session.entries import CustomEntry

        while self.pending_compactions:
            cid = self.pending_compactions.pop(0)
            state = next((e for e in self.session.entries if isinstance(e, CustomEntry)
                          and e.custom_type == "ipython_state" and e.parent_id == cid), None)
            live = {n for n, r in self.ledger.items() if r["restorable"]} | self.fragile
            if state is None:
                self.violation("no_ipython_state", compaction=cid)
                emit(compaction=cid, ok=False)
                continue
            listed = {n["name"]: n for n in state.data.get("names", [])}
            missing = sorted(live - set(listed))
            wrong = sorted(n for n in self.fragile if n in listed and listed[n].get("restorable"))
            if missing or wrong:
                self.violation("ipython_state_incomplete", compaction=cid, missing=missing[:20],
                               fragile_marked_restorable=wrong)
            emit(compaction=cid, ok=not (missing or wrong))

    # -------------------------------------------------------------------- run
    def run(self) -> None:
        from rlm.session.entries import CustomEntry

        with self.agent:
            emit(kernel=self.agent.executor.pid)
            self.fragile.clear()  # a new kernel: nothing unpicklable survived
            ok = self.check_ledger("host start") if self.s.get("session") else True
            emit(started=self.s["start"], ok=ok, names=len(self.ledger))
            i = self.s["start"]
            while i < len(self.plan):
                if self.plan[i]["kind"] == "tick":
                    self.tick(self.plan[i], CustomEntry)
                    emit(done=i)
                    i += 1
                    continue
                j = i
                while j < len(self.plan) and self.plan[j]["kind"] != "tick":
                    j += 1
                self.llm.queue.extend(self.plan[i:j])
                self.drive(f"Soak step {i}: continue with the plan.")
                i = j
        emit(finished=True, rss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)

    def drive(self, prompt: str) -> None:
        while self.llm.queue:
            self.agent.config.max_turns = len(self.llm.queue)
            try:
                for ev in self.agent.run(prompt):
                    self.handle(ev)
            except (OSError, Exception) as e:
                if self.stop_fault is None:
                    raise
                self.stopped(e)
                raise SystemExit(STOPPED) from None
            self.finish_current()
        self.check_compactions()

    def tick(self, action: dict[str, Any], entry_cls: Any) -> None:
        """Advance the fake clock; claim, deliver (a model turn), confirm every due tick."""
        self.clock.set(clock_at(self.plan, action["i"]) + action["advance"])
        for tick in self.sched.due(self.clock.now()):
            claimed = self.sched.claim(tick)
            if claimed is None:
                continue
            emit(claim=claimed.tick_id, job=claimed.job_id, count=claimed.count)
            if "host_tick" in self.arm:
                killme("host_tick", self.arm["host_tick"])
            self.session.append(entry_cls(custom_type=claimed.custom_type, display=True, data={
                "tick_id": claimed.tick_id, "count": claimed.count,
                "scheduled_for": claimed.scheduled_for}, content=None))
            self.llm.queue.append({"kind": "filler", "i": action["i"], "nodone": True})
            self.drive(claimed.message())
            self.sched.mark_delivered(claimed.tick_id)
            emit(tick=claimed.tick_id, job=claimed.job_id, count=claimed.count)


def _remove(path: Path) -> None:
    """A file, link or tree (links are removed, never followed)."""
    import shutil

    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.is_dir():
        shutil.rmtree(path, ignore_errors=True)


def _unbounded_gate_refusals(agent: Any) -> None:
    """gate_tamper's gate always fails (the goal must stay active): its refusals must never
    block the goal. The soak raises the bound of the GoalGate the composition root gave
    the goal manager (reached through the goal.complete handler: it keeps no other
    reference)."""
    from rlm.longrun.goals import GoalManager

    handler = agent.handlers.get("goal.complete")
    for cell in getattr(handler, "__closure__", None) or ():
        goals = cell.cell_contents
        if isinstance(goals, GoalManager) and goals.gate is not None:
            goals.gate.max_failures = 10**9


def secret_files(root: Path, secret: str) -> list[str]:
    """Files under `root` holding `secret` in UTF-8, UTF-16-LE or UTF-32-LE."""
    from bench.soak_checks import files_with_secret

    return files_with_secret(root, secret) if secret else []


_REAL_OPEN = os.open
_REAL_BOPEN = open


def _snapshot_manifest(snap: Path) -> dict[str, Any]:
    """The manifest a restore reads (manifest.json and its journal); {} when unreadable."""
    from kernel_ext.snapshot_store import LocalStore

    try:
        manifest, _ = LocalStore(str(snap)).read_manifest()
    except (OSError, ValueError):
        return {}
    return manifest or {}


def _snapshot_entries(snap: Path) -> dict[str, Any]:
    return _snapshot_manifest(snap).get("entries", {})


def _snapshot_generation(snap: Path) -> int:
    return int(_snapshot_manifest(snap).get("generation", 0))


def _kill_quietly(pid: int | None) -> None:
    try:
        if pid:
            os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def _kill_in_snapshot(pid: int, snap: Path, stop: threading.Event) -> None:
    """SIGKILL the kernel as soon as a data file of a new snapshot generation appears."""
    gen = _snapshot_generation(snap)
    while not stop.is_set():
        try:
            names = os.listdir(snap)
        except OSError:
            names = []
        if any(n.startswith("g") and n.endswith(".bin") and int(n[1:9]) > gen for n in names
               if n[1:9].isdigit()):
            _kill_quietly(pid)
            emit(note="killed the kernel inside a snapshot write")
            return
        time.sleep(0.001)


def main() -> None:
    global _OUT
    _OUT = os.dup(1)
    os.dup2(2, 1)  # anything else printed goes to stderr, never into the protocol
    state = json.loads(Path(sys.argv[1]).read_text())
    os.environ["RLM_HOME"] = state["home"]
    child = Child(state)
    child.build()
    try:
        child.run()
    finally:
        if child.sink.raw:
            emit(violation={"kind": "raw_control_in_terminal", "count": len(child.sink.raw),
                            "sample": [repr(t) for t in child.sink.raw[:3]]})


if __name__ == "__main__":
    main()
