"""Where a written file's content comes from: the statements that made it.

A goal that names a file completes only when the file holds what the goal asks. The host
cannot know the right content, but it knows what the content was made from: the kernel
records which line of a cell opened which file for writing (kernel_ext.provenance's
`wrote`, from the audit hook every spelling of a write goes through), and the cells'
trees say which names each statement read and bound. A file's *sources* are the statement
that last wrote it and, transitively, the statements that bound or changed the names it
read, across every cell of the session. The goal's judge asks the conditions the goal
states (rlm.agent.policy.conditions) of those sources, not of the whole run: the logs run
of stop 66 printed the ERROR lines in one cell and left errors.txt as a cell that never
filtered them had written it.

Names come from the cell's tree as rlm.agent.policy.dataflow reads them (a compound
statement is one statement; a name bound where no statement says, by `exec` or
`globals()[...]`, has no sources: the strict side, its file then comes from nothing that
applied a condition). A failed cell counts for what ran before its error: the kernel's
binds say which statements bound names, and only lines that really opened a file wrote it.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from typing import Any

from rlm.agent.policy.dataflow import _names, _tree

MAX_STATEMENTS = 5000  # statements remembered per session; past it, no file has sources
# pandas' writers: `X.to_csv(path)` writes what the name X holds
WRITERS = frozenset({"to_csv", "to_json", "to_excel", "to_parquet", "to_markdown", "to_string",
                     "to_html", "to_feather", "to_pickle"})


def files_written(provenance: dict[str, Any] | None) -> tuple[str, ...]:
    """The paths a cell opened for writing, as the kernel recorded them (in line order)."""
    wrote = (provenance or {}).get("wrote")
    out: list[str] = []
    lines = sorted(wrote.items(), key=lambda kv: int(kv[0]) if str(kv[0]).isdigit() else 0) \
        if isinstance(wrote, dict) else []
    for _line, paths in lines:
        out += [p for p in paths if isinstance(p, str) and p not in out] \
            if isinstance(paths, list) else []
    return tuple(out)


@dataclass
class Written:
    """The sources of every file the session's cells wrote."""

    statements: list[str] = field(default_factory=list)  # statement code by id
    origin: dict[str, frozenset[int]] = field(default_factory=dict)  # name -> its sources
    files: dict[str, frozenset[int]] = field(default_factory=dict)  # abs path -> sources
    wrote: dict[str, int] = field(default_factory=dict)  # abs path -> the writing statement
    # abs path -> the names every statement that wrote it wrote through pandas' writers
    writers: dict[str, set[str]] = field(default_factory=dict)
    modules: set[str] = field(default_factory=set)  # names an import bound (`pd`)
    full: bool = False  # MAX_STATEMENTS reached: sources are no longer known

    def cell(self, code: str, provenance: dict[str, Any] | None,
             bound: Any = None) -> None:
        """Account for a cell that ran (a failed one: what ran before its error)."""
        tree = _tree(code)
        if tree is None or self.full:
            return
        wrote = (provenance or {}).get("wrote")
        wrote = wrote if isinstance(wrote, dict) else {}
        seen = None if bound is None else set(bound)
        lines = code.splitlines()
        for stmt in tree.body:
            if len(self.statements) >= MAX_STATEMENTS:
                self.full, self.files, self.wrote = True, {}, {}
                return
            end = stmt.end_lineno or stmt.lineno
            sid = len(self.statements)
            self.statements.append("\n".join(lines[stmt.lineno - 1:end]))
            reads, binds, changes, _calls = _names(stmt)
            if seen is not None:
                changes |= binds - seen  # named but not rebound (past an error): changed
                binds &= seen
            sources = frozenset({sid}).union(*(self.origin.get(n, frozenset())
                                               for n in reads | changes))
            for name in binds:
                self.origin[name] = sources
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                self.modules |= binds
            else:
                self.modules -= binds
            for name in changes:
                self.origin[name] = self.origin.get(name, frozenset()) | sources
            for line, paths in wrote.items():
                if str(line).isdigit() and stmt.lineno <= int(line) <= end:
                    for path in paths if isinstance(paths, list) else []:
                        if isinstance(path, str):
                            self.files[os.path.abspath(path)] = sources
                            self.wrote[os.path.abspath(path)] = sid
                            if (who := self._writer_of(sid)) is not None:
                                self.writers.setdefault(os.path.abspath(path), set()).add(who)

    def sources(self, path: str | os.PathLike[str]) -> list[str] | None:
        """The code of the statements `path`'s content comes from, in order; None when no
        cell of the session wrote it (or their number passed MAX_STATEMENTS)."""
        got = self.files.get(os.path.abspath(path))
        if got is None:
            got = self.files.get(os.path.realpath(path))
        return None if got is None else [self.statements[i] for i in sorted(got)]

    def writer(self, path: str | os.PathLike[str]) -> str | None:
        """The name whose value the statement that last wrote `path` wrote through one of
        pandas' writers (`region_summary` of `region_summary.round(2).to_csv(...)`), or
        None: a host note that shows a fix names it instead of a placeholder (the 1.5B
        model sent `table[[...]].to_csv(...)` from the example as it was, five times)."""
        sid = self.wrote.get(os.path.abspath(path))
        if sid is None:
            sid = self.wrote.get(os.path.realpath(path))
        return None if sid is None else self._writer_of(sid)

    def all_writers(self, path: str | os.PathLike[str]) -> set[str]:
        """Every name the session's cells wrote `path` from through pandas' writers: its
        earlier versions' too (a table the model replaced is its own superseded attempt)."""
        return set(self.writers.get(os.path.abspath(path))
                   or self.writers.get(os.path.realpath(path)) or ())

    def _writer_of(self, sid: int) -> str | None:
        tree = _tree(self.statements[sid])
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in WRITERS:
                base: ast.expr = node.func.value
                while isinstance(base, (ast.Attribute, ast.Subscript, ast.Call)):
                    base = base.func if isinstance(base, ast.Call) else base.value
                return base.id if isinstance(base, ast.Name) and base.id not in self.modules \
                    else None  # `pd.DataFrame(rows).to_csv(...)` wrote no name
        return None
