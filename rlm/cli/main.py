"""`rlm` command line. Parsing here; the work lives in rlm.cli.commands and friends.

Errors print one line with the fix and exit non-zero; only this module turns
exceptions into exit codes.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import NoReturn

from rlm import __version__
from rlm.errors import RlmError


def _run_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model and limits")
    g.add_argument("--model", help="litellm model string, 'local', 'local:PATH.gguf' or 'script:PATH'")
    g.add_argument("--sub-model", help="model for llm_query / rlm_query (default: --model)")
    g.add_argument("--compaction-model", help="model that writes summaries (default: --model)")
    g.add_argument("--max-turns", type=_limit_int, help="turn limit ('unlimited' for none; default 30)")
    g.add_argument("--max-tokens", type=_limit_int, help="token limit for this run")
    g.add_argument("--max-wall", type=float, dest="max_wall_s", help="wall-clock limit in seconds")
    g.add_argument("--cell-timeout", type=float, help="seconds before a cell is interrupted (default 300)")
    g.add_argument("--memory-cap", type=_bytes, dest="memory_cap_bytes",
                   help="kernel address-space cap, e.g. 4G (MemoryError instead of OOM kills)")
    g.add_argument("--temperature", type=float)
    g.add_argument("--max-depth", type=int, help="rlm_query depth limit (default 1)")
    g.add_argument("--sandbox", action="store_const", const=True,
                   help="kernel in its own user + network namespace: no network, no access "
                        "to the host's memory or environment (Linux, unshare)")
    g.add_argument("--token-budget", type=int, help="token budget for the whole rlm_query tree")
    c = p.add_argument_group("compaction")
    c.add_argument("--context-window", type=int, help="model context window in tokens")
    c.add_argument("--reserve-tokens", type=int)
    c.add_argument("--keep-recent-tokens", type=int)
    c.add_argument("--no-compaction", dest="compaction_enabled", action="store_const", const=False)
    a = p.add_argument_group("long-running")
    a.add_argument("--autonomous", action="store_true", help="keep going unattended within the limits")
    a.add_argument("--gate", action="append", default=[], help="shell command that must pass before finishing")
    a.add_argument("--max-continuations", type=_limit_int)
    p.add_argument("--json", action="store_true", help="print one JSON object at the end")


def _limit_int(text: str) -> int:
    """A positive whole number, or 'unlimited' (-1 here; None in the Config)."""
    if text.strip().lower() in ("unlimited", "none"):
        return -1
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number or 'unlimited'") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1 (or 'unlimited')")
    return value


def _bytes(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    t = text.strip().lower().rstrip("b")
    try:
        value = float(t[:-1]) * units[t[-1]] if t and t[-1] in units else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 4G or 512M") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive size like 4G")
    return int(value)


class _Parser(argparse.ArgumentParser):
    """Usage errors are one line naming the fix, not the whole usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="rlm", description="A data agent whose working memory is a live IPython kernel.")
    p.add_argument("--version", action="version", version=f"rlm {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    r = sub.add_parser("run", help="start a session on a task")
    r.add_argument("task")
    r.add_argument("--context", action="append", default=[], metavar="FILE",
                   help="load FILE into a kernel variable (repeatable)")
    r.add_argument("--notebook", help="execute this .ipynb into the kernel first")
    r.add_argument("--detach", action="store_true", help="run in a background worker")
    _run_options(r)

    c = sub.add_parser("chat", help="interactive session")
    c.add_argument("session", nargs="?", help="continue this session")
    _run_options(c)

    rs = sub.add_parser("resume", help="continue a session (its kernel is restored)")
    rs.add_argument("session")
    rs.add_argument("task", nargs="?")
    rs.add_argument("--from", dest="from_entry", metavar="ENTRY", help="branch from this entry")
    _run_options(rs)

    s = sub.add_parser("sessions", help="list sessions")
    s.add_argument("--json", action="store_true")
    lg = sub.add_parser("log", help="print a session's transcript")
    lg.add_argument("session")
    lg.add_argument("--json", action="store_true")
    lg.add_argument("--all", action="store_true", help="include hidden entries")
    t = sub.add_parser("tree", help="print a session's entry tree")
    t.add_argument("session")
    t.add_argument("--json", action="store_true")
    st = sub.add_parser("state", help="what the session's kernel holds (live or snapshot)")
    st.add_argument("session")
    st.add_argument("--json", action="store_true")

    e = sub.add_parser("export", help="export a session to .ipynb")
    e.add_argument("session")
    e.add_argument("-o", "--output", help="notebook path (default ./<session id>.ipynb)")
    e.add_argument("--force", action="store_true", help="overwrite an existing notebook file")
    e.add_argument("--branch", metavar="LEAF")
    e.add_argument("--json", action="store_true")
    cp = sub.add_parser("compact", help="compact a session now")
    cp.add_argument("session")
    cp.add_argument("--instructions")
    cp.add_argument("--model")
    cp.add_argument("--json", action="store_true")

    from rlm.cli import longrun_cli

    longrun_cli.add_parsers(sub, _run_options)

    d = sub.add_parser("demo", help="generate a dataset and run a short task on it")
    d.add_argument("--model", help="default: local (the embedded offline model)")
    d.add_argument("--rows", type=int, default=3000)
    d.add_argument("--seed", type=int, default=7, help="dataset seed (default 7)")
    d.add_argument("-o", "--output", help="notebook path (default: in the session directory)")
    d.add_argument("--max-turns", type=int, default=8)
    d.add_argument("--json", action="store_true")
    return p


def _dispatch(args: argparse.Namespace) -> int:
    from rlm.cli import commands, longrun_cli

    table: dict[str, Callable[[argparse.Namespace], int]] = {
        "run": commands.cmd_run,
        "chat": commands.cmd_chat,
        "resume": commands.cmd_resume,
        "sessions": commands.cmd_sessions,
        "log": commands.cmd_log,
        "tree": commands.cmd_tree,
        "state": commands.cmd_state,
        "export": commands.cmd_export,
        "compact": commands.cmd_compact,
        "demo": commands.cmd_demo,
        **longrun_cli.COMMANDS,
    }
    return table[args.command](args)


def main(argv: list[str] | None = None) -> int:
    # our own Ctrl-C handler: a process started with SIGINT ignored (a background job in a
    # script, some CI runners) would otherwise never see KeyboardInterrupt
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if argv is None:  # the process entry point: keys out of /proc/<pid>/environ (re-exec)
        from rlm.secrets import protect_process_secrets

        protect_process_secrets()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    args = build_parser().parse_args(argv)
    try:
        return _dispatch(args)
    except RlmError as e:
        print(f"rlm: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("rlm: interrupted", file=sys.stderr)
        return 130
    except OSError as e:  # read-only or foreign RLM_HOME, full disk: one line, not a traceback
        if os.environ.get("RLM_DEBUG"):
            raise
        from rlm.paths import os_error_line

        print(f"rlm: error: {os_error_line(e)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
