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
import site
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench import soak_checks
from bench.soak_child import STOPPED
from bench.soak_model import FORGE_MARK
from bench.soak_plan import (
    BOUNDARY_FAULTS,
    FAULT_RATE,
    FAULTS,
    GATE_SCRIPT,
    HOME_CANARY,
    HOST_FAULTS,
    OTHER_CANARY,
    OTHER_SESSION,
    make_plan,
    secret_key,
)

REPO = Path(__file__).resolve().parents[1]
CONFIG = {"context_window": 6000, "reserve_tokens": 1500, "keep_recent_tokens": 1500,
          "cell_timeout": 60.0, "interrupt_grace_s": 1.0, "memory_cap_bytes": 6 * 2**30}
MAX_HOST_FAILURES = 3
PROGRESS_S = 60.0
# the run's --gate (gate_tamper writes the script; goal.complete('done') runs it)
GATE = f"{sys.executable} {GATE_SCRIPT}"
AGENT_SOCKET = "soak-agent.sock"  # a listening socket in XDG_RUNTIME_DIR no cell may reach
XDG = ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME",
       "XDG_RUNTIME_DIR")


class Soak:
    """`root` holds everything of the run: rlm/ ($RLM_HOME), harness/ (the parent's own
    files), and the hosts' HOME, TMPDIR, XDG dirs and cwd, which must end as they began."""

    def __init__(self, turns: int, seed: int, root: Path, log: Any = sys.stderr,
                 progress: Path | None = None, fault_rate: float = FAULT_RATE,
                 tiers: bool = True, checkpoint: bool = True):
        self.turns, self.seed, self.root, self.log = turns, seed, root, log
        self.config = {**CONFIG, "context_tiers": tiers}
        if not checkpoint:  # the soak's compaction model counts as hosted: rungs by default
            self.config["checkpoint_rungs"] = []
        self.home = root / "rlm"
        self.harness = root / "harness"
        self.progress_path, self.last_progress = progress, time.monotonic()
        self.secret = secret_key(seed)
        self.env_dirs = {"HOME": root / "home", "TMPDIR": root / "tmp",
                         **{k: root / "xdg" / k[4:].lower() for k in XDG}}
        self.cwd = root / "cwd"
        self.outside_before: dict[str, Any] = {}
        self.host_before: dict[str, Any] = {}
        self.other = self.home / "sessions" / OTHER_SESSION
        self.socket_hits = self.socket_seen = 0
        self.host_changed: set[str] = set()
        self.sched_pending: dict[str, int] = {}
        self.sched_claimed: set[str] = set()
        self.stopped = False
        self.stop_requested = False
        self.end_checked = False
        self.t0 = time.monotonic()
        self.fault_rate = fault_rate
        self.plan = make_plan(seed, turns, fault_rate)
        self.plan_path = self.harness / "soak-plan.json"
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
        self.checked_compactions: set[str] = set()  # ids a host checked (rlm ipython_state)
        self.peak_rss_kib = 0
        self.kernel_pid: int | None = None
        self.failures: Counter[int] = Counter()

    # ---------------------------------------------------------------- driving
    def run(self) -> dict[str, Any]:
        self.t0 = t0 = time.monotonic()
        for d in (self.home, self.harness, self.cwd, *self.env_dirs.values()):
            d.mkdir(parents=True, exist_ok=True)
        os.chmod(self.env_dirs["XDG_RUNTIME_DIR"], 0o700)
        for d in self.host_records():  # before `outside`
            d.mkdir(parents=True, mode=0o700, exist_ok=True)
        self.plan_path.write_text(json.dumps(self.plan))
        self.plant_host_files()
        self.outside_before = self.outside()
        self.host_before = self.host_files()
        self.settings_before = self.settings()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.request_stop)
        while self.next < len(self.plan) and not self.stop_requested:
            start = self.next
            self.host()
            if self.next == start:  # no progress: the host crashed at this action
                self.failures[start] += 1
                if self.failures[start] >= MAX_HOST_FAILURES:
                    self.violate({"kind": "stuck", "action": start, "plan": self.plan[start]})
                    self.next += 1
        self.final_checks()
        self.stats["wall_s"] = round(time.monotonic() - t0, 1)
        return self.report()

    def request_stop(self, *_: Any) -> None:
        self.stop_requested = True

    def outside(self) -> dict[str, Any]:
        # the host's run records (rlm.trust: the copy of each session's security options a
        # cell cannot write) and its shown-once notice markers (rlm.trust.first_time) live in
        # the user's rlm config dir by design, outside $RLM_HOME
        # ./rlm.toml: the forge_control cell writes it (the kernel may write its working
        # folder); what counts is that no host takes its settings (`settings_changed`)
        return soak_checks.tree_state([self.root],
                                      skip=(self.home, self.harness, *self.host_records(),
                                            self.cwd / "rlm.toml"))

    def plant_host_files(self) -> None:
        """What the boundary faults aim at, made before the run: a canary in HOME, the
        user's config.toml (a comment only), a file in the user's config dir, another
        session (a log holding OTHER_CANARY, a connection file, a pid) and a listening
        unix socket in XDG_RUNTIME_DIR (an agent's), whose connections are counted."""
        (self.env_dirs["HOME"] / HOME_CANARY).write_text("soak canary: no host writes here\n")
        (self.home / "config.toml").write_text("# the user's config (soak): a link target\n")
        config = self.env_dirs["XDG_CONFIG_HOME"] / "rlm"
        config.mkdir(parents=True, exist_ok=True)
        (config / "notes.txt").write_text("the user's config dir (soak)\n")
        (self.other / "host").mkdir(parents=True, exist_ok=True)
        (self.other / "session.jsonl").write_text(json.dumps(
            {"type": "session", "id": OTHER_SESSION, "task": OTHER_CANARY}) + "\n")
        (self.other / "host" / "kernel-0th3r.json").write_text(json.dumps(
            {"transport": "ipc", "key": OTHER_CANARY, "signature_scheme": "hmac-sha256"}))
        (self.other / "host" / "kernel.pid").write_text("1\n")
        path = self.env_dirs["XDG_RUNTIME_DIR"] / AGENT_SOCKET
        if len(os.fsencode(path)) < 100:
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(str(path))
            listener.listen(8)
            threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            conn, _ = listener.accept()
            self.socket_hits += 1
            conn.close()

    def host_files(self) -> dict[str, Any]:
        """Every host file a kernel must not change (soak_checks.check_host_files): HOME
        (outside the cwd), $RLM_HOME but its sessions and cache/ (the kernel's matplotlib
        cache, read-write in the sandbox), another session, the user's config dir but the
        host's run records, with digests; the interpreter's site-packages and rlm's
        source, by size and times."""
        small = soak_checks.tree_state(
            [self.env_dirs["HOME"], self.home, self.other, self.env_dirs["XDG_CONFIG_HOME"]],
            # cache/: the host makes it for the kernel's matplotlib cache (read-write)
            skip=(self.home / "sessions", self.home / "cache",
                  *self.host_records()), digest=True)
        code = [*site.getsitepackages(), site.getusersitepackages(), REPO / "rlm",
                REPO / "kernel_ext"]
        return {**small, **soak_checks.tree_state([Path(p) for p in code])}

    def check_host_files(self, why: str) -> list[dict[str, Any]]:
        """check_host_files against the last state; what changed is counted once (in
        `host_changed`) and the next check starts from now."""
        after = self.host_files()
        bad = soak_checks.check_host_files(self.host_before, after)
        before, self.host_before = self.host_before, after
        self.host_changed |= {p for p in before.keys() | after.keys()
                              if before.get(p) != after.get(p)}
        if self.socket_hits > self.socket_seen:
            bad.append({"kind": "unix_socket_reached", "socket": AGENT_SOCKET,
                        "connections": self.socket_hits - self.socket_seen})
            self.socket_seen = self.socket_hits
        for v in bad:
            self.violate({**v, "when": why})
        return bad

    def settings(self) -> dict[str, Any]:
        """The security-relevant settings a host started now would run with: the config as
        `rlm run` loads it, in the soak's working folder, with the host's environment."""
        env = dict(os.environ, RLM_HOME=str(self.home), PYTHONPATH=str(REPO),
                   **{k: str(v) for k, v in self.env_dirs.items()})
        return soak_checks.security_settings(self.cwd, env)

    def host_records(self) -> tuple[Path, ...]:
        config = self.env_dirs["XDG_CONFIG_HOME"] / "rlm"
        return config / "runs", config / "shown"

    def final_checks(self) -> None:
        if self.stop_requested:  # cut short: a job added lately may not be due yet
            self.stats["sched_idle_pending_at_cut"] = len(self.sched_pending)
            self.sched_pending.clear()
        for job, i in sorted(self.sched_pending.items()):
            self.faults["sched_idle"]["failed"] += 1
            self.violate({"kind": "scheduled_job_not_delivered", "job": job, "added_at": i})
        self.sched_pending.clear()
        for v in soak_checks.check_forged(self.home, self.cwd, FORGE_MARK):
            self.faults["forge_control"]["failed"] += 1
            self.violate({**v, "when": "end of run"})
        changed = soak_checks.check_settings(self.settings_before, self.settings())
        self.stats["settings_changed"] = changed[0]["count"] if changed else 0
        for v in changed:
            self.violate({**v, "when": "end of run"})
        self.check_host_files("end of run")
        self.stats["host_files_changed"] = len(self.host_changed) + self.socket_hits
        secret_bad = soak_checks.check_secrets(self.home, self.secret)
        outside_bad = soak_checks.check_outside(self.outside_before, self.outside())
        self.end_checked = True
        self.stats["secret_files"] = secret_bad[0]["count"] if secret_bad else 0
        self.stats["outside_changes"] = outside_bad[0]["count"] if outside_bad else 0
        for v in secret_bad + outside_bad:
            self.violate({**v, "when": "end of run"})

    def host(self) -> None:
        state = {"home": str(self.home), "session": self.session, "plan": str(self.plan_path),
                 "start": self.next, "ledger": self.ledger, "fragile": self.fragile,
                 "seed": self.seed, "config": self.config, "fired": self.fired,
                 "armed": self.armed, "gate": [GATE]}
        state_path = self.harness / "soak-state.json"
        state_path.write_text(json.dumps(state))
        env = dict(os.environ, RLM_HOME=str(self.home), PYTHONPATH=str(REPO),
                   LITELLM_LOCAL_MODEL_COST_MAP="True", OPENAI_API_KEY=self.secret,
                   **{k: str(v) for k, v in self.env_dirs.items()})
        env.pop("IPYTHONDIR", None)
        env.pop("MPLCONFIGDIR", None)
        proc = subprocess.Popen([sys.executable, "-m", "bench.soak_child", str(state_path)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                cwd=str(self.cwd))
        self.stats["hosts"] += 1
        self.stopped = False
        killed = self.pump(proc)
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        proc.wait()
        if self.stopped and proc.returncode == STOPPED:
            self.stats["hosts_stopped"] += 1
        elif not killed and proc.returncode != 0:
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
            if self.stop_requested:  # cut short: the host goes, the end checks still run
                proc.send_signal(signal.SIGKILL)
                self.say(f"stopped by a signal at action {self.next}")
                return "stop"
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
                    if kind == "host_tick":
                        # an idle job claimed, then its delivery cut by the planned kill:
                        # at most once, it is not replayed (check_ticks) -- it did fire
                        for job in sorted(self.sched_claimed & self.sched_pending.keys()):
                            self.sched_pending.pop(job)
                            self.faults["sched_idle"]["survived"] += 1
                            self.stats["sched_idle_interrupted"] += 1
                    return kind

    def on_message(self, m: dict[str, Any]) -> tuple[str, float, int] | None:
        if "armed" in m:
            self.armed[m["armed"]] = m["i"]
        if "ack" in m:
            self.acked.add(m["ack"])
        if "done" in m:
            self.next = max(self.next, m["done"] + 1)
            self.progress()
        if "stopped" in m:
            kind = m["stopped"]
            self.stopped = True
            self.fired.append(int(m["i"]))
            self.faults[kind]["injected"] += 1
            if m["ok"]:
                self.pending_host.append((kind, self.next))
            else:
                self.faults[kind]["failed"] += 1
            self.say(f"host stopped ({kind}) at action {m['i']}: {m.get('detail')}")
        if "sched_added" in m:
            self.faults["sched_idle"]["injected"] += 1
            self.fired.append(int(m["i"]))
            self.sched_pending[m["sched_added"]] = int(m["i"])
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
        if "claim" in m and m.get("job") in self.sched_pending:
            self.sched_claimed.add(m["job"])
        if "tick" in m:
            if m.get("job") in self.sched_pending:
                self.sched_pending.pop(m["job"])
                self.faults["sched_idle"]["survived"] += 1
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
            self.checked_compactions.add(str(m["compaction"]))
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
        if kind in BOUNDARY_FAULTS:
            ok = not self.check_host_files(f"after {kind} at {m['i']}") and ok
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

    def progress(self, force: bool = False) -> None:
        """Every PROGRESS_S: one line, and the figures so far to `progress_path` (a run cut
        short can still be read)."""
        now = time.monotonic()
        if not force and now - self.last_progress < PROGRESS_S:
            return
        self.last_progress = now
        self.stats["wall_s"] = round(now - self.t0, 1)
        r = self.report()
        injected = sum(c.get("injected", 0) for c in r["faults"].values())
        survived = sum(c.get("survived", 0) for c in r["faults"].values())
        self.say(f"progress: action {self.next}/{len(self.plan)}, faults {injected} injected "
                 f"/ {survived} survived, compactions {r['compactions']}, hosts {r['hosts']}, "
                 f"violations {len(r['violations'])}, {r['wall_s']:.0f} s")
        if self.progress_path is not None:
            r["partial"] = {"next_action": self.next, "of": len(self.plan)}
            self.progress_path.parent.mkdir(parents=True, exist_ok=True)
            self.progress_path.write_text(json.dumps(r, indent=1, default=str) + "\n")

    def say(self, text: str) -> None:
        if self.log is not None:
            print(f"[soak] {text}", file=self.log, flush=True)

    # ---------------------------------------------------------------- report
    def report(self) -> dict[str, Any]:
        path = Path(self.session) if self.session else None
        names_lost = sum(1 for v in self.violations if v["kind"] in ("name_lost", "value_changed"))
        return {
            "turns": self.turns, "seed": self.seed, "fault_rate": self.fault_rate,
            "completed_actions": self.next, "cut_short": self.stop_requested,
            "actions": len(self.plan),
            "faults": {k: dict(c) for k, c in self.faults.items()},
            "violations": self.violations,
            "entries_lost": self.stats["entries_lost"], "duplicates": self.stats["duplicates"],
            "names_lost": names_lost,
            "compactions": soak_checks.count_compactions(path) if path and path.exists() else 0,
            # a compaction whose host was killed before it checked the names listed: only
            # its `ipython_state` record can be checked (`without_state`: not even that)
            **dict(zip(("compactions_record_only", "compactions_without_state"),
                       soak_checks.unchecked_compactions(path, self.checked_compactions)
                       if path and path.exists() else (0, 0), strict=True)),
            "tiers": soak_checks.tier_figures(path) if path and path.exists() else {},
            "context_tiers": self.config.get("context_tiers", True),
            "checkpoint_rungs": self.config.get("checkpoint_rungs"),
            # checked at the end only: None in a progress report
            "secret_files": self.stats["secret_files"] if self.end_checked else None,
            "outside_changes": self.stats["outside_changes"] if self.end_checked else None,
            "settings_changed": self.stats["settings_changed"] if self.end_checked else None,
            "host_files_changed": (self.stats["host_files_changed"] if self.end_checked
                                   else None),
            "hosts_stopped": self.stats["hosts_stopped"],
            "sched_idle_interrupted": self.stats["sched_idle_interrupted"],
            "sched_idle_pending_at_cut": self.stats["sched_idle_pending_at_cut"],
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
    rows = [f"{'fault':<22}{'injected':>9}{'survived':>9}{'failed':>7}"]
    for kind, c in r["faults"].items():
        tag = " (host)" if kind in HOST_FAULTS else ""
        rows.append(f"{kind + tag:<22}{c.get('injected', 0):>9}{c.get('survived', 0):>9}"
                    f"{c.get('failed', 0):>7}")
    rows.append("")
    for key in ("turns", "actions", "hosts", "hosts_stopped", "compactions", "entries", "entries_lost",
                "duplicates", "names_lost", "ledger_names", "ticks_delivered", "ticks_coalesced",
                "ticks_interrupted", "orphan_kernels", "disk_checks", "compaction_checks", "compactions_record_only",
                "secret_files", "outside_changes", "settings_changed", "wall_s",
                "host_peak_rss_mib"):
        rows.append(f"{key:<22}{r[key]}")
    for key, value in r.get("tiers", {}).items():
        rows.append(f"{key:<22}{value}")
    rows.append(f"host files changed through the kernel: {r['host_files_changed']}")
    rows.append(f"{'violations':<22}{len(r['violations'])}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=300)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--fault-rate", type=float, default=FAULT_RATE,
                    help="share of the other turns (first 80%%) that become a random fault")
    ap.add_argument("--out", type=Path, default=Path("bench/out/soak.json"))
    ap.add_argument("--home", type=Path, default=None,
                    help="the run's root (RLM_HOME is ROOT/rlm; HOME, TMPDIR, XDG dirs and the "
                    "cwd are under it too; default: temp)")
    ap.add_argument("--keep", action="store_true", help="keep the session files")
    ap.add_argument("--no-context-tiers", dest="tiers", action="store_false",
                    help="summaries only (no pruning or shaking): the baseline for the tiers")
    ap.add_argument("--no-checkpoint", dest="checkpoint", action="store_false",
                    help="no checkpoint written as the context fills (checkpoint_rungs = [])")
    args = ap.parse_args(argv)
    home = args.home or Path(tempfile.mkdtemp(prefix="rlm-soak-"))
    try:
        partial = args.out.with_name(args.out.stem + ".partial.json")
        result = Soak(args.turns, args.seed, home.absolute(), progress=partial,
                      fault_rate=args.fault_rate, tiers=args.tiers,
                      checkpoint=args.checkpoint).run()
    finally:
        if not args.keep:
            shutil.rmtree(home, ignore_errors=True)
    print(table(result))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    return 1 if result["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
