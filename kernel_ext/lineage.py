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
  * has an effect outside the kernel (writes or deletes a file, network, subprocess,
    sub-model calls: `effects`), or
  * mutates a name whose value was restored from the snapshot (replaying it would apply
    the mutation twice).
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
import re
from typing import Any

_MUTATORS = frozenset({
    "append", "extend", "insert", "pop", "popitem", "remove", "clear", "update", "setdefault",
    "add", "discard", "sort", "reverse", "read", "readline", "readlines", "write", "writelines",
    "seek", "send", "close", "execute", "executemany", "fetchone", "fetchall", "fetchmany",
})
# calls whose effect leaves the kernel, on any object (method names specific enough)
_EFFECT_METHODS = {
    "write_text": "writes a file", "write_bytes": "writes a file", "savefig": "writes a file",
    "to_csv": "writes a file", "to_parquet": "writes a file", "to_excel": "writes a file",
    "to_json": "writes a file", "to_pickle": "writes a file", "to_hdf": "writes a file",
    "to_feather": "writes a file", "to_sql": "writes to a database", "tofile": "writes a file",
    "commit": "commits to a database", "urlopen": "uses the network", "sendall": "uses the network",
    "connect_ex": "uses the network", "unlink": "deletes a file", "rmdir": "deletes a directory",
}
_EFFECT_FUNCTIONS = {"llm_query": "calls a sub-model", "llm_query_batched": "calls a sub-model",
                     "rlm_query": "runs a child agent", "final": "gives the final answer",
                     "final_var": "gives the final answer"}
# module.function calls that leave the kernel
_EFFECT_MODULE_CALLS = {
    "os": {"remove": "deletes a file", "unlink": "deletes a file", "rmdir": "deletes a directory",
           "removedirs": "deletes directories", "rename": "renames a file",
           "replace": "renames a file", "makedirs": "creates directories",
           "mkdir": "creates a directory", "system": "runs a shell command",
           "popen": "runs a shell command", "kill": "signals a process"},
    "json": {"dump": "writes a file"}, "pickle": {"dump": "writes a file"},
    "dill": {"dump": "writes a file"}, "joblib": {"dump": "writes a file"},
    "np": {"save": "writes a file", "savez": "writes a file", "savetxt": "writes a file"},
    "numpy": {"save": "writes a file", "savez": "writes a file", "savetxt": "writes a file"},
}
_EFFECT_MODULES = {"requests": "uses the network", "httpx": "uses the network",
                   "urllib": "uses the network", "subprocess": "runs a process",
                   "shutil": "changes files", "compact": "compacts the conversation",
                   "goal": "changes the goal", "heartbeat": "schedules a heartbeat",
                   "cron": "schedules a job"}
_BUILTINS = frozenset(dir(builtins))
_CONSUMERS = frozenset({"next", "list", "tuple", "set", "sum", "sorted", "any", "all", "max",
                        "min", "dict", "enumerate", "zip"})
RECORDS_NAME = "cells.jsonl"
_SQL_WRITE = re.compile(r"\s*(create|insert|update|delete|drop|alter|replace|attach|vacuum)\b", re.I)


def record_line(code: str, transformed: str) -> str | None:
    """One successful cell's record as a JSON line, or None when the cell binds, mutates
    and iterates nothing (`df.head()`, `print(x)`): never needed for a replay, not recorded.
    The snapshot store keeps the lines (`<snapshot dir>/cells.jsonl`, 0600, or one object
    each in an object store); cell numbers in replay reports index them."""
    rec = {**cell_record(transformed), "code": code}
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


def _open_mode(call: ast.Call) -> str:
    mode = call.args[1] if len(call.args) > 1 else next(
        (k.value for k in call.keywords if k.arg == "mode"), None)
    return mode.value if isinstance(mode, ast.Constant) and isinstance(mode.value, str) else "r"


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
        todo.extend(ast.iter_child_nodes(node))


def cell_record(code: str) -> dict[str, Any]:
    """{"reads", "binds", "mutates", "iterates", "effects"} of one (IPython-transformed) cell."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return {"reads": [], "binds": [], "mutates": [], "effects": ["could not be parsed"]}
    reads: set[str] = set()
    binds: set[str] = set()
    mutates: set[str] = set()
    iterates: set[str] = set()  # a mutation only if the value is an iterator
    effects: list[str] = []
    for node in _walk_cell(tree):
        if isinstance(node, ast.Name):
            (reads if isinstance(node.ctx, ast.Load) else binds).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            binds.update(a.asname or a.name.split(".")[0] for a in node.names if a.name != "*")
            mods = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            for m in mods:
                if m.split(".")[0] in _EFFECT_MODULES:
                    effects.append(f"imports {m.split('.')[0]} ({_EFFECT_MODULES[m.split('.')[0]]})")
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
            if attr == "open" and any(c in _open_mode(node) for c in "wax+"):
                effects.append(f"opens a file for writing (mode {_open_mode(node)!r})")
            elif root == attr and attr in _EFFECT_FUNCTIONS:
                effects.append(f"{attr}() {_EFFECT_FUNCTIONS[attr]}")
            elif root != attr and attr in _EFFECT_METHODS:
                effects.append(f"{attr}() {_EFFECT_METHODS[attr]}")
            elif root in _EFFECT_MODULE_CALLS and attr in _EFFECT_MODULE_CALLS[root]:
                effects.append(f"{root}.{attr}() {_EFFECT_MODULE_CALLS[root][attr]}")
            elif attr in ("execute", "executemany", "executescript") and node.args and \
                    isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str) and \
                    _SQL_WRITE.match(node.args[0].value):
                effects.append(f"{attr}() writes to a database")
            elif root in _EFFECT_MODULES:
                effects.append(f"{root}.{attr}() {_EFFECT_MODULES[root]}")
            if root and attr in _MUTATORS and root != attr:
                mutates.add(root)
            if root == attr and attr in _CONSUMERS and node.args and isinstance(node.args[0], ast.Name):
                iterates.add(node.args[0].id)  # next(it), list(gen): an iterator moves on
        elif isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.iter, ast.Name):
            iterates.add(node.iter.id)
    reads -= _BUILTINS - binds
    return {"reads": sorted(reads), "binds": sorted(binds), "mutates": sorted(mutates),
            "iterates": sorted(iterates), "effects": sorted(set(effects))}


def replay_plan(lost: list[str], records: list[dict[str, Any]], present: set[str],
                iterators: frozenset[str] = frozenset()
                ) -> tuple[list[int], dict[str, list[int]], dict[str, str]]:
    """(cells to run in order, name -> cells that rebuild it, name -> why it stays lost).

    `records[i]` is cell i's `cell_record` (plus "code"); `present` are the names the kernel
    holds now (restored), `iterators` those of them whose value is an iterator (iterating
    them changes them). See the module docstring for the rule."""
    def changes(rec: dict[str, Any]) -> set[str]:
        return set(rec["mutates"]) | set(rec.get("iterates", ()))

    def writers(name: str, before: int) -> list[int]:
        last = max((i for i in range(before) if name in records[i]["binds"]), default=None)
        if last is None:
            return []
        later = [i for i in range(last + 1, before) if name in changes(records[i])
                 and name not in records[i]["binds"]]
        return [last, *later]

    cells: set[int] = set()
    rebuilt: dict[str, list[int]] = {}
    why: dict[str, str] = {}
    for name in lost:
        need: set[int] = set()
        stack = [(name, len(records))]
        problem = None
        seen: set[tuple[str, int]] = set()
        while stack and problem is None:
            n, before = stack.pop()
            if (n, before) in seen:
                continue
            seen.add((n, before))
            ws = writers(n, before)
            if not ws:
                problem = f"no recorded cell defines {n}" if n == name else f"needs {n}, which no recorded cell defines"
                break
            for i in ws:
                rec = records[i]
                if rec["effects"]:
                    problem = f"cell {i} not replayed: {'; '.join(rec['effects'])}"
                    break
                clobbers = sorted((set(rec["mutates"]) | (set(rec.get("iterates", ())) & iterators))
                                  & present)
                if clobbers:
                    problem = f"cell {i} not replayed: it changes {', '.join(clobbers)}, restored from the snapshot"
                    break
                need.add(i)
                for r in rec["reads"]:
                    # a name the cell binds itself is cell-local unless an earlier cell bound it
                    if r not in present and (r not in rec["binds"] or writers(r, i)):
                        stack.append((r, i))
        if problem:
            why[name] = problem
        else:
            rebuilt[name] = sorted(need)
            cells |= need
    return sorted(cells), rebuilt, why


def _is_iterator(value: Any) -> bool:
    try:
        return hasattr(value, "__next__") and iter(value) is value
    except Exception:  # noqa: BLE001 - arbitrary user objects
        return False


def replay(ip: Any, lost: list[str], records: list[dict[str, Any]]) -> dict[str, Any]:
    """Run the plan in `ip` (silently: no snapshot hooks, no history); restored names that
    a replayed cell rebinds get their restored values back. Returns {"rebuilt": {name:
    [cells]}, "lost": {name: reason}}."""
    ns = ip.user_ns
    present = {k for k in ns if k not in lost}
    iterators = frozenset(k for k in present if _is_iterator(ns[k]))
    order, rebuilt, why = replay_plan(lost, records, present, iterators)
    keep = {k: ns[k] for k in present}
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
    return {"rebuilt": out_rebuilt, "lost": why}
