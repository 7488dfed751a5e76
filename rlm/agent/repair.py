"""A failing cell corrected from the data (issue 60).

After `KeyError: 'category'` on a column the namespace has elsewhere, or after `NameError:
name 'df' is not defined`, the host writes the failing cell again with one change the
namespace supports, runs each rewrite against a forked copy of the namespace
(`Trials.trial`: nothing a trial binds reaches the real kernel) and offers the first that
runs, whole, as the model's next cell. The 1.5B default model read "`'category'` is a
column of the DataFrame `sales`... group the DataFrame" and sent the failing cell five
more times; given the corrected cell it sent that cell and answered.

The changes, each derived from the namespace listing (which DataFrame has which columns),
never from a list of spellings:
- a column grouped on an object that lacks it (`revenue.groupby('category')`, `revenue`
  a Series computed from `sales`) -> group by the column of the DataFrame that has it,
  `revenue.groupby(sales['category'])`. Offered only where the labels line up: the
  grouped expression is built from that DataFrame alone, or it is a variable whose index
  equals the DataFrame's (checked in the trial, not assumed);
- a column of another DataFrame (`orders.groupby('city')`, `city` in `customers`, the two
  sharing `customer_id`) -> join it in first: `orders.merge(customers[['customer_id',
  'city']], on='customer_id', how='left', validate='many_to_one')`: the join may not
  repeat rows (pandas refuses one that would, so the trial fails and nothing is offered);
- a column name spelled unlike the data (`'Region'`, `'unit price'`) -> the column's own
  name (case, spaces and underscores aside, else the closest name by difflib);
- a variable that does not exist -> the closest existing name, the only input table for a
  habitual table name the cell invented (`df`), or the module's import for an alias.

A rewrite that fails in its trial is not offered; a cell that cannot be parsed as Python
(magics) or ran long before failing is not tried again. Side effects outside the process
(files a trial writes) are not undone: a trial is a cell run, as with candidates.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from rlm.protocols import Trials

MAX_REWRITES = 4  # trials per failed cell (two run at once)
MAX_CODE_CHARS = 4000  # a longer cell is not offered again whole
MAX_FAILED_S = 20.0  # a cell that ran longer than this before failing is not tried again
TRIAL_TIMEOUT_S = 30.0
GENERIC_TABLE_NAMES = frozenset({"df", "data", "dataset", "table", "frame", "df1", "data_df"})


@dataclass(frozen=True)
class Rewrite:
    code: str  # the whole corrected cell
    change: str  # what changed, for the note
    guard: str = ""  # run after the code, in the trial only (a check the offer rests on)


Frames = list[tuple[str, list[str]]]  # DataFrame name -> its columns, inputs first


class _Splice:
    """Replacements of AST nodes' source text (offsets are UTF-8 bytes, as ast gives)."""

    def __init__(self, code: str) -> None:
        self.raw = code.encode()
        starts, pos = [0], 0
        for line in self.raw.splitlines(keepends=True):
            pos += len(line)
            starts.append(pos)
        self.starts = starts

    def span(self, node: ast.AST) -> tuple[int, int]:
        n: Any = node
        return (self.starts[n.lineno - 1] + n.col_offset,
                self.starts[n.end_lineno - 1] + n.end_col_offset)

    def text(self, node: ast.AST) -> str:
        a, b = self.span(node)
        return self.raw[a:b].decode()

    def apply(self, edits: dict[tuple[int, int], str]) -> str:
        out, last = [], 0
        for (a, b), new in sorted(edits.items()):
            if a < last:  # overlapping edits (a node inside another): not one rewrite
                return ""
            out += [self.raw[last:a], new.encode()]
            last = b
        return b"".join(out + [self.raw[last:]]).decode()


def _strings(node: ast.AST) -> list[ast.Constant]:
    """The string constants a key argument names: `'a'`, `['a', 'b']`."""
    items = node.elts if isinstance(node, ast.List | ast.Tuple) else [node]
    return [c for c in items if isinstance(c, ast.Constant) and isinstance(c.value, str)]


def _uses(tree: ast.AST, key: str | None = None) -> Iterator[tuple[str, ast.expr, ast.Constant]]:
    """Where the cell names a column (`key`, or any): ("group", receiver, constant) for
    `receiver.groupby(key)` / `by=key`, ("index", receiver, constant) for `receiver[key]`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "groupby":
            args = node.args[:1] + [k.value for k in node.keywords if k.arg == "by"]
            for arg in args:
                for c in _strings(arg):
                    if key is None or c.value == key:
                        yield "group", node.func.value, c
        elif isinstance(node, ast.Subscript):
            for c in _strings(node.slice):
                if key is None or c.value == key:
                    yield "index", node.value, c


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _join_column(a: list[str], b: list[str]) -> str | None:
    shared = [c for c in a if c in b]
    ids = [c for c in shared if any(t in c.lower() for t in ("id", "key", "code"))]
    if len(ids) == 1:
        return ids[0]
    return shared[0] if len(shared) == 1 else None


def key_rewrites(code: str, key: str, frames: Frames) -> list[Rewrite]:
    """Rewrites of a cell that failed with `KeyError: key` (module docstring)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    sp = _Splice(code)
    uses = list(_uses(tree, key))
    having = [name for name, cols in frames if key in cols]
    cols_of = dict(frames)
    out: list[Rewrite] = []
    groups = [(recv, c) for kind, recv, c in uses if kind == "group"]
    for owner in having[:2]:
        edits, guards = {}, set()
        for recv, c in groups:
            names = _names_in(recv)
            if names <= {owner}:
                pass  # built from the owner alone: its labels are the owner's
            elif isinstance(recv, ast.Name) and recv.id not in cols_of:
                guards.add(f"assert {recv.id}.index.equals({owner}.index)")
            else:
                continue
            edits[sp.span(c)] = f"{owner}[{key!r}]"
        if edits and (new := sp.apply(edits)):
            out.append(Rewrite(new, f"grouped by `{owner}[{key!r}]`, the column of the "
                                    f"DataFrame that has it", "\n".join(sorted(guards))))
    for owner in having[:2]:
        edits = {}
        for _kind, recv, _c in uses:
            if isinstance(recv, ast.Name) and recv.id in cols_of and key not in cols_of[recv.id]:
                on = _join_column(cols_of[recv.id], cols_of[owner])
                if on is not None and on != key:
                    edits[sp.span(recv)] = (
                        f"{recv.id}.merge({owner}[[{on!r}, {key!r}]], on={on!r}, how='left', "
                        f"validate='many_to_one')")
        if edits and (new := sp.apply(edits)):
            out.append(Rewrite(new, f"joined `{owner}` in for its column {key!r}"))
    if not having:
        columns = list(dict.fromkeys(c for _, cols in frames for c in cols))
        # the other names the cell spells unlike the data, equal but for case and spacing
        others = {sp.span(c): repr(same[0]) for _k, _r, c in _uses(tree)
                  if c.value != key and c.value not in columns
                  and len(same := _spelled(str(c.value), columns, close=False)) == 1}
        for col in _spelled(key, columns):
            edits = {**others, **{sp.span(c): repr(col) for _k, _r, c in uses}}
            if uses and (new := sp.apply(edits)):
                out.append(Rewrite(new, f"the column is spelled {col!r}"))
    return out[:MAX_REWRITES]


def _norm(name: str) -> str:
    return "".join(ch for ch in name.casefold() if ch.isalnum())


def _spelled(key: str, columns: list[str], close: bool = True) -> list[str]:
    """The columns `key` means when it is not spelled as any: equal but for case, spaces
    and underscores, else (`close`) difflib's closest."""
    same = [c for c in columns if _norm(c) == _norm(key)]
    if same or not close:
        return same[:2]
    return difflib.get_close_matches(key, columns, n=2, cutoff=0.8)


def name_rewrites(code: str, missing: str, names: list[str], inputs: set[str],
                  frames: Frames, import_line: str | None) -> list[Rewrite]:
    """Rewrites of a cell that failed with `NameError: name 'missing' is not defined`."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    if import_line is not None:
        return [Rewrite(f"{import_line}\n{code}", f"added `{import_line}`")]
    nodes = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == missing]
    if not nodes or any(not isinstance(n.ctx, ast.Load) for n in nodes):
        return []
    picks = difflib.get_close_matches(missing, names, n=2, cutoff=0.75)
    tables = [n for n, _ in frames if n in inputs]
    if missing.lower() in GENERIC_TABLE_NAMES and len(tables) == 1 and tables[0] not in picks:
        picks.append(tables[0])
    sp = _Splice(code)
    out = []
    for name in picks:
        new = sp.apply({sp.span(n): name for n in nodes})
        if new:
            out.append(Rewrite(new, f"`{name}` for `{missing}`, which does not exist"))
    return out[:MAX_REWRITES]


def first_running(rewrites: list[Rewrite], trials: Trials, timeout: float) -> Rewrite | None:
    """The first rewrite that runs without an error in a forked trial, or None."""
    todo = [r for r in rewrites if len(r.code) <= MAX_CODE_CHARS]
    if not todo:
        return None
    codes = [f"{r.code}\n{r.guard}" if r.guard else r.code for r in todo]
    try:
        got = trials.trial(codes, timeout=timeout, cap=1000)
    except Exception:  # noqa: BLE001 - a busy or dead kernel: no offer, the error note stands
        return None
    for rewrite, trial in zip(todo, got, strict=False):
        if trial.get("status") == "ok":
            return rewrite
    return None


def note(rewrite: Rewrite) -> str:
    """What the model reads under the error: the corrected cell, whole."""
    return (f"\n[A corrected cell ran without an error on a copy of your variables "
            f"({rewrite.change}). Send it as your next cell:\n```python\n"
            f"{rewrite.code.rstrip()}\n```]")
