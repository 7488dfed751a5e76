"""Rebuild by replay: which recorded cells would bring back a name that could not be
snapshotted (a generator, an open file, a database connection), and running them.

Pure planning (`cell_record`, `replay_plan`) apart from running (`replay`), as the
compaction module splits planning from its one LLM call.

Each successful cell is recorded (kernel_ext.snapshot stores `record_line(code)` through the
snapshot store: `<snapshot dir>/cells.jsonl`, or one object per cell): the names it reads,
binds, and mutates (by the AST), and its effects outside the kernel. To rebuild a lost
name N, `replay_plan` takes the last cell that binds N, every later cell that mutates N (a
file's read position, a generator's progress), and — transitively — the cells that bind
the names those read and that are not in the kernel now; it runs them in recorded order.
A needed cell is NOT replayed, and N is reported lost with the reason, when the cell
  * is not known to stay in the kernel: replay is by allow-list (kernel_ext.lineage_rules
    says what a replayable cell may do; anything else is an `effect`: a shell escape, a
    non-data import, a file opened for writing, a socket, a sub-model call, ...), or
  * uses a held (restored) value that leaves the kernel or cannot be checked (`kinds`:
    a module outside the allow-list, a function of one, an instance of a class a cell
    defined), or runs SQL on anything but an in-memory sqlite3 database, or
  * mutates a name whose value was restored from the snapshot (replaying it would apply
    the mutation twice).
A function or class a needed cell uses and that came back from the snapshot is re-defined
from its recorded cell first (that cell passes the same check), never trusted as restored.
Names that a replayed cell rebinds and that were restored are put back to their restored
values afterwards (the snapshot is newer than the replay).

Mutation is recognised syntactically (documented limit): `x.attr = ...`, `x[...] = ...`,
`del x[...]`, `x += ...` on an attribute/subscript, and calls of common mutating methods on
a name (`append`, `update`, `read`, `next(x)`, ...).
"""

from __future__ import annotations

import ast
import builtins
import json
from collections.abc import Mapping
from typing import Any

from kernel_ext import cell_syntax
from kernel_ext import lineage_rules as rules

_MUTATORS = frozenset({
    "append", "extend", "insert", "pop", "popitem", "remove", "clear", "update", "setdefault",
    "add", "discard", "sort", "reverse", "read", "readline", "readlines", "write", "writelines",
    "seek", "send", "close", "execute", "executemany", "executescript", "fetchone", "fetchall",
    "fetchmany", "commit", "rollback",
})
_BUILTINS = frozenset(dir(builtins))
_CONSUMERS = frozenset({"next", "list", "tuple", "set", "sum", "sorted", "any", "all", "max",
                        "min", "dict", "enumerate", "zip"})
RECORDS_NAME = "cells.jsonl"


def record_line(code: str, transformed: str, ns: Mapping[str, Any] | None = None,
                parsed: cell_syntax.Parsed | None = None) -> str | None:
    """One successful cell's record as a JSON line, or None when the cell binds, mutates
    and iterates nothing (`df.head()`, `print(x)`): never needed for a replay, not recorded.
    `ns` is the kernel's namespace after the cell (what its names refer to). The snapshot
    store keeps the lines (`<snapshot dir>/cells.jsonl`, 0600, or one object each in an
    object store); cell numbers in replay reports index them."""
    rec = {**cell_record(transformed, ns, parsed), "code": code, "rules": rules.RULES_VERSION}
    if not (rec["binds"] or rec["mutates"] or rec["iterates"]):
        return None
    return json.dumps(rec)


def parse_records(lines: list[str]) -> list[dict[str, Any]]:
    """The recorded cells, oldest first; a torn line (a kill mid-append) is ignored."""
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def _call_name(func: ast.expr) -> tuple[str | None, str | None]:
    """(root name, called attribute or name) of a call's function expression."""
    if isinstance(func, ast.Name):
        return func.id, func.id
    if isinstance(func, ast.Attribute):
        root: ast.expr = func
        while isinstance(root, (ast.Attribute, ast.Call, ast.Subscript)):
            root = root.func if isinstance(root, ast.Call) else root.value
        return (root.id if isinstance(root, ast.Name) else None), func.attr
    return None, None


def _target_root(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _walk_cell(tree: ast.AST) -> Any:
    """ast.walk without function and lambda bodies: they run when called, not when the
    cell runs (their decorators, defaults and the bound name are still seen)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, _FUNCTIONS):
            args = node.args
            todo += [*args.defaults, *(d for d in args.kw_defaults if d is not None)]
            if not isinstance(node, ast.Lambda):
                todo += node.decorator_list
                if node.returns is not None:
                    todo.append(node.returns)
            continue
        todo += cell_syntax.children(node)


_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _comprehension_names(nodes: list[ast.AST]) -> set[int]:
    """ids of the Name nodes that are a comprehension's own variables: `i` in
    `(i for i in range(3))` is local to it (Python 3), not a name the cell binds or reads,
    so two cells that each use an `i` there do not depend on each other. The first
    `for`'s iterable is evaluated outside, so its names stay the cell's."""
    out: set[int] = set()
    for comp in nodes:
        if not isinstance(comp, _COMPREHENSIONS):
            continue
        local = {n.id for g in comp.generators for n in cell_syntax.walk(g.target)
                 if isinstance(n, ast.Name)}
        outer = {id(n) for n in cell_syntax.walk(comp.generators[0].iter)}
        out |= {id(n) for n in cell_syntax.walk(comp) if isinstance(n, ast.Name)
                and n.id in local and id(n) not in outer}
    return out


def cell_record(code: str, ns: Mapping[str, Any] | None = None,
                parsed: cell_syntax.Parsed | None = None) -> dict[str, Any]:
    """{"reads", "binds", "mutates", "iterates", "effects", "loads", "roots", "defines",
    "db", "db_uses"} of one (IPython-transformed) cell; `effects` are the reasons it may
    not be replayed (kernel_ext.lineage_rules), empty when it is known to stay in the
    kernel. `ns`: what the cell's names refer to (the kernel's namespace after it ran)."""
    parsed = parsed or cell_syntax.parse(code)  # `parsed`: of `code`, by the caller
    if parsed is None:
        return {"reads": [], "binds": [], "mutates": [], "iterates": [], "effects": ["could not be parsed"]}
    tree = parsed.tree
    reads: set[str] = set()
    binds: set[str] = set()
    mutates: set[str] = set()
    iterates: set[str] = set()  # a mutation only if the value is an iterator
    local = _comprehension_names(parsed.nodes)
    # the walk that skips function bodies is the whole walk when there are none
    cell_nodes = _walk_cell(tree) if any(isinstance(n, _FUNCTIONS) for n in parsed.nodes) \
        else parsed.nodes
    for node in cell_nodes:
        if isinstance(node, ast.Name):
            if id(node) not in local:
                (reads if isinstance(node.ctx, ast.Load) else binds).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            binds.update(a.asname or a.name.split(".")[0] for a in node.names if a.name != "*")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            binds.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for t in targets:
                if isinstance(t, (ast.Attribute, ast.Subscript)):
                    root = _target_root(t)
                    if root:
                        mutates.add(root)
        elif isinstance(node, ast.Call):
            root, attr = _call_name(node.func)
            if root and attr in _MUTATORS and root != attr:
                mutates.add(root)
            if root == attr and attr in _CONSUMERS and node.args and isinstance(node.args[0], ast.Name):
                iterates.add(node.args[0].id)  # next(it), list(gen): an iterator moves on
            if attr in rules.SQL_CON_CALLS and len(node.args) > 1 and isinstance(node.args[1], ast.Name):
                mutates.add(node.args[1].id)  # df.to_sql('t', con) changes the database
        elif isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.iter, ast.Name):
            iterates.add(node.iter.id)
    reads -= _BUILTINS - binds
    c = rules.check(tree, ns, parsed.nodes)
    return {"reads": sorted(reads), "binds": sorted(binds), "mutates": sorted(mutates),
            "iterates": sorted(iterates), "effects": sorted(c.effects), "loads": sorted(c.loads),
            "roots": sorted(c.roots), "defines": sorted(c.defs & binds), "db": c.db,
            "db_uses": sorted(c.db_uses)}


Kinds = Mapping[str, tuple[str, str]]  # held name -> lineage_rules.classify of its value


def replay_plan(lost: list[str], records: list[dict[str, Any]], present: set[str],
                iterators: frozenset[str] = frozenset(), kinds: Kinds | None = None,
                ) -> tuple[list[int], dict[str, list[int]], dict[str, str]]:
    """(cells to run in order, name -> cells that rebuild it, name -> why it stays lost).

    `records[i]` is cell i's `cell_record` (plus "code"); `present` are the names the kernel
    holds now (restored), `iterators` those of them whose value is an iterator (iterating
    them changes them), `kinds` what the held values are (`lineage_rules.classify`): a
    replayed cell may not use a held value that leaves the kernel, and a held function a
    cell defined is first re-defined from its recorded cell. See the module docstring."""
    planner = _Planner(records, present, iterators, kinds or {})
    cells: set[int] = set()
    rebuilt: dict[str, list[int]] = {}
    why: dict[str, str] = {}
    for name in lost:
        need, problem = planner.cells_for(name)
        if problem:
            why[name] = problem
        else:
            rebuilt[name] = sorted(need)
            cells |= need
    return sorted(cells), rebuilt, why


class _Planner:
    """The rule of `replay_plan` over one set of records (pure)."""

    def __init__(self, records: list[dict[str, Any]], present: set[str],
                 iterators: frozenset[str], kinds: Kinds):
        self.records, self.present, self.iterators, self.kinds = records, present, iterators, kinds

    def binder(self, name: str, before: int) -> int | None:
        return max((i for i in range(before) if name in self.records[i]["binds"]), default=None)

    def writers(self, name: str, before: int) -> list[int]:
        """The last cell before `before` that binds `name`, and the later ones changing it."""
        last = self.binder(name, before)
        if last is None:
            return []
        later = [i for i in range(last + 1, before) if name in _changes(self.records[i])
                 and name not in self.records[i]["binds"]]
        return [last, *later]

    def memory_db(self, name: str, at: int) -> bool:
        """`name` in cell `at` is an in-memory sqlite3 database (or a cursor of one)."""
        for _ in range(len(self.records) + 1):
            db = self.records[at].get("db") or {}
            if name not in db:
                j = self.binder(name, at)
                if j is None or name not in (self.records[j].get("db") or {}):
                    return False
                at, db = j, self.records[j]["db"]
            if db[name] == rules.MEMORY_DB:
                return True
            name = db[name]
        return False

    def refusal(self, i: int) -> str | None:
        """Why cell i may not be replayed now, or None."""
        rec = self.records[i]
        if rec["effects"]:
            return "; ".join(rec["effects"])
        changed = set(rec["mutates"]) | (set(rec.get("iterates", ())) & self.iterators)
        clobbers = sorted(changed & self.present)
        if clobbers:
            return f"it changes {', '.join(clobbers)}, restored from the snapshot"
        for n in sorted(set(rec.get("loads", ())) & self.present):
            kind, what = self.kinds.get(n, ("data", ""))
            if kind in ("unsafe", "user-object") or (kind == "object" and n in rec.get("roots", ())):
                return f"it uses {n}, restored from the snapshot as {what}"
        for n in rec.get("db_uses", ()):
            if not self.memory_db(n, i):
                return f"it runs SQL on {n}, which is not an in-memory sqlite3 database"
        return None

    def cells_for(self, name: str) -> tuple[set[int], str | None]:
        """The cells that rebuild `name`, or the first reason they cannot."""
        need: set[int] = set()
        # (name, before, the cell that needs it, whether it must be a def/class there)
        stack: list[tuple[str, int, int | None, bool]] = [(name, len(self.records), None, False)]
        seen: set[tuple[str, int]] = set()
        while stack:
            n, before, by, must_define = stack.pop()
            if (n, before) in seen:
                continue
            seen.add((n, before))
            ws = self.writers(n, before)
            if must_define and (not ws or n not in self.records[ws[0]].get("defines", ())):
                return need, (f"cell {by} not replayed: it uses {n}, a function or class restored "
                              "from the snapshot that no earlier recorded cell defines")
            if not ws:
                return need, (f"no recorded cell defines {n}" if n == name
                              else f"needs {n}, which no recorded cell defines")
            for i in ws:
                bad = self.refusal(i)
                if bad:
                    via = f" (cell {by} needs {n} from it)" if by is not None and by != i else ""
                    return need, f"cell {i} not replayed: {bad}{via}"
                need.add(i)
                stack += self._inputs(i)
        return need, None

    def _inputs(self, i: int) -> list[tuple[str, int, int | None, bool]]:
        """What cell i needs first: lost names it reads, and the recorded definitions of
        held functions and classes it uses (re-defined, never trusted as restored)."""
        rec = self.records[i]
        out: list[tuple[str, int, int | None, bool]] = []
        for r in rec["reads"]:
            # a name the cell binds itself is cell-local unless an earlier cell bound it
            if r not in self.present and (r not in rec["binds"] or self.writers(r, i)):
                out.append((r, i, i, False))
        for r in sorted(set(rec.get("loads", ())) & self.present):
            if self.kinds.get(r, ("data", ""))[0] == "user" and r not in rec["binds"]:
                out.append((r, i, i, True))
        return out


def _changes(rec: dict[str, Any]) -> set[str]:
    return set(rec["mutates"]) | set(rec.get("iterates", ()))


def _is_iterator(value: Any) -> bool:
    try:
        return hasattr(value, "__next__") and iter(value) is value
    except Exception:  # noqa: BLE001 - arbitrary user objects
        return False


def plan(ip: Any, lost: list[str], records: list[dict[str, Any]]
         ) -> tuple[list[int], dict[str, list[int]], dict[str, str]]:
    """`replay_plan` for the kernel `ip` holds now (nothing runs)."""
    ns = ip.user_ns
    present = {k for k in ns if k not in lost}
    iterators = frozenset(k for k in present if _is_iterator(ns[k]))
    records = [rechecked(r, ip.transform_cell) for r in records]
    return replay_plan(lost, records, present, iterators, rules.iter_kinds(ns, present))


def rechecked(rec: dict[str, Any], transform: Any) -> dict[str, Any]:
    """A record made under older rules (a session recorded before an upgrade) with its code
    checked again by today's, syntactically: the effects can only grow."""
    if rec.get("rules") == rules.RULES_VERSION or "code" not in rec:
        return rec
    try:
        now = cell_record(transform(str(rec["code"])))["effects"]
    except Exception:  # noqa: BLE001 - code the transform cannot read: not replayed
        now = ["could not be checked again"]
    return {**rec, "effects": sorted(set(rec.get("effects", ())) | set(now))}


def describe_plan(order: list[int], records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cells a replay would run, for the user: number and first line of code."""
    out = []
    for i in order:
        lines = [ln for ln in str(records[i].get("code", "")).splitlines() if ln.strip()]
        first = lines[0][:100] if lines else ""
        out.append({"cell": i, "code": first + (" …" if len(lines) > 1 else "")})
    return out


def replay(ip: Any, lost: list[str], records: list[dict[str, Any]]) -> dict[str, Any]:
    """Run the plan in `ip` (silently: no snapshot hooks, no history); restored names that
    a replayed cell rebinds get their restored values back. Returns {"rebuilt": {name:
    [cells]}, "lost": {name: reason}, "cells": describe_plan(...)}."""
    ns = ip.user_ns
    order, rebuilt, why = plan(ip, lost, records)
    keep = {k: ns[k] for k in ns if k not in lost}
    failed: str | None = None
    for i in order:
        res = ip.run_cell(records[i]["code"], store_history=False, silent=True)
        if not res.success:
            err = res.error_in_exec or res.error_before_exec
            failed = f"replaying cell {i} failed: {type(err).__name__}: {err}"[:300]
            break
    for k, v in keep.items():
        if ns.get(k) is not v:
            ns[k] = v
    out_rebuilt: dict[str, list[int]] = {}
    for name, cs in rebuilt.items():
        if failed is None and name in ns:
            out_rebuilt[name] = cs
        else:
            why[name] = failed or "replayed, but the cells did not define it"
    return {"rebuilt": out_rebuilt, "lost": why, "cells": describe_plan(order, records)}
