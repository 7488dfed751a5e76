"""`rlm goal|schedule|heartbeat|worker|attach|stop|ps` and `rlm run --detach`.

When a worker owns the session (it holds the lock), changes go through its inbox so that
only one process ever appends to the session log; otherwise they are applied directly.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from rlm.cli.render import Renderer, print_json
from rlm.config import Config, load_config
from rlm.errors import ConfigError


def add_parsers(sub: Any, run_options: Callable[[argparse.ArgumentParser], None]) -> None:
    g = sub.add_parser("goal", help="set, inspect or change a session's goal")
    g.add_argument("session")
    g.add_argument("action", choices=["set", "status", "pause", "resume", "clear", "budget"])
    g.add_argument("text", nargs="*", help="objective (set) or token budget (budget)")
    g.add_argument("--budget", type=int, help="token budget (set)")
    g.add_argument("--json", action="store_true")

    s = sub.add_parser("schedule", help="one-time and cron prompts for a session")
    s.add_argument("action", choices=["add", "list", "cancel"])
    s.add_argument("session")
    s.add_argument("rest", nargs="*", help="add: WHEN -- PROMPT; cancel: JOB_ID")
    s.add_argument("--follow-up", dest="delivery", action="store_const", const="follow_up")
    s.add_argument("--steer", dest="delivery", action="store_const", const="steer")
    s.add_argument("--json", action="store_true")

    h = sub.add_parser("heartbeat", help="the user heartbeat: 'every 10m PROMPT' or 'off'")
    h.add_argument("session")
    h.add_argument("rest", nargs="+")

    w = sub.add_parser("worker", help="run a session's resident worker in the foreground")
    w.add_argument("session")
    a = sub.add_parser("attach", help="follow a worker's live progress")
    a.add_argument("session")
    a.add_argument("--no-follow", dest="follow", action="store_false")
    st = sub.add_parser("stop", help="stop a session's worker cleanly")
    st.add_argument("session")
    ps = sub.add_parser("ps", help="list workers")
    ps.add_argument("--json", action="store_true")


# ---------------------------------------------------------------------- goals
def _worker_running(session: Any) -> bool:
    from rlm.longrun.lock import lock_holder

    holder = lock_holder(session.dir / "worker.lock")
    return bool(holder)


def _goal_apply(goals: Any, action: str, text: str, budget: int | None) -> str:
    if action == "set":
        if not text:
            raise ConfigError("rlm goal SESSION set OBJECTIVE [--budget N]")
        g = goals.set(text, token_budget=budget)
    elif action == "pause":
        g = goals.pause()
    elif action == "resume":
        g = goals.resume()
    elif action == "clear":
        goals.clear()
        return "goal cleared"
    elif action == "budget":
        g = goals.raise_budget(int(text))
    else:
        g = goals.get()
    if g is None:
        return "no goal"
    budget_s = f"{g.tokens_used:,}/{g.token_budget:,}" if g.token_budget else f"{g.tokens_used:,}"
    return f"goal [{g.status}] {g.objective} (tokens {budget_s}, continuations {g.continuations})"


def cmd_goal(args: argparse.Namespace) -> int:
    from rlm.cli.commands import open_session
    from rlm.longrun import GoalManager
    from rlm.longrun.worker import send_request

    session = open_session(args.session)
    text = " ".join(args.text)
    if args.action != "status" and _worker_running(session):
        req: dict[str, Any] = {"kind": "goal", "action": "raise_budget" if args.action == "budget"
                               else args.action}
        if args.action == "set":
            req.update(objective=text, token_budget=args.budget)
        elif args.action == "budget":
            req["token_budget"] = int(text)
        send_request(str(session.dir), req)  # by directory: a copied session has its own inbox
        print("sent to the running worker")
        return 0
    goals = GoalManager(session)
    line = _goal_apply(goals, args.action, text, args.budget)
    if args.json:
        g = goals.get()
        print_json(g.to_dict() if g else None)
    else:
        print(line)
    return 0


def goal_command(agent: Any, words: list[str]) -> str:
    """`/goal ...` in chat."""
    from rlm.longrun import GoalManager

    goals = GoalManager(agent.session)
    if not words or words[0] == "status":
        return _goal_apply(goals, "status", "", None)
    if words[0] in ("pause", "resume", "clear"):
        return _goal_apply(goals, words[0], "", None)
    if words[0] in ("stop",):
        return _goal_apply(goals, "clear", "", None)
    budget = None
    if words[0].startswith("--budget"):
        if "=" in words[0]:
            budget, words = int(words[0].split("=", 1)[1]), words[1:]
        else:
            budget, words = int(words[1]), words[2:]
    return _goal_apply(goals, "set", " ".join(words), budget)


# ------------------------------------------------------------------ schedules
def _scheduler(session: Any) -> Any:
    from rlm.longrun import Scheduler

    return Scheduler(session.dir / "scheduled-jobs.json")


def cmd_schedule(args: argparse.Namespace) -> int:
    from rlm.cli.commands import open_session

    session = open_session(args.session)
    sched = _scheduler(session)
    if args.action == "add":
        if len(args.rest) < 2:
            raise ConfigError("rlm schedule add SESSION WHEN -- PROMPT  (WHEN: 'in 30m', an ISO "
                              "time, 'every 10m' or a cron line like '0 9 * * 1-5')")
        job = sched.add(args.rest[0], " ".join(args.rest[1:]), delivery=args.delivery)
        print(job.id)
    elif args.action == "cancel":
        if not args.rest:
            raise ConfigError("rlm schedule cancel SESSION JOB_ID")
        sched.cancel(args.rest[0])
        print(f"cancelled {args.rest[0]}")
    else:
        jobs = [j.view() for j in sched.list()]
        if args.json:
            print_json(jobs)
        for j in [] if args.json else jobs:
            print(f"{j.get('id')}  {j.get('kind'):<14} {j.get('schedule')!s:<20} {j.get('status')}  "
                  f"{str(j.get('prompt'))[:50]}")
    return 0


def heartbeat_command(agent_or_session: Any, words: list[str]) -> str:
    session = getattr(agent_or_session, "session", agent_or_session)
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
    from rlm.cli.commands import open_session

    print(heartbeat_command(open_session(args.session), args.rest))
    return 0


# -------------------------------------------------------------------- workers
def cmd_worker(args: argparse.Namespace) -> int:
    from rlm.longrun.worker import main as worker_main

    return worker_main([args.session])


def run_detached(args: argparse.Namespace, cfg: Config) -> int:
    """`rlm run --detach`: create the session, start its worker, queue the task."""
    from rlm.agent.session_run import resolve_model
    from rlm.longrun.worker import send_prompt, start_detached
    from rlm.session.store import SessionStore

    cfg = resolve_model(cfg)
    session = SessionStore.create(cfg.home, model=cfg.model or "", task=args.task)
    session.close()
    os.environ["RLM_MODEL"] = cfg.model or ""
    if cfg.sandbox:  # the worker loads its config afresh: --sandbox reaches it through env
        os.environ["RLM_SANDBOX"] = "1"
    send_prompt(session.id, args.task, cfg.home)
    pid = start_detached(session.id, cfg.home)
    if args.json:
        print_json({"session_id": session.id, "session_path": str(session.path), "worker_pid": pid})
    else:
        print(f"session {session.id} running in worker {pid}; `rlm attach {session.id}` to follow")
    return 0


def cmd_attach(args: argparse.Namespace) -> int:
    from rlm import events as ev
    from rlm.longrun.worker import tail_events

    render = Renderer()
    names = {n for n in dir(ev) if isinstance(getattr(ev, n), type)}
    for rec in tail_events(args.session, load_config().home, follow=args.follow):
        kind = rec.get("event", "")
        if kind in names and kind not in ("Event",):
            fields = {k: v for k, v in rec.items() if k not in ("ts", "event")}
            try:
                render(getattr(ev, kind)(**fields))
                continue
            except TypeError:
                pass
        render.console.print(f"{rec.get('ts', '')} {kind} "
                             f"{ {k: v for k, v in rec.items() if k not in ('ts', 'event')} }",
                             style="dim", markup=False)
        if kind == "WorkerStopped":
            break
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    from rlm.longrun.worker import stop_worker

    ok = stop_worker(args.session, load_config().home)
    print("stopped" if ok else "no worker was running for that session", file=sys.stderr)
    return 0 if ok else 1


def cmd_ps(args: argparse.Namespace) -> int:
    from rlm.longrun.worker import list_workers

    rows = list_workers(load_config().home)
    if args.json:
        print_json(rows)
        return 0
    for r in rows:
        print(f"{r.get('session_id')}  pid {r.get('pid')}  {r.get('state'):<9} "
              f"{'alive' if r.get('alive') else 'dead'}  {str(r.get('activity', ''))[:60]}")
    if not rows:
        print("no workers")
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
