"""`rlm memory show|log|init [--dir DIR]`: the project memory of a directory (rlm.memory)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rlm.cli.render import terminal_safe
from rlm.errors import RlmError
from rlm.memory import ProjectMemory
from rlm.memory.head import MemoryHead

ACTIONS = ("show", "log", "init")


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    m = sub.add_parser("memory", help="show, log or initialise the project memory (.agent/)")
    m.add_argument("action", nargs="?", default="show", choices=ACTIONS,
                   help="show: the block the model sees at the head of its context; log: "
                        "history.log; init: create .agent/ from the templates (default: show)")
    m.add_argument("--dir", default=".", help="the project directory (default: here)")
    m.add_argument("-n", type=int, default=50, metavar="N",
                   help="log: the N newest lines (default 50; 0 for all kept in view)")
    m.add_argument("--json", action="store_true", help="print one JSON object")


def cmd_memory(args: argparse.Namespace) -> int:
    root = Path(args.dir).expanduser()
    if not root.is_dir():
        raise RlmError(f"--dir {args.dir}: no such directory")
    memory = ProjectMemory(root.resolve())
    if args.action == "init":
        made = memory.init()
        if args.json:
            print(json.dumps({"dir": str(memory.dir), "created": made}))
        else:
            print(f"{memory.dir}: " + (f"created {', '.join(made)}" if made
                                       else "already there, nothing changed"))
        return 0
    if not memory.exists():
        raise RlmError(f"no project memory in {root.resolve()} (no .agent/ directory): "
                       "`rlm memory init` creates it, or a run's first memory write does")
    if args.action == "log":
        lines, total = memory.history_lines(args.n if args.n > 0 else 10**9)
        if args.json:
            print(json.dumps({"dir": str(memory.dir), "total": total,
                              "lines": [_parsed(ln) for ln in lines]}))
        else:
            for ln in lines:
                print(terminal_safe(_line_text(ln)))
        return 0
    head = MemoryHead(memory, lambda: None, lambda: [])
    block = head.block()
    text = block.text
    if args.json:
        print(json.dumps({"dir": str(memory.dir), "text": text, "tokens": block.tokens,
                          "budget_tokens": head.budget(), "cuts": list(block.cuts),
                          "files": {n: memory.read(n) for n in ("state", "conventions", "context")}}))
    else:
        print(terminal_safe(text))
    return 0


def _parsed(line: str) -> dict[str, object]:
    try:
        value = json.loads(line)
    except ValueError:
        return {"raw": line}
    return value if isinstance(value, dict) else {"raw": line}


def _line_text(line: str) -> str:
    d = _parsed(line)
    if "raw" in d:
        return str(d["raw"])
    return f"{d.get('ts', '?')}  {d.get('action', '?')}  {d.get('target', '')}  {d.get('note', '')}".rstrip()
