"""The aggregate a question names that no cell computed: a count of rows for "how many
countries", a count of values for "the lowest average".

A small model computes another operation than the one the question names, prints it and
answers from it: "How many countries in Europe?" counted gapminder's rows (360: 30
countries x 12 years; truth 30), "Which continent had the lowest average life
expectancy?" took `value_counts().idxmin()` (Oceania; truth Africa, by the mean). The
answer is shown by an output, so nothing else catches it.

The operations, and why these: each has few spellings in code and a question word that
rarely means anything else.
- mean ("average", "avg", "mean" but not the verb), median, standard deviation;
- sum ("sum of", "total", "in total", "altogether", "combined"; not in a question that
  counts, "how many ... in total", where "total" is the count);
- a count of distinct things: "how many different/distinct/unique X". A bare "how many
  X" where X is a repeating text column is NOT taken (measured: "how many countries had
  a life expectancy over 75 in 2007" counts rows rightly, one per country that year, and
  the refusal made the 1.5B model drop its filters; only the data can tell the two
  apart). A number column of that name (`flight`), a column whose values are all
  different: no condition either.
- one spelling of each value (`normalise`), when the question counts distinct things and
  says their values are written in different ways ("inconsistent spelling", "spelled
  differently", "typos"): the 1.5B model counted
  `vendors['vendor'].unique()` (260 spellings of 32 vendors), five times in five. Computed
  when a cell spells a string normalisation (`lower`, `casefold`, `strip`, `replace`,
  `re.sub`, ...).
Minimum and maximum are left out: "the most", "the lowest" are answered by sorting,
`idxmax`, `nlargest`, `head`... too many spellings to tell a miss from another way.

A word that is part of a column's name in the question ("the average total bill" over a
`total_bill` column) names the column, not an operation. An operation is computed when a
successful cell of the run spells it in one of the usual ways (`computed`): its syntax
tree's calls, attributes, names and strings (SQL in strings too), else its text.
`missing(question, descriptions, codes)` returns the operations asked and not computed.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass

from rlm.agent.policy.conditions import _COLUMN, _FILE, _TABLE


@dataclass(frozen=True)
class Column:
    table: str
    rows: int | None
    name: str
    dtype: str
    facts: str

    @property
    def text(self) -> bool:
        d = self.dtype.lower()
        return d in ("str", "object", "category") or d.startswith("string")

    @property
    def distinct(self) -> int | None:
        m = _DISTINCT_FACT.search(self.facts)
        return int(m.group(1).replace(",", "")) if m else None

    @property
    def repeats(self) -> bool:
        """Its values repeat, by the description."""
        if "most frequent" in self.facts:
            return True
        k = self.distinct
        return k is not None and self.rows is not None and k < self.rows


@dataclass(frozen=True)
class Operation:
    kind: str  # mean | median | sum | std | distinct | normalise
    word: str  # the question's word for it
    column: Column | None = None  # distinct: the repeating column; else the column to use
    by: Column | None = None  # the column the question groups by ("which continent")
    table: str = ""  # the one input table, when there is one


_DISTINCT_FACT = re.compile(r"(?<![\d,])(\d[\d,]*)\+? (?:distinct|values?)\b")
_ROWS = re.compile(r"pandas\.DataFrame, (\d[\d,]*) rows x")

_WORDS = {
    "mean": r"\b(?:average[ds]?|avg|mean)\b",
    "median": r"\bmedian\b",
    "std": r"\b(?:standard deviation|std\.? ?dev|stdev|std)\b",
    "sum": r"\b(?:sum of|summed|in total|total|altogether|combined)\b",
}
_VERB_BEFORE = {"does", "do", "did", "to", "would", "could", "might", "may", "can", "will",
                "should", "i", "you", "we", "they", "this", "that", "it", "what"}
_COUNTING = re.compile(r"\b(?:how many|number of|count|counts|counted)\b")
_OPENER = re.compile(r"\b(?:how many|number of|count of|count the)\s+")
_DISTINCT_WORDS = {"different", "distinct", "unique", "separate", "individual"}
_SKIP = {"of", "the", "these", "those", "total", "all"}
_STOP = {"had", "have", "has", "are", "is", "were", "was", "did", "do", "does", "in", "from",
         "with", "for", "that", "which", "who", "to", "on", "at", "by", "there", "per", "and",
         "or", "than", "between", "during", "where", "when", "whose", "appear", "appears"}
_BY = re.compile(r"\b(?:which|what|each|every|per|by)\s+([a-z][a-z0-9_]*)")
# the question says one value is written in several ways
_SPELLINGS = re.compile(
    r"\b(?:inconsistent(?:ly)?|different|differing|varying|various|mixed|messy|non-?standard)"
    r"\s+(?:\w+\s+)?(?:spellings?|capitali[sz]ations?|case|casing|spacing|formatting|forms|"
    r"variants|ways of writing)\b"
    r"|\b(?:spelled|spelt|written|typed|entered)\s+(?:\w+\s+)?(?:differently|inconsistently|"
    r"in (?:several|different|various) ways)\b"
    r"|\btypos\b|\bmisspell\w*|\bspelling (?:variants|differences)\b")


def _verb(low: str, m: re.Match[str]) -> bool:
    """"mean" the verb: after does/do/did... in its clause, or ending it."""
    before = re.findall(r"[a-z]+", low[:m.start()])[-1:]
    return (bool(before) and before[0] in _VERB_BEFORE
            or bool(re.search(r"\b(?:does|do|did)\b[^.?!;]*$", low[:m.start()]))
            or not re.match(r"\s*[a-z0-9_(]", low[m.end():]))


def table_columns(descriptions: Iterable[str]) -> list[Column]:
    """Every column line of the input descriptions, with its table and the table's rows."""
    out = []
    for text in descriptions:
        table, rows = "", None
        for line in text.splitlines():
            if m := _TABLE.match(line):
                table = m.group(1)
                r = _ROWS.search(line)
                rows = int(r.group(1).replace(",", "")) if r else None
            elif m := _COLUMN.match(line):
                out.append(Column(table, rows, m.group(1), m.group(2), m.group(3)))
    return out


def _forms(word: str) -> set[str]:
    """A word and its singulars: countries -> country, boxes -> box, flights -> flight."""
    out = {word}
    if word.endswith("ies"):
        out.add(word[:-3] + "y")
    if word.endswith("es"):
        out.add(word[:-2])
    if word.endswith("s"):
        out.add(word[:-1])
    return out


def _named(word: str, columns: list[Column]) -> Column | None:
    forms = _forms(word)
    return next((c for c in columns if c.name.lower() in forms), None)


def _mask_columns(low: str, columns: list[Column]) -> str:
    """The question with the column names it spells ("total bill" for `total_bill`,
    several words only) blanked: their words name a column, not an operation."""
    for c in columns:
        words = [w for w in re.split(r"[_\s]+|(?<=[a-z])(?=[A-Z])", c.name) if w]
        if len(words) > 1:
            phrase = r"[\s_]*".join(re.escape(w.lower()) for w in words)
            low = re.sub(rf"\b{phrase}\b", lambda m: " " * len(m.group(0)), low)
        elif c.name.lower() in {"total", "mean", "average", "avg", "median", "sum", "std"}:
            low = re.sub(rf"\b{re.escape(c.name.lower())}\b", " " * len(c.name), low)
    return low


def _number_column(low: str, columns: list[Column], skip: Column | None) -> Column | None:
    """The one number column whose name's words all begin words of the question
    (`lifeExp`: "life expectancy", `pop`: "population"); None when not exactly one."""
    words = re.findall(r"[a-z0-9]+", low)
    hits = []
    for c in columns:
        if c.text or c is skip or not c.dtype.lower().startswith(("int", "float", "uint")):
            continue
        parts = [p.lower() for p in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+", c.name)]
        if c.name.lower() in words or parts and all(
                len(p) >= 2 and any(w.startswith(p) for w in words) for p in parts):
            hits.append(c)
    return hits[0] if len(hits) == 1 else None


def asked(question: str, descriptions: Iterable[str]) -> list[Operation]:
    """The operations `question` names, in its order (one of each kind)."""
    columns = table_columns(descriptions)
    plain = _FILE.sub(lambda m: " " * len(m.group(0)), question).lower()
    low = _mask_columns(plain, columns)
    tables = {c.table for c in columns if c.table}
    table = tables.pop() if len(tables) == 1 else ""
    found: list[tuple[int, Operation]] = []
    by = next((c for m in _BY.finditer(low) if (c := _named(m.group(1), columns)) and c.text),
              None)
    counting = bool(_COUNTING.search(low))
    for kind, pattern in _WORDS.items():
        for m in re.finditer(pattern, low):
            if kind == "mean" and m.group(0) == "mean" and _verb(low, m):
                continue  # "what does X mean", "to mean"
            if kind == "sum" and m.group(0) != "sum of" and (
                    counting or re.match(r"\s+(?:number|count)\b", low[m.end():])):
                continue  # "how many ... in total", "the total number of": a count
            if kind == "sum" and m.group(0) == "combined" and low[m.end():].startswith(" with"):
                continue
            found.append((m.start(), Operation(kind, question[m.start():m.end()],
                                               _number_column(plain, columns, by), by, table)))
            break
    for m in _OPENER.finditer(low):
        explicit, column, noun = False, None, ""
        for w in re.findall(r"[a-z][a-z0-9_]*", low[m.end():])[:5]:
            if w in _DISTINCT_WORDS:
                explicit = True
            elif w in _SKIP:
                continue
            elif w in _STOP:
                break
            else:
                noun = noun or w
                if (column := _named(w, columns)) is not None:
                    noun = w
                    break
        if column is not None and not (column.text and column.repeats):
            continue  # a number column (`flight`), or one whose values are all different
        if not explicit:
            # "how many countries had X in 2007": counting the rows is right when the rows
            # the question names hold each country once, and only the data can tell; the
            # refusal made the 1.5B model drop its filters and count every country (the
            # everyday suite's gap-over-75: 44 right, then 142)
            continue
        if column is not None or noun:
            found.append((m.start(), Operation("distinct", noun, column, table=table)))
            break
    spelled = _SPELLINGS.search(question.lower())
    if spelled and counting:
        distinct = next((op for _, op in found if op.kind == "distinct"), None)
        found.append((-1, Operation("normalise", question[spelled.start():spelled.end()],
                                    distinct.column if distinct else None, table=table)))
    return [op for _, op in sorted(found, key=lambda x: x[0])]


# ------------------------------------------------------------------ what the cells computed
_CALLS = {
    "mean": {"mean", "nanmean", "fmean", "average", "describe", "geometric_mean",
             "harmonic_mean", "expanding", "rolling", "ewm"},
    "median": {"median", "nanmedian", "median_low", "median_high", "median_grouped",
               "describe"},
    "std": {"std", "nanstd", "stdev", "pstdev", "var", "nanvar", "variance", "pvariance",
            "describe", "sem"},
    "sum": {"sum", "nansum", "cumsum", "fsum"},
    "distinct": {"nunique", "unique", "drop_duplicates", "value_counts", "groupby", "ngroups",
                 "pivot_table", "crosstab", "Counter", "duplicated", "set", "frozenset",
                 "fromkeys", "factorize"},
    "normalise": {"lower", "casefold", "upper", "title", "capitalize", "swapcase", "strip",
                  "lstrip", "rstrip", "replace", "sub", "subn", "normalize", "translate"},
}
_STRINGS = {"mean": {"mean", "average"}, "median": {"median", "50%"}, "std": {"std", "var"},
            "sum": {"sum"}, "distinct": {"nunique", "unique", "count_distinct"},
            "normalise": set()}
_SQL = {"mean": r"\bavg\s*\(", "median": r"\bmedian\s*\(", "std": r"\b(?:stddev\w*|std)\s*\(",
        "sum": r"\bsum\s*\(", "distinct": r"\bdistinct\b|\bgroup\s+by\b",
        "normalise": r"\b(?:lower|upper|trim|replace)\s*\("}


@dataclass
class _Spelled:
    names: set[str]  # called functions, attributes, loaded names (not assigned ones)
    strings: list[str]
    kinds: set[str]  # kinds spelled by the tree's shape: sum(..)/n, a + b, set literals


def _spelled(code: str) -> _Spelled | None:
    # IPython lines: `%time expr` keeps its expression, `!cmd` and `%%cell` magics go
    lines = [re.sub(r"^(\s*)%+\w+\s*", r"\1", ln) for ln in code.splitlines()
             if not ln.lstrip().startswith("!")]
    try:
        tree = ast.parse("\n".join(lines))
    except (SyntaxError, ValueError):
        return None
    attrs: set[str] = set()
    names: set[str] = set()
    stored: set[str] = set()
    strings: list[str] = []
    kinds: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            attrs.add(node.attr)
        elif isinstance(node, ast.Name):
            (stored if isinstance(node.ctx, ast.Store) else names).add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            strings.append(node.value)
        elif isinstance(node, ast.Call) and _quantile_half(node):
            kinds.add("median")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and _sums(node.left):
            kinds.add("mean")  # sum(x) / len(x), (a + b) / 2, s.sum() / s.count()
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and not (
                isinstance(node.left, ast.Constant) or isinstance(node.right, ast.Constant)):
            kinds.add("sum")
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add):
            kinds.add("sum")  # total += x
        elif isinstance(node, ast.Set | ast.SetComp):
            kinds.add("distinct")
    return _Spelled(attrs | (names - stored), strings, kinds)  # `mean = ...`: no mean


def _sums(node: ast.AST) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            f = n.func
            if (isinstance(f, ast.Name) and f.id in ("sum", "fsum")) or (
                    isinstance(f, ast.Attribute) and f.attr in ("sum", "nansum", "fsum")):
                return True
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add):
            return True
    return False


def _quantile_half(call: ast.Call) -> bool:
    """`quantile(0.5)`, `np.percentile(x, 50)`, `quantile(q=.5)`."""
    f = call.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    args = [*call.args, *(k.value for k in call.keywords)]
    consts = [a.value for a in args if isinstance(a, ast.Constant)]
    if name in ("quantile", "nanquantile"):
        return 0.5 in consts
    return name in ("percentile", "nanpercentile") and 50 in consts


def computed(kind: str, codes: Iterable[str]) -> bool:
    """Some code of `codes` computes `kind` in one of the usual ways."""
    for code in codes:
        s = _spelled(code)
        if s is None:  # IPython syntax the tree cannot read: the words of the text
            words = set(re.findall(r"[A-Za-z_]\w*", code))
            if words & _CALLS[kind] or re.search(_SQL[kind], code, re.I):
                return True
            continue
        if kind in s.kinds or s.names & _CALLS[kind]:
            return True
        if any(t.strip().lower() in _STRINGS[kind] or re.search(_SQL[kind], t, re.I)
               for t in s.strings):
            return True
    return False


def missing(question: str, descriptions: Iterable[str], codes: Iterable[str]
            ) -> list[Operation]:
    codes = list(codes)
    return [op for op in asked(question, descriptions) if not computed(op.kind, codes)]


# ------------------------------------------------------------------------------ the note
_NAMES = {"mean": ("the mean", "a mean", "mean"),
          "median": ("the median", "a median", "median"),
          "std": ("the standard deviation", "a standard deviation", "std"),
          "sum": ("the sum", "a sum", "sum")}


def _asked(op: Operation) -> str:
    """`the average (mean)`: the aggregate as the question words it, and what it is."""
    the = _NAMES[op.kind][0]
    word, plain = op.word.lower(), the.removeprefix("the ")
    return f"the {word}{f' ({plain})' * (word != plain)}"


def _example(op: Operation) -> str:
    """The code that computes `op` over the table and column it names."""
    if op.kind == "normalise":
        c = op.column
        col = f"{c.table}[{c.name!r}]" if c is not None and c.table else \
            f"{op.table or 'df'}['column']"
        return f"{col}.str.lower().str.replace(r'[^a-z0-9]+', ' ', regex=True).str.strip()"
    if op.kind == "distinct":
        c = op.column
        return (f"{c.table}[...][{c.name!r}].nunique()" if c is not None and c.table
                else f"{op.table or 'df'}[...]['column'].nunique()")
    method = _NAMES[op.kind][2]
    value = op.column
    named = value or op.by
    table = (named.table if named else "") or op.table or "df"
    col = repr(value.name) if value else "'column'"
    if op.by is not None:
        return f"{table}.groupby({op.by.name!r})[{col}].{method}()"
    return f"{table}[{col}].{method}()"


_NORMALISE = ("the question says the values are written in different ways ({word}), and none "
              "of the cells you ran rewrites them, so every spelling counts as a value of its "
              "own. Write each value one way first: `{example}`, then replace each variant "
              "the question names by one spelling (e.g. `.str.replace(r'\bincorporated\b', "
              "'inc', regex=True)`), and count the values of that")


def note(ops: list[Operation]) -> str:
    """The refusal for the operations asked and not computed (the first two)."""
    parts = []
    for op in ops[:2]:
        if op.kind == "normalise":
            parts.append(_NORMALISE.format(word=op.word, example=_example(op)))
        elif op.kind == "distinct":
            c = op.column
            if c is not None and c.table:
                size = f"{c.rows:,} rows, " if c.rows is not None else ""
                k = f"{c.distinct:,} distinct values" if c.distinct is not None else "values repeat"
                parts.append(f"the question asks how many {op.word}; `{c.name}` repeats in "
                             f"{c.table} ({size}{k}), and none of the cells you ran counts "
                             "distinct values, so your answer counts rows. Count distinct "
                             f"values over the rows the question names with `{_example(op)}`")
            else:
                parts.append(f"the question asks how many different {op.word}, and none of the "
                             "cells you ran counts distinct values, so your answer counts rows. "
                             "Count distinct values over the rows the question names with "
                             f"`{_example(op)}`")
        else:
            the, a, _ = _NAMES[op.kind]
            parts.append(f"the question asks for {_asked(op)}, but none of the cells you ran "
                         f"computes {a}, so your answer counts or picks something else. "
                         f"Compute {the} of the column the question names over the rows it "
                         f"names, e.g. `{_example(op)}`")
    return ("Not accepted yet: " + "; and ".join(parts) + ". Print it, then answer with "
            "FINAL(answer).")


def file_note(ops: list[Operation], file: str) -> str:
    """The goal judge's message for a named file whose code computes none of `ops` (the
    first two): what the goal asks, what the code that wrote `file` never does, how."""
    parts = []
    for op in ops[:2]:
        if op.kind == "normalise":
            parts.append(f"one spelling of each value ({op.word}), but the code that wrote "
                         f"{file} never rewrites the values (e.g. `{_example(op)}`, then the "
                         "variants it names replaced by one)")
        elif op.kind == "distinct":
            parts.append(f"how many different {op.word}, but the code that wrote {file} "
                         f"never counts distinct values (e.g. `{_example(op)}`)")
        else:
            parts.append(f"{_asked(op)}, but the code that wrote {file} never computes "
                         f"{_NAMES[op.kind][1]} (e.g. `{_example(op)}`)")
    return ("Not complete: the goal asks for " + "; and ".join(parts) + f". Write {file} "
            "again from a cell that computes it and prints what it wrote; then finish.")

