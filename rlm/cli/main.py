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
from pathlib import Path
from typing import Any, NoReturn

from rlm import __version__
from rlm.errors import RlmError


def _live_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--live", metavar="NOTEBOOK",
                   help="show the run in this .ipynb as it happens: each cell as it starts, "
                        "its output as it comes, the answer; your own cells are kept "
                        "(created if missing; one run per notebook)")


def _run_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model and limits")
    g.add_argument("--model", help="litellm model string, 'local', 'local:PATH.gguf' or 'script:PATH'")
    g.add_argument("--sub-model", help="model for llm_query / rlm_query (default: --model)")
    g.add_argument("--compaction-model", help="model that writes summaries (default: --model)")
    g.add_argument("--advisor", metavar="MODEL",
                   help="a second model that watches the run and advises the agent (any model "
                        "--model takes, or 'local'; off by default)")
    g.add_argument("--max-turns", type=_limit_int, help="turn limit ('unlimited' for none; default 30)")
    g.add_argument("--max-tokens", type=_limit_int, help="token limit for this run")
    g.add_argument("--max-wall", type=_seconds, dest="max_wall_s", help="wall-clock limit in seconds")
    g.add_argument("--cell-timeout", type=_seconds, help="seconds before a cell is interrupted (default 300)")
    g.add_argument("--memory-cap", type=_bytes, dest="memory_cap_bytes",
                   help="kernel memory cap, e.g. 4G: an allocation past it is a MemoryError "
                        "in the cell, not an OOM kill (default: 3/4 of RAM; 0: no cap)")
    g.add_argument("--temperature", type=float, help="sampling temperature for the model")
    g.add_argument("--candidates", type=_whole(1), metavar="K",
                   help="at the steps that decide an answer, draw K replies, try each one's "
                        "cells in a fork of the kernel and run the one whose result most "
                        "agree on (default 1: the model's own reply; config: candidates)")
    g.add_argument("--max-depth", type=_whole(0), help="rlm_query depth limit (default 1)")
    g.add_argument("--sandbox", action=argparse.BooleanOptionalAction, default=None,
                   help="kernel in its own user, mount and network namespaces: no network, "
                        "no access to the host's memory or environment, $RLM_HOME and your "
                        "rlm config read-only (Linux). Default: on for a local kernel where "
                        "user namespaces are available; --sandbox requires it, --no-sandbox "
                        "turns it off")
    g.add_argument("--kernel-network", action="store_true", default=None,
                   help="let the sandboxed kernel reach the network (URLs, databases on "
                        "other hosts); the file protections stay (config: kernel_network)")
    g.add_argument("--replay", action=argparse.BooleanOptionalAction, default=None,
                   help="after a restart or resume, re-run recorded cells (only ones known to "
                        "stay in the kernel) to rebuild names the snapshot could not hold; "
                        "--no-replay keeps them lost (default: replay; recorded with the session)")
    g.add_argument("--memory", action=argparse.BooleanOptionalAction, default=None,
                   help="project memory: the .agent/ files of the working directory at the "
                        "head of every context, written by the model through `memory.*` "
                        "(default: on; --no-memory turns it off; recorded with the session)")
    g.add_argument("--kernel", metavar="KIND", help="where the kernel runs: local (default), "
                   "gateway:http://HOST:PORT[#KERNELSPEC] (token in RLM_GATEWAY_TOKEN) or "
                   "provisioner:NAME")
    g.add_argument("--max-children", type=_whole(0),
                   help="children (rlm_spawn, rlm_query) and llm_query_batched prompts running "
                        "at once in the whole session tree (default 8; 0: unlimited)")
    g.add_argument("--token-budget", type=_whole(1), help="token budget for the whole rlm_query tree")
    g.add_argument("--turn-budget", type=_whole(1),
                   help="turns for the whole session tree: the run and its children (each "
                        "child gets a share of what is left when it starts)")
    g.add_argument("--snapshot-url", type=_snapshot_url, metavar="URL",
                   help="where the kernel writes snapshots: s3://bucket/prefix, gs://..., "
                        "file:///path (credentials from the environment; default: the "
                        "session directory)")
    c = p.add_argument_group("compaction")
    c.add_argument("--context-window", type=_whole(1), help="model context window in tokens")
    c.add_argument("--reserve-tokens", type=_whole(0),
                   help="tokens kept free for the reply; compaction starts before they are used")
    c.add_argument("--keep-recent-tokens", type=_whole(0),
                   help="recent tokens compaction keeps verbatim (older ones are summarised)")
    c.add_argument("--no-compaction", dest="compaction_enabled", action="store_const", const=False,
                   help="never summarise old turns (the run stops at the window instead)")
    c.add_argument("--no-context-tiers", dest="context_tiers", action="store_const", const=False,
                   help="no pruning/shaking of old cell results before a summary")
    a = p.add_argument_group("long-running")
    a.add_argument("--goal", metavar="TEXT",
                   help="set the session's goal first: the run continues until the model "
                        "marks it complete (or a limit ends it); replaces any current goal")
    a.add_argument("--autonomous", action=argparse.BooleanOptionalAction, default=None,
                   help="keep going unattended within the limits (--no-autonomous: turn a "
                        "recorded --autonomous off on resume)")
    a.add_argument("--gate", action="append", default=[],
                   help="shell command that must pass before finishing, e.g. a content check: "
                        "--gate \"grep -q 'EWR: month' report.md\" (repeatable)")
    a.add_argument("--gate-timeout", dest="gate_timeout_s", type=_seconds, metavar="SECONDS",
                   help="seconds a --gate command may run before it is killed and counts as "
                        "failed (default 600)")
    a.add_argument("--no-gate", action="store_true",
                   help="drop the gates recorded with the session (resume)")
    a.add_argument("--max-continuations", type=_limit_int,
                   help="autonomous continuations allowed ('unlimited' for none)")
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


def _seconds(text: str) -> float:
    """Seconds > 0. A negative value is refused here: -1 is not "unlimited" for these
    flags, and the run options would otherwise take it for "not given" (the default)."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a number of seconds > 0 "
                                         "(leave the flag out for the default)")
    return value


def _whole(low: int) -> Callable[[str], int]:
    """A whole number >= low (see `_seconds` for why -1 is refused)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{text!r} must be at least {low} (leave the "
                                             "flag out for the default)")
        return value

    parse.__name__ = "whole number"  # argparse names the type in its error
    return parse


def _snapshot_url(text: str) -> str:
    from rlm.config import snapshot_url_problem

    problem = snapshot_url_problem(text)
    if problem:  # refused here, before anything records it
        raise argparse.ArgumentTypeError(problem)
    return text


def _bytes(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    t = text.strip().lower().rstrip("b")
    try:
        value = float(t[:-1]) * units[t[-1]] if t and t[-1] in units else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 4G or 512M") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a size like 4G (0: no cap)")
    return int(value)


class _Parser(argparse.ArgumentParser):
    """Usage errors are one line naming the fix, not the whole usage block. `intermixed`
    parsers take their positionals anywhere among the options (`rlm resume S --from E TASK`)."""

    def __init__(self, *args: Any, intermixed: bool = False, **kw: Any) -> None:
        kw.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kw)
        self._intermixed = intermixed
        self._inside = False

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        if not self._intermixed or self._inside:
            return super().parse_known_args(args, namespace)
        self._inside = True  # parse_known_intermixed_args calls back into parse_known_args
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._inside = False

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


# one example per command, shown at the end of its --help (the help snapshot test keeps
# every command covered)
EXAMPLES: dict[str, str] = {
    "run": 'rlm run "which region grew fastest?" --context sales.csv',
    "chat": "rlm chat            # a new session;  rlm chat last  continues the newest",
    "resume": 'rlm resume last --from ENTRY "top product instead?"',
    "sessions": "rlm sessions -n 5 --here",
    "log": "rlm log last --all",
    "tree": "rlm tree last",
    "state": "rlm state last --json",
    "checkpoint": "rlm checkpoint last",
    "export": "rlm export last -o analysis.ipynb",
    "compact": 'rlm compact last --instructions "keep the column names"',
    "rule": 'rlm rule add last "it used read_csv; the data is Parquet"',
    "goal": 'rlm goal last set "keep the dashboard data fresh" --budget 200000',
    "schedule": 'rlm schedule last add "0 9 * * 1-5" -- "refresh the numbers"',
    "heartbeat": 'rlm heartbeat last every 10m "check the queue"   (or: rlm heartbeat last off)',
    "worker": "rlm worker last",
    "attach": "rlm attach last --follow",
    "stop": "rlm stop last",
    "ps": "rlm ps --json",
    "demo": "rlm demo --rows 1000 -o demo.ipynb",
    "trust": "rlm trust ./rlm.toml",
    "memory": "rlm memory show --dir ~/projects/sales   (or: rlm memory log -n 20; rlm memory init)",
}
SESSION_HELP = "session id, unique prefix or suffix of one, a session directory, or 'last' (default)"


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="rlm", description="A data agent whose working memory is a live IPython kernel.")
    p.add_argument("--version", action="version", version=f"rlm {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    r = sub.add_parser("run", help="start a session on a task")
    r.add_argument("task", help="what to do, in words")
    r.add_argument("--context", action="append", default=[], metavar="FILE",
                   help="load FILE into a kernel variable (repeatable)")
    r.add_argument("--notebook", help="execute this .ipynb into the kernel first")
    r.add_argument("--detach", action="store_true", help="run in a background worker")
    _live_option(r)
    _run_options(r)

    c = sub.add_parser("chat", help="interactive session")
    c.add_argument("session", nargs="?",
                   help="continue this session: an id, a unique prefix or suffix, or 'last' "
                        "(default: a new session)")
    c.add_argument("--context", action="append", default=[], metavar="FILE",
                   help="load FILE into a kernel variable (repeatable; /load FILE in chat)")
    _live_option(c)
    _run_options(c)

    rs = sub.add_parser("resume", help="continue a session (its kernel is restored)",
                        intermixed=True)
    rs.add_argument("session", nargs="?", default="last", help=SESSION_HELP)
    rs.add_argument("task", nargs="?", help="the next prompt (default: continue where it stopped)")
    rs.add_argument("--from", dest="from_entry", metavar="ENTRY",
                    help="branch from this entry id (see `rlm tree`)")
    rs.add_argument("--detach", action="store_true",
                    help="continue in a background worker (`rlm attach` follows it)")
    _live_option(rs)
    _run_options(rs)

    s = sub.add_parser("sessions", help="list sessions, newest last")
    s.add_argument("-n", type=int, default=20, metavar="N",
                   help="show the N newest (default 20; 0 for all)")
    s.add_argument("--here", action="store_true",
                   help="only sessions started in the current directory")
    s.add_argument("--json", action="store_true", help="print one JSON list")
    lg = sub.add_parser("log", help="print a session's transcript")
    lg.add_argument("session", nargs="?", default="last", help=SESSION_HELP)
    lg.add_argument("--json", action="store_true", help="the branch's entries as one JSON list")
    lg.add_argument("--all", action="store_true", help="include hidden entries")
    lg.add_argument("-n", "--last", type=int, default=None, metavar="N",
                    help="only the branch's last N entries (a long session prints at once)")
    t = sub.add_parser("tree", help="print a session's entry tree")
    t.add_argument("session", nargs="?", default="last", help=SESSION_HELP)
    t.add_argument("--json", action="store_true", help="the tree as one JSON object")
    st = sub.add_parser("state", help="what the session's kernel holds (live or snapshot)")
    st.add_argument("session", nargs="?", default="last", help=SESSION_HELP)
    st.add_argument("--json", action="store_true", help="print one JSON object")
    ck = sub.add_parser("checkpoint", help="print the session's checkpoint (written in the "
                                           "background as its context fills)")
    ck.add_argument("session", nargs="?", default="last", help=SESSION_HELP)
    ck.add_argument("--json", action="store_true", help="print one JSON object")

    e = sub.add_parser("export", help="export a session to .ipynb")
    e.add_argument("session", nargs="?", default="last", help=SESSION_HELP)
    e.add_argument("-o", "--output", help="notebook path (default ./<session id>.ipynb)")
    e.add_argument("--force", action="store_true", help="overwrite an existing notebook file")
    e.add_argument("--branch", metavar="LEAF", help="export the branch ending at this entry id")
    e.add_argument("--json", action="store_true", help="print one JSON object")
    cp = sub.add_parser("compact", help="compact a session now")
    cp.add_argument("session", help=SESSION_HELP.replace(" (default)", ""))
    cp.add_argument("--instructions", help="what the summary must keep")
    cp.add_argument("--model", help="model that writes the summary (default: the session's)")
    cp.add_argument("--json", action="store_true", help="print one JSON object")

    from rlm.cli import longrun_cli

    longrun_cli.add_parsers(sub, _run_options)
    from rlm.cli import memory_cli

    memory_cli.add_parser(sub)

    d = sub.add_parser("demo", help="generate a dataset and run a short task on it")
    d.add_argument("--model", help="default: local (the embedded offline model)")
    d.add_argument("--rows", type=int, default=3000, help="rows of generated data (default 3000)")
    d.add_argument("--seed", type=int, default=7, help="dataset seed (default 7)")
    d.add_argument("-o", "--output", help="notebook path (default: in the session directory)")
    d.add_argument("--max-turns", type=int, default=8, help="turn limit (default 8)")
    d.add_argument("--json", action="store_true", help="print one JSON object at the end")
    ru = sub.add_parser("rule", help="write a stream rule from a complaint about a session")
    ru_sub = ru.add_subparsers(dest="rule_command", required=True, help="add: write one")
    ra = ru_sub.add_parser("add", help="the model writes a rule from the complaint; it is saved "
                                       "to .rlm/rules/ only once it matches the session's bad "
                                       "output")
    ra.add_argument("session", help=SESSION_HELP.replace(" (default)", ""))
    ra.add_argument("complaint", help="what the agent did wrong, in your words")
    ra.add_argument("--model", help="model that writes the rule (default: your configured one)")
    ra.add_argument("--json", action="store_true", help="print one JSON object")
    tr = sub.add_parser("trust", help="allow a project's rlm.toml to set every setting")
    tr.add_argument("path", nargs="?", default="rlm.toml",
                    help="the config file to allow (default ./rlm.toml); its sha256 is "
                         "recorded, so a changed file needs consent again")
    for name, parser in sub.choices.items():
        parser.epilog = f"example:\n  {EXAMPLES[name]}"
    return p


def _did_you_mean(argv: list[str], parser: argparse.ArgumentParser) -> str | None:
    """The one-line error for an unknown command, with the nearest ones (difflib)."""
    import difflib

    first = next((a for a in argv if not a.startswith("-")), None)
    if first is None or argv[0].startswith("-"):
        return None
    names = list(EXAMPLES)
    if first in names:
        return None
    near = difflib.get_close_matches(first, names, n=3, cutoff=0.6)
    hint = f"; did you mean: {', '.join(near)}?" if near else ""
    return f"rlm: error: unknown command {first!r}{hint} (`rlm --help` lists them)"


def _dispatch(args: argparse.Namespace) -> int:
    from rlm.cli import commands, longrun_cli, memory_cli

    table: dict[str, Callable[[argparse.Namespace], int]] = {
        "run": commands.cmd_run,
        "chat": commands.cmd_chat,
        "resume": commands.cmd_resume,
        "sessions": commands.cmd_sessions,
        "log": commands.cmd_log,
        "tree": commands.cmd_tree,
        "state": commands.cmd_state,
        "checkpoint": commands.cmd_checkpoint,
        "export": commands.cmd_export,
        "compact": commands.cmd_compact,
        "rule": commands.cmd_rule,
        "demo": commands.cmd_demo,
        "trust": _cmd_trust,
        "memory": memory_cli.cmd_memory,
        **longrun_cli.COMMANDS,
    }
    return table[args.command](args)


def _cmd_trust(args: argparse.Namespace) -> int:
    """`rlm trust [PATH]`: the user allows that file's exact bytes (rlm.trust)."""
    from rlm import trust

    try:
        print(trust.allow_file(Path(args.path)))
    except FileNotFoundError as e:
        raise RlmError(f"{e}; give the path of the rlm.toml to allow") from None
    return 0


def main(argv: list[str] | None = None) -> int:
    code = _main(argv)
    if argv is None:  # the process ends next: its objects (litellm's tables, pandas in
        # the host) need no cycle collection on the way out, which took 10-20 s on a
        # loaded machine after the last line was printed
        import gc

        gc.freeze()
    return code


def _main(argv: list[str] | None = None) -> int:
    # our own Ctrl-C handler: a process started with SIGINT ignored (a background job in a
    # script, some CI runners) would otherwise never see KeyboardInterrupt
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if argv is None:  # the process entry point: keys out of /proc/<pid>/environ (re-exec)
        from rlm.secrets import protect_process_secrets

        protect_process_secrets()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from rlm.cli import longrun_cli

    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    unknown = _did_you_mean(argv, parser)
    if unknown:
        print(unknown, file=sys.stderr)
        return 2
    if len(argv) > 2 and argv[0] == "goal" and argv[1] in longrun_cli.GOAL_ACTIONS:
        print(f"rlm: note: `rlm goal {argv[1]} SESSION` is deprecated; use "
              f"`rlm goal SESSION {argv[1]}`", file=sys.stderr)  # one order: <noun> SESSION <verb>
        argv[1], argv[2] = argv[2], argv[1]
    args = parser.parse_args(argv)
    if args.command is None:  # `rlm` alone: the help, not an error
        parser.print_help()
        return 0
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
