"""What every `rlm` command shares: run options from flags, opening sessions to read."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from rlm import app
from rlm.app import RunOptions
from rlm.config import Config
from rlm.errors import SessionError
from rlm.session.store import SessionStore

CONFIG_FLAGS = (
    "model", "sub_model", "compaction_model", "advisor", "max_turns", "max_tokens", "max_wall_s",
    "cell_timeout", "gate_timeout_s", "memory_cap_bytes", "temperature", "max_depth", "token_budget",
    "turn_budget", "max_children", "candidates",
    "context_window", "reserve_tokens", "keep_recent_tokens", "compaction_enabled", "context_tiers", "sandbox",
    "kernel_network", "kernel",
    "snapshot_url",
    "replay",
    "memory",
)


def options_from_args(args: argparse.Namespace) -> RunOptions:
    """The run flags the user gave (None / absent ones are not recorded)."""
    overrides = {k: getattr(args, k) for k in CONFIG_FLAGS if getattr(args, k, None) is not None}
    return RunOptions(
        autonomous=getattr(args, "autonomous", None),  # None: not given (resume keeps it)
        gate=list(getattr(args, "gate", None) or []),
        no_gate=bool(getattr(args, "no_gate", False)),
        max_continuations=getattr(args, "max_continuations", None),
        context=list(getattr(args, "context", None) or []),
        notebook=getattr(args, "notebook", None),
        overrides=overrides,
        goal=getattr(args, "goal", None),
    )


def reading_config() -> Config:
    """The config of a command that only reads: what an untrusted project file may not set
    is ignored (rlm.config), said once on stderr, and the command goes on."""
    from rlm.config import config_warnings, load_config

    config = load_config()
    for line in config_warnings():
        print(f"rlm: warning: {line}", file=sys.stderr)
    return config


def open_readonly(session_id: str) -> SessionStore:
    """For commands that only read (log, tree, state, export): never takes the lock."""
    try:
        return SessionStore.open(session_id, reading_config().home, readonly=True)
    except FileNotFoundError as e:
        raise SessionError(f"no session {session_id!r} ({e}); `rlm sessions` lists them") from e


def live_view(args: argparse.Namespace, run: app.SessionRun) -> Any:
    """`--live NB` (run, resume, chat): the run shown in that notebook as it goes
    (rlm.notebook.live); None without the flag. Call it inside the entered run."""
    if not getattr(args, "live", None):
        return None
    from rlm.notebook.live import LiveView

    session = run.session
    assert session is not None and session.dir is not None
    return LiveView(args.live, session.header, session.dir, session.branch,
                    say=lambda line: print(f"rlm: {line}", file=sys.stderr))


def both(*consumers: Callable[[Any], None]) -> Callable[[Any], None]:
    """One event consumer that hands each event to every one of `consumers`, in order."""

    def each(ev: Any) -> None:
        for consume in consumers:
            consume(ev)

    return each
