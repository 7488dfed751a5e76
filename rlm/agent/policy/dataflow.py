"""Which outputs depend on the task's data. Pure but for IPython's cell transform.

"Verified" (rlm.agent.policy.verify) counts a figure only when it was printed by code that
depends on the task's data, never by code that made it from literals (`999 + 1`, a loop
counter, a function that returns a constant, `d.get("k", 1000)`, `x := 1000`, ...): the
rule is data dependence, so no spelling of a literal computation gets through.

The *task's data* is what the run was given and what it fetched: the input variables
(files and context the host loaded: `agent.input_names()`), every file a cell read (the
kernel's audit hook names the line that opened it: kernel_ext.provenance), and the answers
of sub-calls and children (`llm_query`, `rlm_query`, `rlm_spawn`, ...). A top-level
statement of a cell *depends on data* when it reads a name that holds data, or its lines
read a file, or it calls a sub-call; the names it binds or changes then hold data, and a
statement that does not depend on data rebinds its names to values that do not. A compound
statement (a loop, a `with`, a function definition) is one statement: what any part of it
reads, all of it binds (a function that reads a data name holds data: calling it does).

What a line said is recorded by the kernel (kernel_ext.provenance: per line, the figures
and words it printed, displayed or returned); the evidence of a cell is what its data-
dependent lines said. Without that record (a kernel without kernel_ext's provenance: an
older gateway, a log written before it) the cell counts whole when any of its statements
depends on data; lines whose output was too long to read whole (`partial`) count whole too.

Which names a cell bound is the kernel's word (`CellResult.binds`, kernel_ext.provenance),
as for every host reader; the cell's tree only places them on its statements (which one
read what). A name the kernel saw bound where no statement says (`exec`, `globals()[...]`,
a function's `global`) holds no data; one a statement names but the kernel did not see
rebound (past a failed cell's error) is changed at most. An imported
notebook's cells (`imported_names`) ran elsewhere: their tree's names are all there is.

Limits: names are read from the cell's tree, so data reached only through `globals()[...]`
or `eval` is not seen (an output is then not counted: the strict side); a mutation through
a method is seen for the usual mutators only, so `d.update(...)` with data makes `d` hold
data but `weird_mutator(d, data)` does not (strict again); a compound statement that reads
data counts whole, so a literal printed inside a loop over data is counted with it.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

# kernel API calls whose answers are data (kernel_ext.api: sub-calls and children)
SOURCES = frozenset({"llm_query", "llm_query_batched", "rlm_query", "rlm_spawn", "rlm_gather",
                     "rlm_wait"})
MUTATORS = frozenset({"append", "extend", "insert", "update", "setdefault", "add", "__setitem__"})


@dataclass(frozen=True)
class CellFlow:
    """What a cell's outputs prove: `depends` (a statement of it depends on data),
    `evidence` (the tokens its data-dependent lines said, one per line of text; None when
    the kernel sent no line record: the cell's whole output counts when it depends) and
    `final_depends` (the statement that called final()/final_var() depends on data, or
    the name final_var() names holds data)."""

    depends: bool
    evidence: str | None = None
    final_depends: bool = False


@dataclass
class DataFlow:
    """The names that hold data, across every cell of the session so far."""

    derived: set[str] = field(default_factory=set)

    def cell(self, code: str, provenance: dict[str, Any] | None,
             bound: Iterable[str] | None = None) -> CellFlow:
        """Account for a cell (a failed one: what ran before its error); what its outputs
        prove. `bound`: the names the cell bound (CellResult.binds, the kernel's word;
        None: not known, the tree's names stand). The tree says only which statement
        bound a name: a name the kernel did not see rebound (a failed cell's statements
        after its error, `lst += data` there) is changed at most, and one it saw bound
        where no statement says (an `exec`, `globals()[...]`, a function's `global`) holds
        no data (the strict side)."""
        tree = _tree(code)
        if tree is None:
            return CellFlow(False)
        seen = None if bound is None else set(bound)
        read_lines = set((provenance or {}).get("read") or [])
        data_lines: set[int] = set()
        final_depends = False
        placed: set[str] = set()
        for stmt in tree.body:
            lines = set(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
            reads, binds, changes, calls = _names(stmt)
            if seen is not None:  # what it names but did not rebind is changed at most
                changes |= binds - seen
                binds &= seen
                placed |= binds
            depends = bool(reads & self.derived or lines & read_lines or calls & SOURCES)
            if depends:
                data_lines |= lines
                self.derived |= binds | changes
            else:
                self.derived -= binds
            final_depends = _final_depends(stmt, depends, self.derived) or final_depends
        if seen is not None:
            self.derived -= seen - placed
        evidence = None
        if provenance is not None and isinstance(provenance.get("said"), dict):
            said: dict[str, list[str]] = provenance["said"]
            partial = set(provenance.get("partial") or [])
            if not (partial & data_lines):
                evidence = "\n".join(" ".join(tokens) for line, tokens in said.items()
                                     if line.isdigit() and int(line) in data_lines)
        return CellFlow(bool(data_lines), evidence, final_depends)


def imported_names(entries: Sequence[Any]) -> set[str]:
    """The names the cells of an imported notebook (`--notebook`: the user's own work,
    part of the task's data) bound."""
    from rlm.session.branch import custom_entries

    names: set[str] = set()
    for e in custom_entries(entries, "notebook_import"):  # from the log's index
        for c in (e.data or {}).get("cells") or [] if isinstance(e.data, dict) else []:
            tree = _tree(c.get("code") or "") if isinstance(c, dict) else None
            for stmt in tree.body if tree is not None else []:
                names |= _names(stmt)[1]
    return names


def recorded_names(entries: Sequence[Any]) -> set[str]:
    """The names holding the task's data when the session's last run ended, as its end
    entry recorded them (from the log's index, not the whole branch)."""
    from rlm.session.branch import custom_entries

    ends = [e for kind in ("final", "run_end") for e in custom_entries(entries, kind)[-1:]]
    last = max(ends, key=lambda e: e.timestamp, default=None)
    names = (last.data or {}).get("data") if last is not None and isinstance(
        last.data, dict) else None
    return {n for n in names if isinstance(n, str)} if isinstance(names, list) else set()


@functools.cache
def _transformer() -> Any:
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager()


@functools.lru_cache(maxsize=64)
def _tree(code: str) -> ast.Module | None:
    """The cell as the kernel ran it (IPython's transforms keep its lines); cached, since
    each cell is read by the data flow and by rlm.agent.policy.written (read only)."""
    try:
        code = _transformer().transform_cell(code)
    except Exception:  # noqa: BLE001 - a cell IPython cannot transform is parsed as it is
        pass
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError):
        return None


def _root(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _names(stmt: ast.stmt) -> tuple[set[str], set[str], set[str], set[str]]:
    """(names read, names bound, names changed in place, names called) anywhere in `stmt`."""
    reads: set[str] = set()
    binds: set[str] = set()
    changes: set[str] = set()
    calls: set[str] = set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name):
            (reads if isinstance(node.ctx, ast.Load) else binds).add(node.id)
        elif isinstance(node, ast.AugAssign):  # n += 1 reads n: it keeps what n held
            if (root := _root(node.target)) is not None:
                reads.add(root)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            binds.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            binds.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(
                node.ctx, (ast.Store, ast.Del)):
            if (root := _root(node)) is not None:
                changes.add(root)
        elif isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name):
                calls.add(node.func.id)
            elif isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
                if (root := _root(node.func.value)) is not None:
                    changes.add(root)
    return reads, binds, changes, calls


def _final_depends(stmt: ast.stmt, depends: bool, derived: set[str]) -> bool:
    """`stmt` calls final() on data, or final_var() naming a name that holds data."""
    for node in ast.walk(stmt):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id == "final" and depends:
            return True
        if node.func.id == "final_var" and node.args and isinstance(node.args[0], ast.Constant):
            if node.args[0].value in derived:
                return True
    return False
