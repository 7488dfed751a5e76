"""The names a cell binds, as every host reader takes them: the kernel's word.

The kernel observes them (kernel_ext.provenance: each user name's object before and after
the cell) and the host keeps them in `CellResult.binds`, also in the session log (a tool
entry's `cell`). Readers that want the names a cell *keeps* as its results (stuck
detection's "a new name is progress", the prune's "every name it bound was rebound by a
later cell") leave out a loop's variable: `kept_names`. Nothing on the host derives the
bound names from the code; the code says only which of them a loop bound.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

# statements (and the walrus) that bind a name other than as a loop's target
_ASSIGNS = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr, ast.Import,
            ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
            ast.With, ast.AsyncWith, ast.Delete)


def loop_variables(code: str) -> set[str]:
    """Names the cell binds only as a `for` target (`for i in ...`; not when it also
    assigns them otherwise). Comprehension variables bind nothing in the namespace, so
    the kernel never reports them. A cell that does not parse has none."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return set()
    loops: set[str] = set()
    other: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.AsyncFor)):
            loops.update(n.id for n in ast.walk(node.target) if isinstance(n, ast.Name))
        elif isinstance(node, _ASSIGNS):
            other.update(_bound_by(node))
    return loops - other


def _bound_by(node: ast.AST) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    if isinstance(node, (ast.With, ast.AsyncWith)):
        targets: list[ast.AST] = [i.optional_vars for i in node.items if i.optional_vars]
    elif isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, ast.Delete):
        targets = list(node.targets)
    else:
        targets = [node.target]  # type: ignore[attr-defined]
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def kept_names(binds: Iterable[str] | None, code: str) -> frozenset[str]:
    """The names the cell bound (the kernel's `binds`; None: not known, so none) that it
    keeps as results: its loop variables left out."""
    if not binds:
        return frozenset()
    return frozenset(binds) - loop_variables(code)
