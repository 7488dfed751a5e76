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
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.soak_model import PlanLLM, Summarizer
from bench.soak_plan import CRON, HEARTBEAT_S, canonical, check_code, clock_at

_OUT = -1


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

    # ------------------------------------------------------------------ setup
    def open_session(self) -> Any:
        from rlm.session.store import SessionStore

        if self.s.get("session"):
            session = SessionStore.open(self.s["session"])
            if session.recovered is not None:
                emit(note=f"torn tail recovered into {session.recovered.name}")
        else:
            session = SessionStore.create(Path(self.s["home"]), model="soak-plan", task="soak")
            emit(session=str(session.path))
        orig = session.append

        def append(entry: Any) -> Any:
            self._maybe_tear(session, entry)
            out = orig(entry)
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

        def torn(line: bytes) -> None:
            if session._fd is None:
                session._fd = os.open(session.path, os.O_WRONLY | os.O_APPEND)
            os.write(session._fd, line[: len(line) // 2])
            os.fsync(session._fd)
            killme("host_append", self.arm.pop("host_append"))

        session._write = torn

    def build(self) -> None:
        from rlm.agent import Agent
        from rlm.app import attach_compaction
        from rlm.longrun.goals import GoalManager, attach_goals
        from rlm.longrun.schedule import Scheduler

        self.session = self.open_session()
        self.llm = PlanLLM(self.s["seed"], lambda: self.ledger, self.on_action)
        self.summarizer = Summarizer(lambda: sorted(self.ledger))
        self.agent = Agent(self.session, self.config, llm=self.llm,
                           llm_factory=lambda spec: self.summarizer)
        attach_compaction(self.agent)
        self.goals = GoalManager(self.session, self.clock)
        self.sched = Scheduler(self.session.dir / "scheduled-jobs.json", self.clock)
        if not self.s.get("session"):
            self.goals.set("Keep the soak ledger correct through every fault.")
            self.sched.add(f"every {int(HEARTBEAT_S)}s", "report progress", heartbeat=True, label="hb")
            self.sched.add(CRON, "checkpoint the ledger", label="cron")
        attach_goals(self.agent, self.goals)
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
        if action is not None and not action.get("nodone"):
            emit(done=action["i"])
        emit(rss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)

    def violation(self, kind: str, **detail: Any) -> None:
        self.fault_violations += 1
        emit(violation={"kind": kind, **detail})

    # ------------------------------------------------------------------ events
    def handle(self, ev: Any) -> None:
        from rlm.events import CellFinished, CellStarted, KernelRestarted

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
        if res.status == "ok":
            self._commit(expect)
            if "read" in expect:
                ok = self._check_read(expect["read"], ev.shaped, action) and ok
        if action is not None and (expect.get("status") != "ok" or "fragile" in expect
                                   or "elided" in expect or kind == "broken_code"):
            emit(fault=kind, i=action["i"], ok=ok, detail=res.status)

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

    def on_restart(self, ev: Any) -> None:
        lost = set(ev.lost)
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
        self.check_ledger(f"restart ({ev.cause})")

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
            for ev in self.agent.run(prompt):
                self.handle(ev)
            self.finish_current()
        self.check_compactions()

    def tick(self, action: dict[str, Any], entry_cls: Any) -> None:
        """Advance the fake clock; claim, deliver (a model turn), confirm every due tick."""
        self.clock.set(clock_at(self.plan, action["i"]) + action["advance"])
        for tick in self.sched.due(self.clock.now()):
            claimed = self.sched.claim(tick)
            if claimed is None:
                continue
            emit(claim=claimed.tick_id, count=claimed.count)
            if "host_tick" in self.arm:
                killme("host_tick", self.arm["host_tick"])
            self.session.append(entry_cls(custom_type=claimed.custom_type, display=True, data={
                "tick_id": claimed.tick_id, "count": claimed.count,
                "scheduled_for": claimed.scheduled_for}, content=None))
            self.llm.queue.append({"kind": "filler", "i": action["i"], "nodone": True})
            self.drive(claimed.message())
            self.sched.mark_delivered(claimed.tick_id)
            emit(tick=claimed.tick_id, job=claimed.job_id, count=claimed.count)


def _kill_quietly(pid: int | None) -> None:
    try:
        if pid:
            os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def _kill_in_snapshot(pid: int, snap: Path, stop: threading.Event) -> None:
    """SIGKILL the kernel as soon as a data file of a new snapshot generation appears."""
    manifest = snap / "manifest.json"
    try:
        gen = json.loads(manifest.read_text())["generation"]
    except (OSError, ValueError, KeyError):
        gen = 0
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
    child.run()


if __name__ == "__main__":
    main()
