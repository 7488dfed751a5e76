"""Why a `grep -q` gate failed: it prints nothing, so the model reads only "exit code 1".

The long-run quarters run (stop 71) wrote `store: S07, quarter: q3` (the right store and
quarter) and the gate `grep -q '^store: S[0-9]*, quarter: Q[1-4]' best_store.txt` failed
silently; the 1.5B model ran the same cell until the run stopped. `grep_misses(command,
cwd)` reads each `grep -q PATTERN FILE` of a gate command (parts joined by `&&`, `||`,
`;`), and for a file of `cwd` that no line matches, says so: the line that matches once
case is ignored, or the file's first lines. The pattern is read as Python reads a regular
expression (grep's basic and extended forms agree on the usual `^`, `$`, `[...]`, `*`,
`.`); one Python cannot compile, a flag it does not know, a file outside `cwd` or not a
regular file: nothing is said. Files are read without following links (rlm.safeio).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from rlm import safeio

READ_LIMIT = 1 << 20
MAX_LINE_CHARS = 200
_JOINS = re.compile(r"&&|\|\||;")
_KNOWN = set("qEGiswx")


def grep_misses(command: str, cwd: Path) -> str:
    """What the gate's `grep -q` parts found missing, one line each; "" for nothing."""
    out: list[str] = []
    for part in _JOINS.split(command):
        try:
            words = shlex.split(part)
        except ValueError:
            continue
        if not words or words[0] != "grep":
            continue
        flags = "".join(w[1:] for w in words[1:] if w.startswith("-") and w != "-")
        args = [w for w in words[1:] if not w.startswith("-") or w == "-"]
        if "q" not in flags or set(flags) - _KNOWN or len(args) < 2:
            continue
        pattern, files = args[0], args[1:]
        try:
            rx = re.compile(pattern, re.I if "i" in flags else 0)
            loose = re.compile(pattern, re.I)
        except re.error:
            continue
        for name in files:
            why = _miss(rx, loose, pattern, name, cwd)
            if why:
                out.append(why)
    return "\n".join(out)


def _miss(rx: re.Pattern[str], loose: re.Pattern[str], pattern: str, name: str,
          cwd: Path) -> str:
    try:
        text = safeio.read_bytes(cwd, name, READ_LIMIT).decode(errors="replace")
    except (OSError, ValueError):
        return ""
    lines = text.splitlines()
    if any(rx.search(line) for line in lines):
        return ""
    near = next((line for line in lines if loose.search(line)), None)
    if near is not None and rx.flags & re.I == 0:
        return (f"No line of {name} matches `{pattern}`; its line {near[:MAX_LINE_CHARS]!r} "
                "does once case is ignored: write it in the case the check asks.")
    shown = "; ".join(repr(line[:MAX_LINE_CHARS]) for line in lines[:3]) or "it is empty"
    return f"No line of {name} matches `{pattern}` (its first lines: {shown})."
