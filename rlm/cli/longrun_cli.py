"""`rlm goal|schedule|heartbeat|worker|attach|stop|ps` (the rules live in rlm.app).

One argument order for the session's long-running state: `rlm <noun> SESSION <verb> ...`
(`rlm goal SESSION set ...`, `rlm schedule SESSION add ...`, `rlm heartbeat SESSION every
10m ...`). The first wave's `rlm schedule add SESSION ...` still works, with a note on
stderr.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlm import app
from rlm.cli.common import open_readonly, reading_config
from rlm.cli.render import Renderer, print_json, terminal_safe
from rlm.config import load_config
from rlm.errors import ConfigError, RlmError
from rlm.events import Event
from rlm.longrun import GoalManager, Scheduler
from rlm.protocols import SessionLog
from rlm.session.store import resolve_session_dir

if TYPE_CHECKING:
    from rlm.agent.loop import Agent
    from rlm.notebook.live import LiveView

SCHEDULE_ACTIONS = ("add", "list", "cancel")
GOAL_ACTIONS = ("set", "status", "pause", "resume", "clear", "budget")


def add_parsers(sub: Any, run_options: Callable[[argparse.ArgumentParser], None]) -> None:
    session_help = "session id, unique prefix or suffix of one, or 'last'"
    g = sub.add_parser("goal", help="set, inspect or change a session's goal: SESSION ACTION")
    g.add_argument("session", help=session_help)
    g.add_argument("action", choices=GOAL_ACTIONS, nargs="?", default="status",
                   help="set OBJECTIVE | status (default) | pause | resume | clear | budget N")
    g.add_argument("text", nargs="*", help="objective (set) or token budget (budget)")
    g.add_argument("--budget", type=int, help="token budget (set)")
    g.add_argument("--json", action="store_true", help="print the goal as one JSON object")
    _worker_flag(g)

    s = sub.add_parser("schedule", help="one-time and cron prompts: SESSION add|list|cancel",
                       usage="rlm schedule SESSION {add,list,cancel} [WHEN -- PROMPT | JOB_ID]")
    s.add_argument("words", nargs="+", metavar="SESSION ACTION ...",
                   help="add: WHEN -- PROMPT; cancel: JOB_ID")
    s.add_argument("--follow-up", dest="delivery", action="store_const", const="follow_up",
                   help="deliver after the current run ends (default for a busy session)")
    s.add_argument("--steer", dest="delivery", action="store_const", const="steer",
                   help="deliver into the running turn, between cells")
    s.add_argument("--json", action="store_true", help="print one JSON value")
    _worker_flag(s)

    h = sub.add_parser("heartbeat", help="the user heartbeat: SESSION every 10m PROMPT | SESSION off")
    h.add_argument("session", help=session_help)
    h.add_argument("rest", nargs="+", metavar="every INTERVAL PROMPT | off",
                   help="'every 10m PROMPT' (or '10m PROMPT') sets it; 'off' clears it")
    h.add_argument("--json", action="store_true", help="print one JSON object")
    _worker_flag(h)

    w = sub.add_parser("worker", help="run a session's resident worker in the foreground")
    w.add_argument("session", help=session_help)
    w.add_argument("--json", action="store_true", help="print the outcome as JSON on exit")
    a = sub.add_parser("attach", help="watch a worker's run, rendered like `rlm run`")
    a.add_argument("session", nargs="?", default="last", help=session_help + " (default)")
    a.add_argument("--follow", action="store_true",
                   help="keep watching after the run ends (until the worker stops)")
    a.add_argument("--no-follow", dest="no_wait", action="store_true",
                   help="print what has happened so far and exit at once")
    a.add_argument("--json", action="store_true", help="one JSON event record per line")
    a.add_argument("--live", metavar="NOTEBOOK",
                   help="show the run in this .ipynb as it happens, as `rlm run --live` does "
                        "(for as long as this command follows it)")
    st = sub.add_parser("stop", help="stop a session's worker cleanly")
    st.add_argument("session", help=session_help)
    st.add_argument("--json", action="store_true", help="print one JSON object")
    ps = sub.add_parser("ps", help="list workers")
    ps.add_argument("--json", action="store_true", help="print one JSON list")
    ps.add_argument("--prune", action="store_true",
                    help="remove the records of workers that stopped or died")


def _worker_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--worker", action=argparse.BooleanOptionalAction, default=None,
                   help="start a background worker for the session if none holds it (it "
                        "fires the jobs and continues the goal); --no-worker never asks")


# ---------------------------------------------------------------------- goals
def cmd_goal(args: argparse.Namespace) -> int:
    text = " ".join(args.text)
    line = app.change_goal(args.session, args.action, text, args.budget)
    if args.json:
        g = GoalManager(open_readonly(args.session)).get()
        if line == "sent to the running worker":
            print_json({"sent_to_worker": True})
        else:
            print_json(g.to_dict() if g else None)  # the first wave's shape
    else:
        print(line)
    if args.action in ("set", "resume"):
        _offer_worker(args, "works on the goal")
    return 0


def goal_command(agent: Agent, words: list[str]) -> str:
    """`/goal ...` in chat (this process holds the session)."""
    goals = GoalManager(agent.session)
    if words and words[0] == "set":  # `/goal set X` sets "X"
        words = words[1:]
    if not words or words[0] == "status":
        return app.goal_line(goals, "status", "", None)
    if words[0] in ("pause", "resume", "clear"):
        return app.goal_line(goals, words[0], "", None)
    if words[0] == "stop":
        return app.goal_line(goals, "clear", "", None)
    if words[0] == "budget":
        return app.goal_line(goals, "budget", " ".join(words[1:]), None)
    budget = None
    if words[0].startswith("--budget"):
        if "=" in words[0]:
            raw, words = words[0].split("=", 1)[1], words[1:]
        elif len(words) > 1:
            raw, words = words[1], words[2:]
        else:
            raise ConfigError("/goal --budget N OBJECTIVE")
        try:
            budget = int(raw)
        except ValueError:
            raise ConfigError(f"--budget {raw!r} is not a whole number: /goal --budget N "
                              "OBJECTIVE") from None
    return app.goal_line(goals, "set", " ".join(words), budget)


# ------------------------------------------------------------------ schedules
def _schedule_words(words: list[str]) -> tuple[str, str, list[str]]:
    """(session, action, rest) from `SESSION ACTION ...` or the old `ACTION SESSION ...`."""
    if len(words) < 2:
        raise ConfigError("rlm schedule SESSION add WHEN -- PROMPT | SESSION list | "
                          "SESSION cancel JOB_ID")
    if words[1] in SCHEDULE_ACTIONS:
        return words[0], words[1], words[2:]
    if words[0] in SCHEDULE_ACTIONS:
        print(f"rlm: note: `rlm schedule {words[0]} SESSION` is deprecated; use "
              f"`rlm schedule SESSION {words[0]}`", file=sys.stderr)
        return words[1], words[0], words[2:]
    raise ConfigError(f"unknown schedule action {words[1]!r}: use add, list or cancel")


def _scheduler(session: SessionLog) -> Scheduler:
    if session.dir is None:
        raise ConfigError("this session has no directory for schedules")
    return Scheduler(session.dir / "scheduled-jobs.json")


def cmd_schedule(args: argparse.Namespace) -> int:
    sid, action, rest = _schedule_words(list(args.words))
    session = open_readonly(sid)
    sched = _scheduler(session)
    if action == "add":
        rest = [w for w in rest if w != "--"]
        if len(rest) < 2:
            raise ConfigError("rlm schedule SESSION add WHEN -- PROMPT  (WHEN: 'in 30m', an ISO "
                              "time, 'every 10m' or a cron line like '0 9 * * 1-5')")
        job = sched.add(rest[0], " ".join(rest[1:]), delivery=args.delivery)
        view = job.view()
        who, line = _who_fires(session)
        if args.json:
            print_json({**view, "fired_by": who})
        else:
            print(f"{job.id}  next run {view.get('next_run_iso') or 'never'}")
        if who is None:
            _offer_worker(args, "fires the jobs", sid=sid, why=line)
    elif action == "cancel":
        if not rest:
            raise ConfigError("rlm schedule SESSION cancel JOB_ID")
        sched.cancel(rest[0])
        print_json({"cancelled": rest[0]}) if args.json else print(f"cancelled {rest[0]}")
    else:
        # a one-off job whose run failed stays listed, with why: nothing else says it
        jobs = [j.view() for j in sched.list(include_completed=True)
                if j.status != "completed" or j.last_error]
        firing = _who_fires(session)
        if args.json:
            print_json(jobs)
        from rlm.cli.listings import cut, width

        for j in [] if args.json else jobs:
            head = f"{j.get('id')}  {j.get('kind'):<14} {cut(j.get('schedule'), 20):<20} {j.get('status')}  "
            print(head + cut(j.get("prompt"), max(10, width() - len(head))))
            if j.get("last_error"):  # a failed scheduled run is said where the job is
                print("  last run failed: " + cut(j["last_error"], width() - 18))
        if any(j.get("status") == "active" for j in jobs):
            print(firing[1], file=sys.stderr)
    return 0


def _who_fires(session: SessionLog) -> tuple[str | None, str]:
    who = app.session_holder(session)
    if who is not None:
        return who, f"due jobs fire in {who}"
    return None, (f"nothing fires these jobs now: start a worker with `rlm worker {session.id}` "
                  f"(or `rlm run --detach`); a foreground `rlm run`/`rlm chat` fires them while it runs")


def heartbeat_command(session: SessionLog, words: list[str]) -> str:
    sched = _scheduler(session)
    if words and words[0] in ("off", "stop", "clear"):
        return "heartbeat cleared" if sched.clear_user_heartbeat() else "no heartbeat"
    if len(words) < 2 and not (words and words[0].startswith("every")):
        raise ConfigError("heartbeat: 'every 10m PROMPT' (or '10m PROMPT'), or 'off'")
    when, prompt = (" ".join(words[:2]), " ".join(words[2:])) if words[0] == "every" else \
        (words[0], " ".join(words[1:]))
    job = sched.set_user_heartbeat(when, prompt or "Heartbeat: check on your work and continue.")
    return f"heartbeat {job.id}: {job.schedule}"


def cmd_heartbeat(args: argparse.Namespace) -> int:
    line = heartbeat_command(open_readonly(args.session), args.rest)
    print_json({"message": line}) if args.json else print(line)
    if args.rest[0] not in ("off", "stop", "clear"):
        _offer_worker(args, "fires the heartbeat")
    return 0


def _offer_worker(args: argparse.Namespace, does: str, *, sid: str | None = None,
                  why: str | None = None) -> None:
    """Long-running work from one terminal: when no process holds the session, start a
    background worker (`--worker`, or `y` at the question on a terminal) or say how."""
    sid = sid or args.session
    if app.session_holder(open_readonly(sid)) is not None:
        return
    choice = args.worker
    if choice is None and sys.stdin.isatty() and sys.stderr.isatty() and not args.json:
        sys.stderr.write(f"no worker holds session {sid}: start one in the background "
                         f"(it {does})? [y/N] ")
        sys.stderr.flush()
        choice = sys.stdin.readline().strip().lower() in ("y", "yes")
    if not choice:
        print(f"rlm: warning: {why or 'nothing runs this session now'}; `--worker` starts a "
              f"background worker (`rlm resume {sid} --detach` too)", file=sys.stderr)
        return
    real, pid = app.ensure_worker(sid)
    print(f"rlm: worker {pid} started for session {real}: it {does}; `rlm attach {real}` "
          f"follows it, `rlm stop {real}` stops it", file=sys.stderr)


# -------------------------------------------------------------------- workers
def cmd_worker(args: argparse.Namespace) -> int:
    resolve_session_dir(args.session, load_config().home)  # a bad ref: one error line, no banner
    show = None
    if not args.json:
        print(f"rlm worker for session {args.session}: runs prompts sent to it (`rlm resume "
              f"SESSION --detach`), due schedules, heartbeats and the goal, in this terminal "
              f"until Ctrl-C or `rlm stop`, and shows them here as `rlm run` does ("
              f"`rlm attach` shows them elsewhere)", file=sys.stderr, flush=True)
        render = Renderer()
        show = _record_shower(render, as_json=False)
    code = app.run_worker(args.session, on_record=show)
    if not args.json:
        print(f"rlm worker: stopped (exit {code})", file=sys.stderr)
    if args.json:
        print_json({"session_id": args.session, "exit_code": code})
    return code


def cmd_attach(args: argparse.Namespace) -> int:
    """The latest run of the session's worker, rendered like `rlm run`; waits for it to end
    (`--follow`: until the worker stops; `--no-follow`: not at all). Ctrl-C detaches."""
    home = reading_config().home
    sdir = str(resolve_session_dir(args.session, home))  # unknown session: one line, exit 1
    render = Renderer(clock=time.time)  # durations on the records' own timestamps
    live = None
    if args.live:
        from rlm.notebook.live import attached

        live = attached(args.live, Path(sdir),
                        say=lambda line: print(f"rlm: {line}", file=sys.stderr))
    try:
        _follow(sdir, home, args, _record_shower(render, as_json=args.json), live)
    except KeyboardInterrupt:  # detaching never stops the worker
        render.close()
        render.console.print(f"detached; the worker goes on (`rlm attach {args.session}` "
                             f"to watch again, `rlm stop {args.session}` to stop it)",
                             style="dim", markup=False)
    finally:
        if live is not None:
            live.close()
    return 0


def _at(ts: float) -> Callable[[], float]:
    """A clock stopped at a record's timestamp."""
    return lambda: ts


def _follow(sdir: str, home: Any, args: argparse.Namespace,
            show: Callable[[dict[str, Any]], None], live: LiveView | None = None) -> None:
    """Show the latest run's records, then (unless --no-follow) those that come. `live`
    (--live NB) is told the run's events too: those before it came only as state (which
    cell runs), then one write; the rest as they come."""
    from rlm.longrun.worker import tail_events

    history = list(tail_events(sdir, home, follow=False))
    if live is not None:
        for rec in history:
            if (ev := Event.from_dict(rec)) is not None:
                live.take(ev, write=False)
        live.flush()
    ends = [i for i, r in enumerate(history) if r.get("event") == "RunEnded"]
    # the run is over when only worker records (no loop events) follow its RunEnded
    over = bool(ends) and all(Event.from_dict(r) is None and r.get("event") != "RunStarted"
                              for r in history[ends[-1] + 1:])
    start = (ends[-2] + 1 if len(ends) > 1 else 0) if over else (ends[-1] + 1 if ends else 0)
    for rec in history[start:]:
        show(rec)
    if args.no_wait or (over and not args.follow):
        return
    for i, rec in enumerate(tail_events(sdir, home, follow=True)):
        if i < len(history):
            continue
        show(rec)
        if live is not None and (ev := Event.from_dict(rec)) is not None:
            live(ev)
        kind = rec.get("event")
        if kind == "WorkerStopped" or (kind == "RunEnded" and not args.follow):
            break


def _record_shower(render: Renderer, *, as_json: bool) -> Callable[[dict[str, Any]], None]:
    """How `rlm attach` and a foreground `rlm worker` show a worker's event record: a loop
    event rendered as `rlm run` renders it (durations on the record's own timestamp), the
    worker's own records one quiet line each; `as_json`: the record as a JSON line."""

    def show(rec: dict[str, Any]) -> None:
        if as_json:
            print_json(rec)
            return
        ts = rec.get("ts")
        render.clock = _at(float(ts)) if isinstance(ts, int | float) else time.time
        ev = Event.from_dict(rec)
        if ev is not None:
            render(ev)
        else:  # the worker's own lifecycle records: one quiet line each
            rest = " ".join(f"{k}={v}" for k, v in rec.items() if k not in ("ts", "event"))
            render.console.print(f"· {_worker_record_name(rec.get('event', ''))} {rest}".rstrip(),
                                 style="dim", markup=False)

    return show


def _worker_record_name(kind: str) -> str:
    """`WorkerStarted` -> `worker started`."""
    return "".join(" " + c.lower() if c.isupper() else c for c in kind).strip()


def cmd_stop(args: argparse.Namespace) -> int:
    from rlm.longrun.worker import stop_worker

    home = reading_config().home
    sid = resolve_session_dir(args.session, home).name  # `last` named as what it is
    ok = stop_worker(args.session, home)
    if args.json:
        print_json({"session_id": sid, "stopped": ok})
    else:
        print("stopped" if ok else "no worker was running for that session", file=sys.stderr)
    return 0 if ok else 1


def cmd_ps(args: argparse.Namespace) -> int:
    from rlm.agent.advisor import latest_report, report_line
    from rlm.agent.children import registry, registry_lines
    from rlm.cli import listings
    from rlm.longrun.worker import list_workers, prune_workers

    home = reading_config().home
    rows = list_workers(home)
    if args.prune:
        gone = prune_workers(home)
        rows = [r for r in rows if r.get("alive")]
        if not args.json:
            print(f"removed {len(gone)} record(s) of stopped or dead workers", file=sys.stderr)
    branches: dict[Any, Any] = {}
    for r in rows:  # each worker's children, as its log records them
        try:
            branches[r.get("session_id")] = open_readonly(str(r.get("session_id"))).branch()
        except RlmError:
            branches[r.get("session_id")] = []
    if args.json:
        print_json([{**r, "children": registry(branches[r.get("session_id")]),
                     "advisor": latest_report(branches[r.get("session_id")])} for r in rows])
        return 0
    for line in listings.ps_lines(rows, listings.width()):
        print(line)
    for r in rows:
        advisor = latest_report(branches[r.get("session_id")])
        if advisor is not None:  # "silent for N turns" when it has not advised: never "healthy"
            print(terminal_safe(f"advisor of {Path(str(r.get('session_id'))).name}: "
                                f"{report_line(advisor)}"))
        children = registry_lines(branches[r.get("session_id")]) if r.get("alive") else []
        if children:
            print(terminal_safe(f"children of {Path(str(r.get('session_id'))).name}:"))
            for line in children:
                print(terminal_safe("  " + line))
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "goal": cmd_goal,
    "schedule": cmd_schedule,
    "heartbeat": cmd_heartbeat,
    "worker": cmd_worker,
    "attach": cmd_attach,
    "stop": cmd_stop,
    "ps": cmd_ps,
}
