"""Soak run with fault injection: `python -m bench.soak --turns 300 --seed 7`.

The parent process plans the run (bench.soak_plan), runs the agent in host processes
(bench.soak_child) and keeps what must survive them: the acknowledged entry ids, the
ledger of names and values, the delivered ticks. When a host asks for it (a planned host
fault) the parent SIGKILLs it and starts the next one, which reopens the session and
continues after the last completed action. After every fault and every host exit it
checks the on-disk invariants (bench.soak_checks); the hosts check the kernel-side ones
(values after restarts, <ipython_state> after compactions). Violations are recorded, the
run goes on. Prints a table and writes JSON (`--out`). Exit status 1 on any violation.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench import soak_checks
from bench.soak_plan import FAULTS, HOST_FAULTS, make_plan

REPO = Path(__file__).resolve().parents[1]
CONFIG = {"context_window": 6000, "reserve_tokens": 1500, "keep_recent_tokens": 1500,
          "cell_timeout": 60.0, "interrupt_grace_s": 1.0, "memory_cap_bytes": 6 * 2**30}
MAX_HOST_FAILURES = 3


class Soak:
    def __init__(self, turns: int, seed: int, home: Path, log: Any = sys.stderr):
        self.turns, self.seed, self.home, self.log = turns, seed, home, log
        self.plan = make_plan(seed, turns)
        self.plan_path = home / "soak-plan.json"
        self.session: str | None = None
        self.acked: set[str] = set()
        self.ledger: dict[str, dict[str, Any]] = {}
        self.fragile: list[str] = []
        self.next = 0
        self.ticks: list[str] = []
        self.violations: list[dict[str, Any]] = []
        self.faults: dict[str, Counter[str]] = {k: Counter() for k in FAULTS}
        self.pending_host: list[tuple[str, int]] = []
        self.fired: list[int] = []  # actions whose host fault has fired (never twice)
        self.armed: dict[str, int] = {}  # host faults armed, waiting for their moment
        self.stats = Counter[str]()
        self.peak_rss_kib = 0
        self.kernel_pid: int | None = None
        self.failures: Counter[int] = Counter()

    # ---------------------------------------------------------------- driving
    def run(self) -> dict[str, Any]:
        t0 = time.monotonic()
        self.home.mkdir(parents=True, exist_ok=True)
        self.plan_path.write_text(json.dumps(self.plan))
        while self.next < len(self.plan):
            start = self.next
            self.host()
            if self.next == start:  # no progress: the host crashed at this action
                self.failures[start] += 1
                if self.failures[start] >= MAX_HOST_FAILURES:
                    self.violate({"kind": "stuck", "action": start, "plan": self.plan[start]})
                    self.next += 1
        self.stats["wall_s"] = round(time.monotonic() - t0, 1)
        return self.report()

    def host(self) -> None:
        state = {"home": str(self.home), "session": self.session, "plan": str(self.plan_path),
                 "start": self.next, "ledger": self.ledger, "fragile": self.fragile,
                 "seed": self.seed, "config": CONFIG, "fired": self.fired,
                 "armed": self.armed}
        state_path = self.home / "soak-state.json"
        state_path.write_text(json.dumps(state))
        env = dict(os.environ, RLM_HOME=str(self.home), PYTHONPATH=str(REPO),
                   LITELLM_LOCAL_MODEL_COST_MAP="True")
        proc = subprocess.Popen([sys.executable, "-m", "bench.soak_child", str(state_path)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                cwd=str(self.home))
        self.stats["hosts"] += 1
        killed = self.pump(proc)
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        proc.wait()
        if not killed and proc.returncode != 0:
            self.violate({"kind": "host_crashed", "rc": proc.returncode, "at": self.next,
                          "stderr": err[-1500:]})
        self.after_host(killed)

    def pump(self, proc: subprocess.Popen[bytes]) -> str | None:
        """Read the host's reports until it exits; SIGKILL it when it asks. Returns the
        fault kind when it was killed."""
        assert proc.stdout is not None
        fd, buf = proc.stdout.fileno(), b""
        while True:
            ready, _, _ = select.select([fd], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    return None
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                kill = self.on_message(json.loads(line))
                if kill is not None:
                    kind, delay, arm_i = kill
                    self.fired.append(arm_i)
                    self.armed.pop(kind, None)
                    time.sleep(delay)
                    proc.send_signal(signal.SIGKILL)
                    self.faults[kind]["injected"] += 1
                    self.pending_host.append((kind, self.next))
                    self.say(f"host SIGKILLed ({kind}) at action {self.next}")
                    return kind

    def on_message(self, m: dict[str, Any]) -> tuple[str, float, int] | None:
        if "armed" in m:
            self.armed[m["armed"]] = m["i"]
        if "ack" in m:
            self.acked.add(m["ack"])
        if "done" in m:
            self.next = max(self.next, m["done"] + 1)
        if "session" in m:
            self.session = m["session"]
        if "commit" in m:
            self.ledger.update(m["commit"])
        if "fragile" in m:
            self.fragile += m["fragile"]
        if "drop" in m:
            for n in m["drop"]:
                self.ledger.pop(n, None)
            self.fragile = [n for n in self.fragile if n not in m["drop"]]
        if "kernel" in m:
            self.kernel_pid = m["kernel"]
        if "rss" in m:
            self.peak_rss_kib = max(self.peak_rss_kib, int(m["rss"]))
        if "tick" in m:
            self.ticks.append(m["tick"])
            self.stats["ticks_delivered"] += 1
            self.stats["ticks_coalesced"] += m["count"] - 1
        if "interrupted_tick" in m:
            self.stats["ticks_interrupted"] += 1
        if "violation" in m:
            self.violate(m["violation"])
        if "fault" in m:
            self.on_fault(m)
        if "started" in m:
            self.on_started(m)
        if "compaction" in m:
            self.stats["compaction_checks"] += 1
        if "note" in m:
            self.say(m["note"])
        if "killme" in m:
            return m["killme"], float(m.get("delay") or 0.0), int(m["i"])
        return None

    def on_fault(self, m: dict[str, Any]) -> None:
        kind = m["fault"]
        if kind not in self.faults:
            return
        self.faults[kind]["injected"] += 1
        ok = bool(m["ok"]) and not self.check_disk(f"after {kind} at {m['i']}")
        self.faults[kind]["survived" if ok else "failed"] += 1

    def on_started(self, m: dict[str, Any]) -> None:
        bad = self.check_disk(f"host start at {m['started']}")
        for kind, _ in self.pending_host:
            self.faults[kind]["survived" if m["ok"] and not bad else "failed"] += 1
        self.pending_host.clear()

    # ---------------------------------------------------------------- checks
    def violate(self, v: dict[str, Any]) -> None:
        self.violations.append(v)
        self.say(f"VIOLATION {json.dumps(v, default=str)[:400]}")

    def check_disk(self, why: str) -> list[dict[str, Any]]:
        if self.session is None:
            return []
        path = Path(self.session)
        bad, counts = soak_checks.check_session(path, self.acked)
        bad += soak_checks.check_ticks(path, path.parent / "scheduled-jobs.json", self.ticks)
        bad += soak_checks.check_goal(path)
        self.stats["entries_lost"] = max(self.stats["entries_lost"], counts["lost"])
        self.stats["duplicates"] = max(self.stats["duplicates"], counts["duplicates"])
        self.stats["disk_checks"] += 1
        for v in bad:
            self.violate({**v, "when": why})
        return bad

    def after_host(self, killed: str | None) -> None:
        self.check_disk(f"host exit ({killed or 'normal'})")
        pid = self.kernel_pid
        if killed and pid:
            time.sleep(3.0)
            if _alive(pid):
                # the host's kernel outlived it: ipykernel did not notice its parent died
                self.stats["orphan_kernels"] += 1
                os.kill(pid, signal.SIGKILL)

    def say(self, text: str) -> None:
        if self.log is not None:
            print(f"[soak] {text}", file=self.log, flush=True)

    # ---------------------------------------------------------------- report
    def report(self) -> dict[str, Any]:
        path = Path(self.session) if self.session else None
        names_lost = sum(1 for v in self.violations if v["kind"] in ("name_lost", "value_changed"))
        return {
            "turns": self.turns, "seed": self.seed, "actions": len(self.plan),
            "faults": {k: dict(c) for k, c in self.faults.items()},
            "violations": self.violations,
            "entries_lost": self.stats["entries_lost"], "duplicates": self.stats["duplicates"],
            "names_lost": names_lost,
            "compactions": soak_checks.count_compactions(path) if path else 0,
            "ledger_names": len(self.ledger),
            "entries": len(self.acked),
            "hosts": self.stats["hosts"], "orphan_kernels": self.stats["orphan_kernels"],
            "ticks_delivered": self.stats["ticks_delivered"],
            "ticks_coalesced": self.stats["ticks_coalesced"],
            "ticks_interrupted": self.stats["ticks_interrupted"],
            "disk_checks": self.stats["disk_checks"],
            "compaction_checks": self.stats["compaction_checks"],
            "wall_s": self.stats["wall_s"], "host_peak_rss_mib": round(self.peak_rss_kib / 1024, 1),
        }


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] not in "ZX"
    except (OSError, IndexError):
        return False


def table(r: dict[str, Any]) -> str:
    rows = [f"{'fault':<14}{'injected':>9}{'survived':>9}{'failed':>7}"]
    for kind, c in r["faults"].items():
        tag = " (host)" if kind in HOST_FAULTS else ""
        rows.append(f"{kind + tag:<14}{c.get('injected', 0):>9}{c.get('survived', 0):>9}"
                    f"{c.get('failed', 0):>7}")
    rows.append("")
    for key in ("turns", "actions", "hosts", "compactions", "entries", "entries_lost",
                "duplicates", "names_lost", "ledger_names", "ticks_delivered", "ticks_coalesced",
                "ticks_interrupted", "orphan_kernels", "disk_checks", "compaction_checks",
                "wall_s", "host_peak_rss_mib"):
        rows.append(f"{key:<22}{r[key]}")
    rows.append(f"{'violations':<22}{len(r['violations'])}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=300)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path, default=Path("bench/out/soak.json"))
    ap.add_argument("--home", type=Path, default=None, help="RLM_HOME for the run (default: temp)")
    ap.add_argument("--keep", action="store_true", help="keep the session files")
    args = ap.parse_args(argv)
    home = args.home or Path(tempfile.mkdtemp(prefix="rlm-soak-"))
    try:
        result = Soak(args.turns, args.seed, home.absolute()).run()
    finally:
        if not args.keep:
            shutil.rmtree(home, ignore_errors=True)
    print(table(result))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    return 1 if result["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
