"""Invariants the soak parent checks on disk after every fault and every host exit.

Each check returns a list of violations (dicts with a "kind"); an empty list is a pass.
They read files only (the session is opened read-only), so they are safe while a host is
still writing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from bench.soak_plan import HEARTBEAT_S


class LogTail:
    """The session log's complete lines, read incrementally: each read parses only the bytes
    past the last one. The log is append-only and recovery only cuts a torn tail (which was
    never read as an entry), so a file replaced, cut shorter than what was read, or whose
    last read bytes changed is read again from the start. Entries keep only the fields the
    checks use (a long soak's log is tens of MB)."""

    GUARD = 64  # bytes before the read offset that must be unchanged

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rereads = 0  # times the file had to be read from the start again
        self.ino: int | None = None
        self._clear()

    def _clear(self) -> None:
        self.offset = 0
        self.guard = b""
        self.entries: list[dict[str, Any]] = []

    def read(self) -> list[dict[str, Any]]:
        with open(self.path, "rb") as f:
            st = os.fstat(f.fileno())
            if self.ino is not None and (
                    st.st_ino != self.ino or st.st_size < self.offset or self._moved(f)):
                self._clear()
                self.rereads += 1
            self.ino = st.st_ino
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        for raw in data[:end].split(b"\n")[:-1]:
            self.entries.append(_slim(raw))
        self.offset += end
        self.guard = (self.guard + data[:end])[-self.GUARD:]
        return self.entries

    def _moved(self, f: Any) -> bool:
        start = self.offset - len(self.guard)
        f.seek(start)
        return f.read(len(self.guard)) != self.guard


def _slim(raw: bytes) -> dict[str, Any]:
    try:
        e = json.loads(raw)
    except ValueError:
        return {"type": "<unparsable>", "data": {}}
    if not isinstance(e, dict):
        return {"type": "<unparsable>", "data": {}}
    data = e.get("data") if isinstance(e.get("data"), dict) else {}
    return {"id": e.get("id"), "parent_id": e.get("parent_id"), "type": e.get("type"),
            "custom_type": e.get("custom_type"),
            "data": {k: data[k] for k in ("tick_id", "goal") if k in data}}


_TAILS: dict[Path, LogTail] = {}


def raw_entries(path: Path) -> list[dict[str, Any]]:
    """Every complete line (a torn tail without its newline is not an entry), read
    incrementally across calls for the same path (LogTail)."""
    tail = _TAILS.get(path)
    if tail is None:
        tail = _TAILS[path] = LogTail(path)
    return tail.read()


def check_session(path: Path, acked: set[str]) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The file loads; every acknowledged id is there exactly once; parents exist."""
    from rlm.errors import RlmError
    from rlm.session.store import SessionStore

    bad: list[dict[str, Any]] = []
    try:
        SessionStore.open(path, readonly=True)
    except RlmError as e:
        bad.append({"kind": "session_load", "error": str(e)[:300]})
    entries = raw_entries(path)
    counts = Counter(e.get("id") for e in entries[1:])
    seen: set[str] = set()
    for n, e in enumerate(entries[1:], start=2):
        parent = e.get("parent_id")
        if parent is not None and parent not in seen:
            bad.append({"kind": "tree_parent_missing", "line": n, "parent_id": parent})
        seen.add(e.get("id"))
    lost = sorted(a for a in acked if counts.get(a, 0) == 0)
    dups = sorted(i for i, c in counts.items() if c > 1)
    if lost:
        bad.append({"kind": "entries_lost", "ids": lost[:20], "count": len(lost)})
    if dups:
        bad.append({"kind": "entries_duplicated", "ids": dups[:20], "count": len(dups)})
    return bad, {"entries": len(entries) - 1, "lost": len(lost), "duplicates": len(dups)}


def check_ticks(path: Path, jobs_path: Path, delivered: list[str]) -> list[dict[str, Any]]:
    """No tick delivered twice; missed instants coalesced (counts add up), never replayed."""
    bad: list[dict[str, Any]] = []
    twice = sorted(t for t, c in Counter(delivered).items() if c > 1)
    logged = [e["data"].get("tick_id") for e in raw_entries(path)
              if e.get("custom_type") in ("heartbeat_prompt", "cron_prompt")]
    twice_log = sorted(t for t, c in Counter(logged).items() if c > 1)
    if twice or twice_log:
        bad.append({"kind": "tick_delivered_twice", "reported": twice, "in_log": twice_log})
    if not jobs_path.exists():
        return bad
    state = json.loads(jobs_path.read_text())
    for job in state["jobs"]:
        ds = sorted((d for d in state["dispatches"] if d["job_id"] == job["id"]),
                    key=lambda d: d["claimed_at"])
        ids = [d["tick_id"] for d in ds]
        if len(set(ids)) != len(ids):
            bad.append({"kind": "tick_claimed_twice", "job": job["id"]})
        prev_claim = None
        for d in ds:
            if d["scheduled_for"] > d["claimed_at"] or (
                    prev_claim is not None and d["scheduled_for"] <= prev_claim):
                bad.append({"kind": "tick_replayed", "job": job["id"], "tick": d["tick_id"]})
            if job["kind"] == "heartbeat":
                want = int((d["claimed_at"] - d["scheduled_for"]) // HEARTBEAT_S) + 1
                if d["count_coalesced"] != want:
                    bad.append({"kind": "tick_not_coalesced", "tick": d["tick_id"],
                                "count": d["count_coalesced"], "want": want})
            prev_claim = d["claimed_at"]
        if job["kind"] == "heartbeat" and job["last_run_at"] is not None:
            covered = int((job["last_run_at"] - job["anchor"]) // HEARTBEAT_S)
            if job["ticks_total"] != covered:
                bad.append({"kind": "tick_accounting", "job": job["id"],
                            "ticks_total": job["ticks_total"], "instants": covered})
    return bad


def check_goal(path: Path) -> list[dict[str, Any]]:
    """The goal stays active; tokens, time and continuations never go down."""
    bad: list[dict[str, Any]] = []
    prev: dict[str, Any] | None = None
    for e in raw_entries(path):
        if e.get("custom_type") != "thread_goal_state":
            continue
        goal = (e.get("data") or {}).get("goal")
        if not goal or goal.get("status") != "active":
            bad.append({"kind": "goal_not_active", "entry": e.get("id"),
                        "status": goal and goal.get("status")})
            continue
        if prev is not None:
            for key in ("tokens_used", "time_used_s", "continuations"):
                if goal[key] < prev[key]:
                    bad.append({"kind": "goal_accounting_decreased", "field": key,
                                "entry": e.get("id"), "before": prev[key], "after": goal[key]})
        prev = goal
    if prev is None:
        bad.append({"kind": "goal_missing"})
    return bad


def count_compactions(path: Path) -> int:
    return sum(1 for e in raw_entries(path) if e.get("type") == "compaction")


def unchecked_compactions(path: Path, checked: set[str]) -> tuple[int, int]:
    """(compactions no host checked whose `ipython_state` record is in the log, those
    without one): a host killed right after appending a compaction never checks it."""
    entries = raw_entries(path)
    states = {e.get("parent_id") for e in entries
              if e.get("type") == "custom" and e.get("custom_type") == "ipython_state"}
    unchecked = [e.get("id") for e in entries
                 if e.get("type") == "compaction" and e.get("id") not in checked]
    with_state = sum(1 for cid in unchecked if cid in states)
    return with_state, len(unchecked) - with_state


def tier_figures(path: Path) -> dict[str, int]:
    """What each tier of context relief did (rlm.compaction.tiers): records, results
    replaced and tokens saved per tier, summaries, rebuilds from the checkpoint (tier 0)
    and the checkpoints written or failed, and the guards' rejections and stops."""
    out = {"summaries": 0, "summary_tokens_before": 0, "rejected": 0, "low_yield_stops": 0,
           "rebuilds": 0, "rebuilds_written_now": 0, "rebuild_tokens_before": 0,
           "checkpoints": 0, "checkpoint_failures": 0}
    for tier in ("prune", "shake"):
        out |= {f"{tier}_records": 0, f"{tier}_results": 0, f"{tier}_tokens_saved": 0}
    for line in path.read_bytes().splitlines():  # whole entries (raw_entries keeps few fields)
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if not isinstance(e, dict):
            continue
        details = e.get("details") if isinstance(e.get("details"), dict) else {}
        if e.get("type") == "compaction" and details.get("kind") == "rebuild":
            out["rebuilds"] += 1
            out["rebuilds_written_now"] += bool(details.get("written_now"))
            out["rebuild_tokens_before"] += int(e.get("tokens_before") or 0)
        elif e.get("type") == "compaction":
            out["summaries"] += 1
            out["summary_tokens_before"] += int(e.get("tokens_before") or 0)
        data = e.get("data") if isinstance(e.get("data"), dict) else {}
        out["checkpoints"] += e.get("custom_type") == "checkpoint"
        out["checkpoint_failures"] += e.get("custom_type") == "checkpoint_outcome"
        if e.get("custom_type") == "context_relief" and data.get("tier") in ("prune", "shake"):
            t = data["tier"]
            out[f"{t}_records"] += 1
            out[f"{t}_results"] += len(data.get("replaced", []))
            out[f"{t}_tokens_saved"] += int(data.get("tokens_before", 0)) - int(data.get("tokens_after", 0))
        elif e.get("custom_type") == "compaction_outcome":
            reason = str(data.get("reason", ""))
            out["rejected"] += "would not shrink" in reason
            out["low_yield_stops"] += "automatic compaction stopped" in reason
    return out


# ------------------------------------------------------- secrets and the outside world
SECRET_ENCODINGS = ("utf-8", "utf-16-le", "utf-32-le")


def files_with_secret(root: Path, secret: str) -> list[str]:
    """Every file under `root` whose bytes hold `secret` in UTF-8, UTF-16-LE or UTF-32-LE
    (all bytes of every file are read; symlinks are not followed)."""
    needles = [secret.encode(enc) for enc in SECRET_ENCODINGS]
    overlap = max(len(n) for n in needles)
    hits = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            try:
                if path.is_symlink() or not path.is_file():
                    continue
                with open(path, "rb") as f:
                    tail = b""
                    while chunk := f.read(1 << 24):
                        buf = tail + chunk
                        if any(n in buf for n in needles):
                            hits.append(str(path))
                            break
                        tail = buf[-overlap:]
            except OSError:
                continue
    return sorted(hits)


def check_secrets(root: Path, secret: str) -> list[dict[str, Any]]:
    hits = files_with_secret(root, secret)
    return [{"kind": "secret_on_disk", "files": hits[:20], "count": len(hits)}] if hits else []


def tree_state(roots: list[Path], skip: tuple[Path, ...] = (),
               digest: bool = False) -> dict[str, tuple[Any, ...]]:
    """path -> (type, size, mtime_ns, mode) of everything under `roots` (not under or at a
    path of `skip`); a root that is a file counts too. `digest`: a regular file's sha256
    (of at most DIGEST_MAX bytes) as well, so a rewrite that keeps size and times shows."""
    state: dict[str, tuple[Any, ...]] = {}
    skipped = {str(p) for p in skip}
    for root in roots:
        if os.path.isfile(root) or os.path.islink(root):
            with contextlib.suppress(OSError):
                state[str(root)] = _entry(str(root), os.lstat(root), digest)
            continue
        for dirpath, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if os.path.join(dirpath, d) not in skipped]
            for name in dirs + files:
                p = os.path.join(dirpath, name)
                if p in skipped:  # a skipped file (a skipped directory is not walked)
                    continue
                try:
                    st = os.lstat(p)
                except OSError:
                    continue
                state[p] = _entry(p, st, digest)
    return state


DIGEST_MAX = 1 << 20


def _entry(path: str, st: os.stat_result, digest: bool) -> tuple[Any, ...]:
    kind = "d" if stat.S_ISDIR(st.st_mode) else "f"
    if kind == "d":  # its mtime changes when an entry comes and goes: its entries say it
        return kind, st.st_mode
    out: tuple[Any, ...] = (kind, st.st_size, st.st_mtime_ns, st.st_mode)
    if digest and stat.S_ISREG(st.st_mode):
        with contextlib.suppress(OSError), open(path, "rb") as f:
            out += (hashlib.sha256(f.read(DIGEST_MAX)).hexdigest(),)
    elif stat.S_ISLNK(st.st_mode):
        with contextlib.suppress(OSError):
            out += (os.readlink(path),)
    return out


def check_host_files(before: dict[str, tuple[Any, ...]], after: dict[str, tuple[Any, ...]]
                     ) -> list[dict[str, Any]]:
    """No host file a kernel must not change was created, changed or removed (the state of
    bench.soak.Soak.host_files: HOME outside the cwd, $RLM_HOME but the soak's own session
    and the kernel's matplotlib cache, the user's config dir, another session, the
    interpreter's site-packages, rlm's source)."""
    bad = check_outside(before, after)
    return [{**v, "kind": "host_file_changed_through_kernel"} for v in bad]


def check_outside(before: dict[str, tuple[Any, ...]], after: dict[str, tuple[Any, ...]]
                  ) -> list[dict[str, Any]]:
    """Nothing created, changed or removed outside $RLM_HOME (HOME, TMPDIR, XDG, cwd)."""
    created = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = sorted(p for p in set(before) & set(after) if before[p] != after[p])
    if not (created or removed or changed):
        return []
    return [{"kind": "written_outside_home", "created": created[:30], "changed": changed[:30],
             "removed": removed[:30], "count": len(created) + len(changed) + len(removed)}]


def check_forged(home: Path, cwd: Path, mark: str) -> list[dict[str, Any]]:
    """No host obeyed a cell's forgeries (bench.soak_model.forge_code): the user's config
    holds no forged line, no forged gate ran (`PWNED-*`), no `setsid` child of a kernel
    outlived it (`LATE-*` under the sessions, or one still running now: killed here so
    a run never leaves it behind)."""
    import psutil

    out: list[dict[str, Any]] = []
    config = home / "config.toml"
    if config.exists() and mark in config.read_text(errors="replace"):
        out.append({"kind": "forged_config_line", "file": str(config)})
    pwned = sorted(str(p) for root in (home, cwd) for p in root.rglob("PWNED-*"))
    late = sorted(str(p) for p in home.rglob("LATE-*"))
    if pwned:
        out.append({"kind": "forged_gate_ran", "files": pwned[:10]})
    if late:
        out.append({"kind": "cell_child_outlived_its_kernel", "files": late[:10]})
    alive = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        if any("outlived its kernel" in part for part in (p.info["cmdline"] or [])):
            alive.append(p.pid)
            with contextlib.suppress(psutil.Error):
                p.kill()
    if alive:
        out.append({"kind": "cell_child_alive_after_the_run", "pids": alive[:10]})
    return out


# the settings that decide what runs and what the kernel sees (rlm.trust, rlm.config)
SECURITY_SETTINGS = ("sandbox", "kernel_env_pass", "kernel_python", "kernel", "kernel_cwd",
                     "home", "snapshot_url", "replay", "model", "sub_model", "compaction_model",
                     "advisor")
_SETTINGS = """
import json
from rlm.config import load_config
cfg = load_config()
print(json.dumps({k: getattr(cfg, k, None) for k in %r}, default=str))
"""


def security_settings(cwd: Path, env: dict[str, str]) -> dict[str, Any]:
    """`load_config()`'s security-relevant settings as a run in `cwd` with `env` gets them."""
    out = subprocess.run([sys.executable, "-c", _SETTINGS % (SECURITY_SETTINGS,)], cwd=cwd,
                         env=env, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1:] or ["exit " + str(out.returncode)]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def check_settings(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """No security-relevant setting a run would take changed over the soak (a cell wrote
    the user's config, a project rlm.toml, forged log entries: none may loosen them)."""
    changed = {k: [before.get(k), after.get(k)] for k in set(before) | set(after)
               if before.get(k) != after.get(k)}
    return [{"kind": "security_settings_changed", "changed": changed,
             "count": len(changed)}] if changed else []
