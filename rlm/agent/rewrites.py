"""The rewrites a failing cell gets from the data (rlm.agent.repair): each reads the error,
the cell's syntax tree and the namespace listing (`Scope`: which DataFrame has which
columns of which dtype), and returns whole corrected cells. None is a spelling list: a
rewrite names what the data names, and the trial (rlm.agent.repair) decides.

- `KeyError` on a column: grouped by the column of the table whose labels the grouped
  object has; joined in from another table on their one shared id, many-to-one; spelled
  as the data spells it (`key_rewrites`);
- `NameError`: the closest existing name, the only input table for an invented table
  name, or the module's import for an alias (`name_rewrites`);
- a reduction over text columns (`dtype 'str' does not support operation 'mean'`):
  `numeric_only=True` on the cell's reductions of that name (`reduction_rewrites`);
- `resample` on a table without a DatetimeIndex: `on=` its datetime column, parsed
  first when the column holds date text (`resample_rewrites`);
- a comparison Python grouped around a bare `&`/`|` (`d >= '2025' & d <= '2026'`, rule
  MaskPrecedence's finding): each comparison in parentheses (`mask_rewrites`);
- an error that names its own replacement (`'M' is no longer supported ... Please use
  'ME' instead`): that replacement for the literal (`replacement_rewrites`);
- and with a `KeyError`, first: a row's label taken as a value (`t.groupby('k')['v'].
  idxmax()` read as if it held the rows' columns, its `month`): the rows it labels read
  with `t.loc[...]`, where the table's labels are row numbers (`row_label_rewrites`).
"""

from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from rlm.agent import notices

MAX_REWRITES = 4  # per error
GENERIC_TABLE_NAMES = frozenset({"df", "data", "dataset", "table", "frame", "df1", "data_df"})
REDUCTIONS = frozenset({"mean", "median", "sum", "std", "var", "min", "max", "prod", "sem",
                        "quantile", "corr", "cov", "skew", "kurt"})
_DATE_NAME = re.compile(r"date|time|day|month|year|period|when|stamp", re.I)
_USE_INSTEAD = re.compile(r"'([^'\n]{1,40})' is (?:no longer supported|deprecated|not supported)"
                          r"[^'\n]*?[Pp]lease use '([^'\n]{1,40})' instead")
_NOT_DATETIME_INDEX = "Only valid with DatetimeIndex"
_MASK_ERROR = re.compile(r"unsupported operand type\(s\) for [&|]|truth value of a \w+ is ambiguous")


@dataclass(frozen=True)
class Rewrite:
    code: str  # the whole corrected cell
    change: str  # what changed, for the note
    guard: str = ""  # run after the code, in the trial only (a check the offer rests on)


@dataclass(frozen=True)
class Scope:
    """What the namespace listing says: its DataFrames with (column, dtype) pairs, inputs
    first; every name; the input names."""

    frames: list[tuple[str, list[tuple[str, str]]]]
    names: list[str]
    inputs: set[str]
    # the kernel's search of its text columns for a value (ValueLookup.where_value)
    where: Callable[[str], list[dict[str, str]]] | None = None

    @classmethod
    def of(cls, frames: list[tuple[str, list[tuple[str, str]]]], names: list[str],
           inputs: set[str], where: Callable[[str], list[dict[str, str]]] | None = None
           ) -> Scope:
        """A scope from the kernel's listing. The kernel is untrusted and its names go into
        code: identifiers only (a planted `globals()['t; import os']` is never spliced into
        a cell); column names are always written as literals (repr)."""
        return cls([f for f in frames if f[0].isidentifier()],
                   [n for n in names if n.isidentifier()], inputs, where)

    def holding(self, value: str) -> list[tuple[str, str]]:
        """(table, column) pairs whose text column holds `value` (exactly, else but for
        case and spaces), from the kernel; none when it cannot say."""
        try:
            hits = self.where(value) if self.where is not None else []
        except Exception:  # noqa: BLE001 - a busy kernel: no such rewrite
            return []
        return [(str(h["table"]), str(h["column"])) for h in hits
                if h.get("value") == repr(value) and str(h.get("table")).isidentifier()]

    def columns(self) -> list[tuple[str, list[str]]]:
        return [(name, [c for c, _ in pairs]) for name, pairs in self.frames]


def applies(error: str) -> bool:
    """Whether `error` is one a rewrite here may mend (before the namespace is listed)."""
    return (notices.missing_name(error) is not None or notices.missing_key(error) is not None
            or notices.text_reduction(error) is not None or _NOT_DATETIME_INDEX in error
            or _USE_INSTEAD.search(error) is not None or _MASK_ERROR.search(error) is not None)


def for_error(code: str, error: str, scope: Scope) -> list[Rewrite]:
    """The rewrites of `code` for its `error` (a traceback or one `Type: message` line)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:  # a magic, a shell escape: not rewritten
        return []
    if (name := notices.missing_name(error)) is not None:
        out = name_rewrites(code, name, scope.names, scope.inputs, scope.columns(),
                            notices.import_line(name))
    elif (key := notices.missing_key(error)) is not None:
        out = row_label_rewrites(code, tree) + (
            key_rewrites(code, key, scope.columns()) or label_rewrites(code, tree, key, scope)
            or source_rewrites(code, tree, key, scope.columns()))
    elif (op := notices.text_reduction(error)) is not None:
        out = reduction_rewrites(code, tree, op)
    elif _NOT_DATETIME_INDEX in error:
        out = resample_rewrites(code, tree, scope)
    elif (m := _USE_INSTEAD.search(error)) is not None:
        out = replacement_rewrites(code, tree, m.group(1), m.group(2))
    elif _MASK_ERROR.search(error) is not None:
        out = mask_rewrites(code, tree)
    else:
        out = []
    return out[:MAX_REWRITES]


class Splice:
    """A cell's source by AST node: a node's text and whole-cell replacements of nodes
    (the parser's columns count UTF-8 bytes; lone surrogates pass through)."""

    def __init__(self, code: str) -> None:
        self.raw = code.encode("utf-8", "surrogatepass")
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
        return self.raw[a:b].decode("utf-8", "surrogatepass")

    def apply(self, edits: dict[tuple[int, int], str]) -> str:
        out, last = [], 0
        for (a, b), new in sorted(edits.items()):
            if a < last:  # overlapping edits (a node inside another): not one rewrite
                return ""
            out += [self.raw[last:a], new.encode("utf-8", "surrogatepass")]
            last = b
        return b"".join(out + [self.raw[last:]]).decode("utf-8", "surrogatepass")


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


def _built_from(tree: ast.AST, name: str, owner: str) -> bool:
    """Whether every binding of `name` in the cell is computed from `owner` alone (and the
    habitual module aliases): `revenue = sales[sales.year == 2025].units * ...`."""
    values = [n.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
              and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)]
    return bool(values) and all(_names_in(v) - {"pd", "np"} == {owner} for v in values)


def _join_column(a: list[str], b: list[str]) -> str | None:
    shared = [c for c in a if c in b]
    ids = [c for c in shared if any(t in c.lower() for t in ("id", "key", "code"))]
    if len(ids) == 1:
        return ids[0]
    return shared[0] if len(shared) == 1 else None


def key_rewrites(code: str, key: str, frames: list[tuple[str, list[str]]]) -> list[Rewrite]:
    """Rewrites of a cell that failed with `KeyError: key` (module docstring)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    sp = Splice(code)
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
                # computed in this cell from the owner alone (a filtered subset): labels
                # among the owner's; else the very same labels
                check = "isin({o}.index).all()" if _built_from(tree, recv.id, owner) \
                    else "equals({o}.index)"
                guards.add(f"assert {recv.id}.index.{check.format(o=owner)}")
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


def source_rewrites(code: str, tree: ast.AST, key: str,
                    frames: list[tuple[str, list[str]]]) -> list[Rewrite]:
    """A column no table has, asked of tables stacked with `pd.concat([a, b, ...])` that
    share their columns (one table a quarter, a month, a store): which table a row came
    from is what the tables' names say, and the stack drops it. The long-run quarters task
    (`q1` .. `q4`): `combined.groupby('quarter')` failed with `KeyError: 'quarter'` in
    every pass. Rewritten: each table given the column, valued by its name
    (`q1.assign(quarter='q1')`)."""
    cols_of = dict(frames)
    if key in {c for _, cols in frames for c in cols} or not any(
            isinstance(c, ast.Constant) and c.value == key for c in ast.walk(tree)):
        return []
    sp = Splice(code)
    edits: dict[tuple[int, int], str] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.List)
                and _called(node) == "concat"):
            continue
        parts = node.args[0].elts
        names = [e.id for e in parts if isinstance(e, ast.Name) and e.id in cols_of]
        if len(names) < 2 or len(names) != len(parts) \
                or any(cols_of[n] != cols_of[names[0]] for n in names):
            continue
        given = f"{key}=" if key.isidentifier() else "**{" + repr(key) + ": "
        end = "" if key.isidentifier() else "}"
        for e in parts:
            assert isinstance(e, ast.Name)
            edits[sp.span(e)] = f"{e.id}.assign({given}{e.id!r}{end})"
    if not edits or not (new := sp.apply(edits)):
        return []
    return [Rewrite(new, f"each stacked table given the column {key!r}: its name, the rows' "
                         "source")]


def _called(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


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
                  frames: list[tuple[str, list[str]]], import_line: str | None) -> list[Rewrite]:
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
    sp = Splice(code)
    out = []
    for name in picks:
        new = sp.apply({sp.span(n): name for n in nodes})
        if new:
            out.append(Rewrite(new, f"`{name}` for `{missing}`, which does not exist"))
    return out[:MAX_REWRITES]


def reduction_rewrites(code: str, tree: ast.AST, op: str) -> list[Rewrite]:
    """`numeric_only=True` on each `.op()` of the cell that does not say it."""
    sp = Splice(code)
    edits = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == op and op in REDUCTIONS \
                and not any(k.arg == "numeric_only" for k in node.keywords):
            a, b = sp.span(node)
            inner = sp.raw[a:b - 1].decode().rstrip()  # up to the closing parenthesis
            sep = "" if inner.endswith("(") else ", "
            edits[(a, b)] = f"{inner}{sep}numeric_only=True)"
    new = sp.apply(edits) if edits else ""
    return [Rewrite(new, f"`.{op}(numeric_only=True)`: text columns left out")] if new else []


def _root_frame(node: ast.AST, scope: Scope) -> tuple[str, list[tuple[str, str]]] | None:
    frames = dict(scope.frames)
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and n.id in frames:
            return n.id, frames[n.id]
    return None


def resample_rewrites(code: str, tree: ast.AST, scope: Scope) -> list[Rewrite]:
    """`R.resample(rule)` on a table without a DatetimeIndex: `on=` a datetime column of
    R's table, or one whose name says date or time, parsed first (`assign`)."""
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Attribute) and n.func.attr == "resample"
             and not any(k.arg in ("on", "level") for k in n.keywords)]
    sp = Splice(code)
    out = []
    for call in calls[:1]:
        assert isinstance(call.func, ast.Attribute)
        found = _root_frame(call.func.value, scope)
        if found is None:
            continue
        _, pairs = found
        dated = [c for c, t in pairs if t.startswith("datetime64")]
        texty = [c for c, t in pairs if c not in dated and _DATE_NAME.search(c)]
        recv, whole = sp.text(call.func.value), sp.text(call)
        if not whole.startswith(f"{recv}.resample("):
            continue
        args = whole[len(recv) + len(".resample("):-1].rstrip()
        for col in (dated + texty)[:2]:
            parse = "" if col in dated else \
                f".assign(**{{{col!r}: lambda d: pd.to_datetime(d[{col!r}])}})"
            new = sp.apply({sp.span(call): f"{recv}{parse}.resample({args}, on={col!r})"})
            if new:
                how = "" if col in dated else ", parsed as dates first"
                out.append(Rewrite(new, f"resampled on the column {col!r}{how}"))
    return out


def replacement_rewrites(code: str, tree: ast.AST, old: str, new: str) -> list[Rewrite]:
    """The literal the error names replaced by the one it says to use."""
    sp = Splice(code)
    edits = {sp.span(n): repr(new) for n in ast.walk(tree)
             if isinstance(n, ast.Constant) and n.value == old}
    done = sp.apply(edits) if edits else ""
    return [Rewrite(done, f"{new!r} for {old!r}, as the error says")] if done else []


def label_rewrites(code: str, tree: ast.AST, key: str, scope: Scope) -> list[Rewrite]:
    """`T.loc[x, ...]` where `x` is a value of T's column C, not an index label (the
    everyday suite's `airlines.loc['F9', 'name']`, 'F9' a carrier code): look it up by
    that column, `T.set_index(C).loc[...]`."""
    sp = Splice(code)
    out = []
    for table, col in scope.holding(key)[:2]:
        edits = {sp.span(n.value): f"{table}.set_index({col!r}).loc" for n in ast.walk(tree)
                 if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Attribute)
                 and n.value.attr == "loc" and isinstance(n.value.value, ast.Name)
                 and n.value.value.id == table}
        if edits and (new := sp.apply(edits)):
            out.append(Rewrite(new, f"looked up by the column {col!r} of `{table}`, which "
                                    f"holds {key!r}"))
    return out


# the calls that give where a row is, and the indexer that reads the row they give
LABEL_CALLS = {"idxmin": "loc", "idxmax": "loc", "argmin": "iloc", "argmax": "iloc"}
# a table whose labels are row numbers: one unnamed level of whole numbers (read from a
# file, `reset_index()`, a row filter of those); `set_index('year')` names its labels
ROW_NUMBERS = ("assert {t}.index.name is None and {t}.index.nlevels == 1 "
               "and {t}.index.dtype.kind in 'iu'")


@dataclass(frozen=True)
class LabelCall:
    """`t['c'].idxmax()` (`grouped`: `t.groupby(k)['c'].idxmax()`, one label per group):
    a call whose result is where rows of `table` are, not a value of them."""

    node: ast.Call
    fn: str
    table: str
    grouped: bool


def table_of(column: ast.expr) -> str | None:
    """`t` for a column taken straight off a table: `t['c']`, `t.c`, `t[mask]['c']`."""
    if isinstance(column, ast.Subscript) and isinstance(column.slice, ast.Constant) \
            and isinstance(column.slice.value, str):
        base = column.value
    elif isinstance(column, ast.Attribute):
        base = column.value
    else:
        return None
    return _row_filtered(base)


def _row_filtered(base: ast.expr) -> str | None:
    """`t` for `t` or `t[mask]` (any index but a column name)."""
    while isinstance(base, ast.Subscript) and not (
            isinstance(base.slice, ast.Constant) and isinstance(base.slice.value, str)):
        base = base.value  # a row filter: `t[t['x'] > 0]`
    return base.id if isinstance(base, ast.Name) else None


def _grouped_table(receiver: ast.expr) -> str | None:
    """`t` for `t.groupby(k)`, `t.groupby(k)['c']`, `t.groupby(k).c` (`t` maybe filtered)."""
    base = receiver
    if isinstance(base, ast.Subscript) or (isinstance(base, ast.Attribute)
                                           and isinstance(base.value, ast.Call)):
        base = base.value
    if isinstance(base, ast.Call) and isinstance(base.func, ast.Attribute) \
            and base.func.attr == "groupby":
        return _row_filtered(base.func.value)
    return None


def _in_index(tree: ast.AST) -> set[int]:
    """The ids of nodes inside some subscript's index (`t.loc[t.c.idxmin()]`)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            inside.update(id(n) for n in ast.walk(node.slice))
    return inside


def label_calls(tree: ast.AST) -> list[LabelCall]:
    """The cell's label calls on a table's column or on a table grouped whose result no
    subscript of the cell reads: not inside an index (`t.loc[t.c.idxmin()]`), not bound
    to a name an index uses (`i = t.c.idxmax(); t.loc[i]`). Positions (`argmax`) only
    off a column: a grouped object has none."""
    inside = _in_index(tree)
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) in inside}
    bound = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Assign)
             and any(isinstance(t, ast.Name) and t.id in used for t in node.targets)}
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in LABEL_CALLS) or id(node) in inside or id(node) in bound:
            continue
        if (table := table_of(node.func.value)) is not None:
            out.append(LabelCall(node, node.func.attr, table, False))
        elif node.func.attr.startswith("idx") \
                and (table := _grouped_table(node.func.value)) is not None:
            out.append(LabelCall(node, node.func.attr, table, True))
    return out


def _at(node: ast.AST) -> tuple[int, int]:
    n: Any = node
    return n.lineno, n.col_offset


def row_label_rewrites(code: str, tree: ast.AST, only: LabelCall | None = None
                       ) -> list[Rewrite]:
    """The cell with its label calls (`only` that one) turned into the rows they label,
    `t.loc[t.groupby('k')['v'].idxmax()]`, checked in the trial to be read off a table
    whose labels are row numbers (ROW_NUMBERS): the 1.5B model zipped the per-origin
    `idxmin()` of a `reset_index()` table as if it held months (`KeyError: 'month'`), and
    printed 5, 15 and 25 as the worst months."""
    calls = [c for c in label_calls(tree) if only is None or _at(c.node) == _at(only.node)][:3]
    if not calls or any(not c.table.isidentifier() for c in calls):
        return []
    sp = Splice(code)
    new = sp.apply({sp.span(c.node): f"{c.table}.{LABEL_CALLS[c.fn]}[{sp.text(c.node)}]"
                    for c in calls})
    if not new:
        return []
    tables = list(dict.fromkeys(c.table for c in calls if c.fn.startswith("idx")))
    fns = ", ".join(dict.fromkeys(f"`.{c.fn}()`" for c in calls))
    reads = ", ".join(f"`{t}.{LABEL_CALLS[c.fn]}[...]`" for t, c in
                      {c.table: c for c in calls}.items())
    return [Rewrite(new, f"{reads} reads the rows {fns} points at",
                    "\n".join(ROW_NUMBERS.format(t=t) for t in tables))]


_OPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
        ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not"}


def mask_rewrites(code: str, tree: ast.AST) -> list[Rewrite]:
    """Each comparison Python grouped around a bare `&`/`|` written as it was meant:
    `a >= x & b <= y` (Python's `a >= (x & b) <= y`) -> `(a >= x) & (b <= y)`."""
    sp = Splice(code)
    edits = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and bare_masks(node, sp):
            flat: list[str] = []
            parts: list[ast.expr] = [node.left, *node.comparators]
            for i, part in enumerate(parts):
                if i:
                    flat.append(_OPS.get(type(node.ops[i - 1]), "?"))
                flat += _flatten(part, sp)
            groups: list[str] = []
            cur: list[str] = []
            for tok in flat:
                if tok in ("&", "|"):
                    groups += [f"({' '.join(cur)})", tok]
                    cur = []
                else:
                    cur.append(tok)
            groups.append(f"({' '.join(cur)})")
            edits[sp.span(node)] = " ".join(groups)
    new = sp.apply(edits) if edits else ""
    return [Rewrite(new, "each comparison in parentheses: `&` and `|` bind tighter")] \
        if new else []


def bare_masks(node: ast.Compare, sp: Splice) -> list[ast.BinOp]:
    """The operands of comparison `node` that are `&`/`|` operations the writer did not
    parenthesise (`(a & b) == c` is meant; `a == 'x' & b` is not)."""
    return [x for x in (node.left, *node.comparators)
            if isinstance(x, ast.BinOp) and _bare(x, sp)]


def _bare(x: ast.expr, sp: Splice) -> bool:
    """An `&`/`|` operation written without parentheses around it."""
    if not (isinstance(x, ast.BinOp) and isinstance(x.op, ast.BitAnd | ast.BitOr)):
        return False
    a, b = sp.span(x)
    return not (sp.raw[:a].rstrip().endswith(b"(") and sp.raw[b:].lstrip().startswith(b")"))


def _flatten(x: ast.expr, sp: Splice) -> list[str]:
    """A comparison operand as tokens, a bare `&`/`|` split at its operator."""
    if isinstance(x, ast.BinOp) and _bare(x, sp):
        return [*_flatten(x.left, sp), "&" if isinstance(x.op, ast.BitAnd) else "|",
                *_flatten(x.right, sp)]
    return [sp.text(x)]
