"""`rlm sessions`, `rlm state` and `rlm ps` as tables that fit the terminal: 80 columns
hold the columns that matter (ID, STATUS, TURNS, TASK); wider terminals get more. Each
table is one pure function from rows and a width to lines, tested on fixtures."""

from __future__ import annotations

import json
import os
import shutil
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlm import safeio
from rlm.cli.render import terminal_safe
from rlm.ledger import SPENT_ENTRY, Totals
from rlm.outcome import RunOutcome, decide


def width() -> int:
    """The terminal's width (COLUMNS when set; 80 when stdout is not a terminal)."""
    return max(40, shutil.get_terminal_size((80, 24)).columns)


def cut(text: Any, room: int) -> str:
    """The first line of `text`, terminal-safe, cut to `room` characters with `…`."""
    line = terminal_safe(str(text or "").strip().split("\n", 1)[0])
    return line if len(line) <= room else line[: max(0, room - 1)] + "…"


def table(columns: Sequence[tuple[str, int, str]], rows: list[dict[str, Any]],
          total: int) -> list[str]:
    """Lines of a table `total` characters wide: `columns` are (key, width, align); the
    one column of width 0 takes the room left."""
    fixed = sum(w for _, w, _ in columns) + 2 * (len(columns) - 1)
    widths = {k: (w or max(8, total - fixed)) for k, w, _ in columns}
    out = []
    for row in [{k: k.upper() for k, _, _ in columns}, *rows]:
        cells = []
        for k, _, align in columns:
            text = cut(row.get(k), widths[k])
            cells.append(text.rjust(widths[k]) if align == ">" else text.ljust(widths[k]))
        out.append("  ".join(cells).rstrip())
    return out


# ------------------------------------------------------------------- sessions
def session_columns(total: int) -> list[tuple[str, int, str]]:
    """80 columns: ID STATUS TURNS TASK; from 120: ANSWER too; from 160: MODEL and CWD."""
    cols = [("id", 22, "<"), ("status", 11, "<"), ("turns", 5, ">"), ("task", 0, "<")]
    if total >= 120:
        cols.append(("answer", 30, "<"))
    if total >= 160:
        cols[3:3] = [("model", 18, "<")]
        cols.append(("cwd", 24, "<"))
    return cols


def session_lines(rows: list[dict[str, Any]], total: int) -> list[str]:
    return table(session_columns(total), rows, total)


def session_status(path: Path) -> dict[str, Any]:
    """status (running | idle | new | ended, or how the last run ended: rlm.outcome's
    answered | unverified | unmet | limit | stuck | interrupted | error), turns, the first user message, the last answer's first line, verified and
    reason, and `tokens`: what the session spent, the sum of the totals each run's end
    recorded and of what was spent outside runs (`spent` entries; rlm.ledger: by role,
    children included), read from the session's lock,
    its worker status file and its log (only candidate lines parsed)."""
    from rlm.longrun.lock import LOCK_NAME, holder

    out: dict[str, Any] = {"status": "new", "turns": 0, "first_prompt": None, "answer": None,
                           "verified": None, "reason": None, "spent": None}
    try:
        with os.fdopen(safeio.open_file(path.parent, path.name), "rb") as f:
            for raw in f:
                if not any(k in raw for k in (b'"assistant"', b'"final"', b'"run_end"', b'"user"',
                                              b'"spent"')):
                    continue
                try:
                    d = json.loads(raw)
                except ValueError:
                    continue
                _account(out, d)
    except OSError:
        pass
    spent = out.pop("spent")  # None: no run recorded its totals (an older log)
    out["tokens"] = spent.to_dict() if spent is not None else None
    if out["status"] == "new" and out["turns"]:
        out["status"] = "ended"  # a log from before runs recorded how they ended
    who = holder(path.parent / LOCK_NAME)
    if who is not None:
        state = None
        if who.kind == "worker":
            try:
                state = json.loads(safeio.read_text(path.parent, "worker.json", 1 << 20)
                                   ).get("state")
            except (OSError, ValueError, AttributeError):
                state = None
        out["status"] = "idle" if state == "idle" else "running"
    return out


def _account(out: dict[str, Any], d: dict[str, Any]) -> None:
    """One log entry into the running summary."""
    kind = d.get("type")
    if kind == "message":
        role = (d.get("message") or {}).get("role")
        if role == "assistant":
            out["turns"] += 1
        elif role == "user" and out["first_prompt"] is None:
            content = (d.get("message") or {}).get("content")
            out["first_prompt"] = content if isinstance(content, str) else None
    elif kind == "custom" and d.get("custom_type") == SPENT_ENTRY:  # outside any run
        raw_spent = d.get("data")
        spent = Totals.from_dict(raw_spent.get("tokens") if isinstance(raw_spent, dict) else None)
        if spent is not None:
            out["spent"] = spent.plus(out["spent"] or Totals())
    elif kind == "custom" and d.get("custom_type") in ("final", "run_end"):
        raw = d.get("data")
        data: dict[str, Any] = raw if isinstance(raw, dict) else {}
        if d.get("custom_type") == "final":
            a = data.get("answer")
            out["answer"] = None if a is None else str(a).strip().split("\n", 1)[0]
        outcome = RunOutcome.from_dict(data.get("outcome")) or _older_outcome(d, data)
        out["status"] = outcome.status
        out["verified"] = outcome.verified
        out["reason"] = None if outcome.status == "answered" else outcome.why
        recorded = Totals.from_dict(data.get("tokens"))
        if recorded is not None:
            out["spent"] = recorded.plus(out["spent"] or Totals())


def _older_outcome(d: dict[str, Any], data: dict[str, Any]) -> RunOutcome:
    """The outcome of a run a log recorded before runs recorded their outcome."""
    reason = str(data.get("reason") or ("final" if d.get("custom_type") == "final" else ""))
    if d.get("custom_type") == "run_end":
        return decide(reason or "error", data.get("detail"), None, None, [])
    verified = data.get("verified")
    return decide(reason, None, verified if isinstance(verified, bool) else None,
                  data.get("why"), [])


# ---------------------------------------------------------------------- state
def state_lines(state: dict[str, Any], total: int) -> list[str]:
    """The names the kernel or its snapshot holds. Names that share one pickled group (an
    object graph reachable from several names: `shares`) are counted once, on the first
    of them; the others say whose size holds them."""
    lines = [f"source: {state['source']} ({state.get('detail', '')})"]
    if len(lines[0]) > total:  # the detail on lines of its own, whole
        lines = [f"source: {state['source']}",
                 *("  " + w for w in textwrap.wrap(str(state.get("detail", "")), total - 2))]
    names = state.get("names") or []
    if not names:
        return [*lines, "  (no names)"]
    name_w = min(24, max(4, *(len(str(n.get("name"))) for n in names)))
    counted: dict[frozenset[str], str] = {}  # a shared group -> the name that counts it
    size_total = 0
    for n in names:
        name = str(n.get("name"))
        group = frozenset([name, *map(str, n.get("shares") or [])])
        about = str(n.get("summary") or n.get("type", ""))
        if len(group) > 1 and group in counted:
            size = f"with {counted[group]}"
        else:
            if len(group) > 1:
                counted[group] = name
                about = f"shared with {', '.join(sorted(group - {name}))}; {about}"
            size_total += int(n.get("bytes") or 0)
            size = f"{int(n.get('bytes') or 0):,} B"
        if not n.get("restorable", True):
            about = f"not restorable: {n.get('reason')}; {about}"
        head = f"  {cut(name, name_w):<{name_w}}  {cut(size, 15):>15}  "
        lines.append(head + cut(about, max(10, total - len(head))))
    lines.append(f"  {len(names)} name(s), {size_total:,} B")
    return lines


# ------------------------------------------------------------------------- ps
def ps_lines(rows: list[dict[str, Any]], total: int) -> list[str]:
    """Live workers; dead ones (their process gone, the status file left) are marked and
    counted, with how to clear them."""
    rows = [{**r, "session_id": Path(str(r.get("session_id"))).name} for r in rows]
    live = [r for r in rows if r.get("alive")]
    dead = [r for r in rows if not r.get("alive")]
    if not rows:
        return ["no workers"]
    out = table([("session_id", 22, "<"), ("pid", 7, ">"), ("state", 9, "<"),
                 ("activity", 0, "<")], live, total) if live else ["no live workers"]
    if dead:
        ids = " ".join(str(r.get("session_id")) for r in dead[:2]) + (" ..." if len(dead) > 2 else "")
        out.append(cut(f"{len(dead)} stopped or dead worker record(s): {ids}", total))
        out.append("  `rlm ps --prune` removes them")
    return out
