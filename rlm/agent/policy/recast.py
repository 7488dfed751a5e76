"""An answer of the wrong kind for its question, told with the model's own cell recast and
tried on the data (issue 60).

The 1.5B default model answers another question than the one asked, from a cell that ran:
"How many countries in Europe?" printed the rows of Europe (360: a row per country and
year; truth 30); "Which continent had the lowest average life expectancy in 1952?"
printed the mean over every continent (49.06; truth Africa). Told so in words, it sent
the same cell again. Given a cell that computes what was asked, it sends it.

Whether the answer is of the wrong kind is the data's to say, not a phrasing list's:
- `counted`: the question asks how many of a thing that is a text column whose values
  repeat (`country`), and the answer's figure is a row count a cell of the run printed
  (`len(t)`, `t.shape[0]`, `t['c'].count()`). Only the rows can tell whether that is the
  count of countries (in 2007 each country has one row: "how many countries had a life
  expectancy over 75 in 2007" counts rows rightly): the cell is recast to count distinct
  values of the column over the same rows, and tried on a fork of the kernel with a guard
  that the old expression gives the answer's figure and the new one another. Only when
  it does is the answer refused, with the recast cell.
- `which`: the question asks which (or what) thing, a text column (`continent`), and the
  answer is a bare figure. The figure's cell is recast: `.min()`/`.max()` of a grouped
  result become `.idxmin()`/`.idxmax()`; an aggregate of a column over rows that were not
  grouped is grouped by the asked column and its `idxmin`/`idxmax` taken, the direction
  being the question's ("lowest", "most"). A recast cell is offered only when its result,
  in the trial, is a value of the asked column. The answer is refused once either way:
  a figure is not a continent.
- `period`: the question asks which month (year, weekday, hour, quarter, day), no column
  has that name, one column holds dates, and no cell of the run took a period of dates
  (`resample`, `.dt.month`, a slice of date text, the word itself): whatever the answer,
  it does not come from such a grouping (the task suite's timeseries family: the mean
  over every reading, then a month no output showed). The newest aggregate of a column
  is recast grouped by that period of the date column (`pd.to_datetime(...).dt.
  month_name()`), `idxmin`/`idxmax` by the question's direction; refused once, with the
  recast when it ran.
- `which` with a direction and a name for an answer, when no cell of the run picked an
  extreme (`idxmax`, a sort, `nlargest`, `max`...): the name was read off a printed
  table (the task suite's groupby family answered its first row). The newest cell that
  printed the totals is offered with the pick added, only when the pick ran and gave a
  value of the asked column (`Unpicked`).
- `closest`: the question asks which is closest (nearest) and no cell of the run measured
  a distance (`abs`): the newest `idxmin`/`idxmax` is recast over the distance to a number
  the cell names (`(medians - mean).abs().idxmin()`), the guard checking it is a number.
The trials (rlm.agent.repair.tried, through `Facts.offer`) run on a forked copy of the
namespace: nothing a recast cell binds reaches the model's kernel.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence

from rlm.agent import repair
from rlm.agent.policy.decisions import Answer, Facts, Refuse
from rlm.agent.policy.operations import (
    _DISTINCT_WORDS,
    _FILE,
    _OPENER,
    _SKIP,
    _STOP,
    Column,
    _named,
    table_columns,
)
from rlm.agent.policy.rules import OPERATION_KEY, Rule
from rlm.agent.policy.verify import Shown
from rlm.agent.rewrites import Rewrite, Splice
from rlm.session.branch import custom_entries, user_questions
from rlm.session.entries import Entry

MAX_RECASTS = 4
_FIGURE = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?![\w])")
_WHICH = re.compile(r"\b(?:which|what)\s+([a-z][a-z0-9_]*)")
_LOW = re.compile(r"\b(?:lowest|least|smallest|fewest|minimum|min|shortest|cheapest|coldest|"
                  r"worst-performing|slowest|earliest|weakest|poorest)\b")
_HIGH = re.compile(r"\b(?:highest|most|largest|greatest|maximum|max|longest|biggest|top|"
                   r"hottest|warmest|wettest|busiest|fastest|richest|strongest)\b")
_AGGREGATES = frozenset({"mean", "median", "sum", "count", "size", "nunique", "std", "var",
                         "max", "min"})


# ---------------------------------------------------------------------- the question
def counted(question: str, descriptions: Sequence[str]) -> tuple[str, Column] | None:
    """("countries", the `country` column) for "how many countries ...", when the word
    names a text column whose values repeat in a table with a plain name."""
    columns = table_columns(descriptions)
    low = _FILE.sub(lambda m: " " * len(m.group(0)), question).lower()
    for m in _OPENER.finditer(low):
        for w in re.findall(r"[a-z][a-z0-9_]*", low[m.end():])[:5]:
            if w in _SKIP or w in _DISTINCT_WORDS:
                continue
            if w in _STOP:
                break
            c = _named(w, columns)
            if c is not None and c.text and c.repeats and c.table.isidentifier():
                return w, c
            break
    return None


def which(question: str, descriptions: Sequence[str]) -> tuple[str, Column] | None:
    """("continent", the `continent` column) for "which continent ...": a text column of a
    table with a plain name."""
    columns = table_columns(descriptions)
    low = _FILE.sub(lambda m: " " * len(m.group(0)), question).lower()
    for m in _WHICH.finditer(low):
        # the thing, or a word or two later: "which product category", "what kind of carrier"
        words = [m.group(1), *re.findall(r"[a-z][a-z0-9_]*", low[m.end():])[:2]]
        for w in words:
            if w in _STOP:
                break
            c = _named(w, columns)
            if c is not None and c.text and c.table.isidentifier():
                return w, c
    return None


# a period the rows' dates fall in: the word, the column name the recast groups by, the
# datetime accessor that gives it
PERIODS = {"month": "dt.month_name()", "year": "dt.year", "weekday": "dt.day_name()",
           "hour": "dt.hour", "quarter": "dt.quarter", "day": "dt.date", "date": "dt.date"}
_PERIOD_SPELLED = re.compile(r"\bresample\b|\bGrouper\b|\bto_period\b|\bdt\.\w+|\bstrftime\b|"
                             r"\.str\[|\.str\.slice\b|\.str\.(?:split|extract|startswith)\b")


def period(question: str, descriptions: Sequence[str]) -> tuple[str, Column] | None:
    """("month", the date column) for "which month ...": no column has that name, and one
    column holds dates (a datetime dtype, or dates as text) in a table with a plain name."""
    columns = table_columns(descriptions)
    low = _FILE.sub(lambda m: " " * len(m.group(0)), question).lower()
    dates = [c for c in columns if c.table.isidentifier() and (
        c.dtype.lower().startswith("datetime") or c.facts.startswith("dates as text"))]
    for m in _WHICH.finditer(low):
        word = m.group(1)
        if word in PERIODS and _named(word, columns) is None and len(dates) == 1:
            return word, dates[0]
    return None


def grouped_by_period(codes: Sequence[str], word: str) -> bool:
    """Some code of the run takes a period of dates (`resample`, `.dt.month`, a slice of
    date text) or names the period (`month`): the question's grouping may be there."""
    return any(_PERIOD_SPELLED.search(c) or re.search(rf"\b{word}", c, re.I) for c in codes)


def direction(question: str) -> str | None:
    """"min" or "max", as the question asks for the lowest or the highest; None: neither or
    both."""
    low, high = _LOW.search(question.lower()), _HIGH.search(question.lower())
    return "min" if low and not high else "max" if high and not low else None


def figure(answer: str) -> str | None:
    """The answer's first figure without thousands separators ("1,234 rows" -> "1234")."""
    m = _FIGURE.search(answer)
    return m.group(0).replace(",", "") if m else None


def bare_figure(answer: str) -> bool:
    """The answer is a figure and nothing else a name could be read from."""
    text = answer.strip().strip("`'\".")
    return bool(text) and _FIGURE.fullmatch(text) is not None


def source(shown: list[Shown], value: str) -> Shown | None:
    """The newest successful cell whose output shows `value` as a figure."""
    pattern = re.compile(rf"(?<![\w.]){re.escape(value)}(?![\w]|\.\d)")
    return next((s for s in reversed(shown) if pattern.search(s.text.replace(",", ""))), None)


# --------------------------------------------------------------------------- the recasts
def _column_key(node: ast.expr) -> str | None:
    """'c' for `x['c']`."""
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
            and isinstance(node.slice.value, str):
        return node.slice.value
    return None


def _rows_counted(node: ast.AST) -> ast.expr | None:
    """The rows a row count counts: `len(x)`, `x.shape[0]`, `x['c'].count()`."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id == "len" and len(node.args) == 1 and not node.keywords:
        return node.args[0]
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) \
            and node.value.attr == "shape" and isinstance(node.slice, ast.Constant) \
            and node.slice.value == 0:
        return node.value.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr == "count" and not node.args and not node.keywords \
            and _column_key(node.func.value) is not None:
        return node.func.value
    return None


def _parsed(code: str) -> tuple[Splice, list[ast.AST]] | None:
    """The cell's splicer and its syntax tree's nodes; None when it is not Python."""
    try:
        return Splice(code), list(ast.walk(ast.parse(code)))
    except SyntaxError:
        return None


def _aggregates(nodes: list[ast.AST]) -> list[ast.Call]:
    """The argument-less aggregate calls: `x.mean()`, `x.max()`."""
    return [n for n in nodes if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr in _AGGREGATES and not n.args]


def distinct_recasts(code: str, column: str, value: str) -> list[Rewrite]:
    """`code` with a row count that gave `value` counting distinct `column` values over
    the same rows instead; the guard holds when the old count is `value` and the new one
    is not."""
    if (parsed := _parsed(code)) is None:
        return []
    (sp, nodes), out = parsed, []
    for node in nodes:
        rows = _rows_counted(node)
        if rows is None:
            continue
        base = rows.value if isinstance(rows, ast.Subscript) and _column_key(rows) else rows
        old, new = sp.text(node), f"{sp.text(base)}[{column!r}].nunique()"
        recast = sp.apply({sp.span(node): new})
        if recast:
            out.append(Rewrite(recast, f"counts distinct {column!r} values instead of rows",
                               f"assert ({old}) == {value} and ({new}) != {value}"))
    return out[:MAX_RECASTS]


def which_recasts(code: str, table: str, column: str, way: str | None) -> list[Rewrite]:
    """`code` with the figure's aggregate turned into the `column` value it belongs to;
    the guard holds when the new result is a value of `table[column]`."""
    if (parsed := _parsed(code)) is None:
        return []
    (sp, nodes), out = parsed, []
    for node in _aggregates(nodes):
        assert isinstance(node.func, ast.Attribute)
        fn, of = node.func.attr, node.func.value
        news = []
        if fn in ("min", "max"):  # a grouped result's min: the group is its label
            news.append((f"{sp.text(of)}.idx{fn}()", f"`.idx{fn}()` gives the {column} of "
                                                     f"the {fn}imum, `.{fn}()` its value"))
        key = _column_key(of)
        if way and key is not None and "groupby" not in sp.text(of):
            assert isinstance(of, ast.Subscript)
            news.append((f"{sp.text(of.value)}.groupby({column!r})[{key!r}].{fn}()"
                         f".idx{way}()", f"grouped by {column!r}, the {column} of the "
                                         f"{way}imum {fn}"))
        for new, change in news:
            recast = sp.apply({sp.span(node): new})
            if recast:
                out.append(Rewrite(recast, change, f"assert str({new}) in "
                                                   f"set({table}[{column!r}].astype(str))"))
    return out[:MAX_RECASTS]


def period_recasts(code: str, dates: Column, word: str, way: str | None) -> list[Rewrite]:
    """`code` with an aggregate of a column over rows not grouped by a period grouped by
    the `word` of the `dates` column and its `idxmin`/`idxmax` taken (`way`)."""
    if way is None or (parsed := _parsed(code)) is None:
        return []
    (sp, nodes), out = parsed, []
    pandas = "" if re.search(r"^import pandas as pd\b", code, re.M) else "import pandas as pd\n"
    for node in _aggregates(nodes):
        assert isinstance(node.func, ast.Attribute)
        of = node.func.value
        key = _column_key(of)
        if key is None or "groupby" in sp.text(of):
            continue
        assert isinstance(of, ast.Subscript)
        new = (f"{sp.text(of.value)}.assign({word}=lambda d: pd.to_datetime(d[{dates.name!r}])"
               f".{PERIODS[word]}).groupby({word!r})[{key!r}].{node.func.attr}().idx{way}()")
        recast = sp.apply({sp.span(node): new})
        if recast:
            out.append(Rewrite(pandas + recast, f"grouped by the {word} of {dates.name!r}, the "
                                                f"{word} of the {way}imum {node.func.attr}",
                               f"assert pd.notna({new})"))
    return out[:MAX_RECASTS]


# a pick of an extreme, or a listing sorted by it (`value_counts()` lists the most first)
_PICKED = re.compile(r"\b(?:idxmax|idxmin|argmax|argmin|nlargest|nsmallest|max|min|sort_values|"
                     r"sorted|sort|most_common|mode|head|tail|iloc|rank|value_counts)\b")


def pick_recasts(code: str, table: str, column: str, way: str) -> list[Rewrite]:
    """`code` and a line that picks the `column` value of the `way`imum from what it
    printed (`print(totals)`, or its last expression): a Series' `idxmax()`, or a table's
    row by its first number column; the guard holds when the pick is a value of
    `table[column]`."""
    if (parsed := _parsed(code)) is None:
        return []
    nodes, out = parsed[1], []
    shown = [n.args[0] for n in nodes if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
             and n.func.id == "print" and len(n.args) == 1 and isinstance(n.args[0], ast.Name)]
    module = nodes[0]
    last = module.body[-1] if isinstance(module, ast.Module) and module.body else None
    if isinstance(last, ast.Expr) and isinstance(last.value, ast.Name):
        shown.append(last.value)
    for name in dict.fromkeys(n.id for n in shown):
        for pick in (f"{name}.idx{way}()",
                     f"{name}.set_index({column!r}).select_dtypes('number').iloc[:, 0]"
                     f".idx{way}()"):
            out.append(Rewrite(code.rstrip("\n") + f"\nprint({pick})\n",
                               f"picks the {column} of the {way}imum from `{name}`",
                               f"assert str({pick}) in set({table}[{column!r}].astype(str))"))
    return out[:MAX_RECASTS]


_CLOSEST = re.compile(r"\b(?:closest|nearest|closer|nearer)\b")
_DISTANCE = re.compile(r"\babs\b|\bfabs\b|\babsolute\b|\bdistance\b|\bisclose\b")
_PICKS = {"idxmin", "idxmax", "argmin", "argmax"}


def closest_recasts(code: str) -> list[Rewrite]:
    """`code` with `s.idxmin()` (idxmax, argmin, argmax) taken over the distance to a
    number the cell names instead: `(s - m).abs().idxmin()`, for each name `m` but `s`'s;
    the guard holds when `m` is a number."""
    if (parsed := _parsed(code)) is None:
        return []
    (sp, nodes), out = parsed, []
    names = [n.id for n in nodes if isinstance(n, ast.Name)]
    for node in nodes:
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in _PICKS and not node.args):
            continue
        of = node.func.value
        own = {n.id for n in ast.walk(of) if isinstance(n, ast.Name)}
        pick = node.func.attr.replace("max", "min")
        for m in dict.fromkeys(names):
            if m in own or m in ("pd", "np", "print"):
                continue
            new = f"({sp.text(of)} - {m}).abs().{pick}()"
            recast = sp.apply({sp.span(node): new})
            if recast:
                out.append(Rewrite(recast, f"the {pick.removeprefix('idx').removeprefix('arg')}"
                                           f" of the distance to `{m}`, not of the values",
                                   f"import numbers\nassert isinstance({m}, numbers.Number)"))
    return out[:MAX_RECASTS]


# ------------------------------------------------------------------------------ the rules
COUNTED = ("Not accepted yet: the question asks how many {word}, and your answer {value} "
           "counts rows: in the rows your cell counted, `{column}` repeats ({facts}), so "
           "they hold fewer {word} than rows.{offer} Then answer with FINAL(answer) from "
           "its output.")
COUNTED_KEY = "counted rows"
WHICH = ("Not accepted yet: the question asks which {word}, and your answer {value} is a "
         "figure, not a {word} (a value of `{table}['{column}']`). Find the {word} that "
         "figure belongs to{how}.{offer} Answer with FINAL(answer) naming the {word}.")
WHICH_KEY = "which, answered with a figure"
PERIOD = ("Not accepted yet: the question asks which {word}, and none of the cells you ran "
          "groups the rows by the {word} of `{dates}`, so your answer {value} does not come "
          "from such a grouping. Group by the {word} (e.g. `pd.to_datetime(t[{dates!r}])"
          ".{accessor}`) and take the {word} of the {way}imum.{offer} Answer with "
          "FINAL(answer) naming the {word}.")
PERIOD_KEY = "which period, never grouped by"


def _question(branch: Sequence[Entry]) -> tuple[str, list[str]] | None:
    """The run's one question and the input descriptions; None for a follow-up (an
    earlier run's cells, which this run does not see, may have computed its figures)."""
    asks = user_questions(branch)
    if len(asks) != 1:
        return None
    return asks[0], [str(e.content or "") for e in custom_entries(branch, "context_vars")]


def _open(facts: Facts, key: str) -> bool:
    """A refusal keyed `key` may still be given in this run."""
    return not (facts.native_tools or not facts.shown or key in facts.refused
                or (facts.max_turns is not None and facts.turn >= facts.max_turns))


def _offer(facts: Facts, rewrites: list[Rewrite]) -> repair.Repair | None:
    return facts.offer(rewrites) if rewrites else None


class CountedRows(Rule):
    """A count of rows answering "how many <things>" where the things are a repeating
    text column and the counted rows hold some more than once (module docstring): refused
    once per run, with the cell recast to count distinct values, which ran on a fork."""

    def on_answer(self, facts: Facts, answer: Answer, asked: list[str],
                  branch: Sequence[Entry]) -> Refuse | None:
        if not _open(facts, COUNTED_KEY) or (q := _question(branch)) is None or any(
                k.startswith(OPERATION_KEY) and "distinct" in k for k in facts.refused):
            return None  # "how many different countries": told once (QuestionOperation)
        hit, value = counted(*q), figure(answer.text)
        cell = source(facts.shown, value) if hit and value else None
        if hit is None or value is None or cell is None:
            return None
        word, column = hit
        found = _offer(facts, distinct_recasts(cell.code, column.name, value))
        if found is None:
            return None
        k = column.distinct
        facts_text = (f"{column.table} has {k:,} distinct values over {column.rows:,} rows"
                      if k is not None and column.rows is not None else "its values repeat")
        return Refuse(COUNTED.format(word=word, value=value, column=column.name,
                                     facts=facts_text, offer=repair.note(found)),
                      f"the answer counts rows where the question asks how many {word}; "
                      "offered the cell recast to count them", key=COUNTED_KEY)


class WhichAsFigure(Rule):
    """A bare figure answering "which <thing>" where the thing is a text column, or any
    answer to "which month" when no cell grouped by a period of the dates (module
    docstring): refused once per run, with the cell recast to the thing it belongs to when
    a recast ran on a fork (and, for a thing, gave a value of its column)."""

    def on_answer(self, facts: Facts, answer: Answer, asked: list[str],
                  branch: Sequence[Entry]) -> Refuse | None:
        if (q := _question(branch)) is None:
            return None
        if (per := period(*q)) is not None:
            return _period_refusal(facts, answer, q[0], *per)
        if not _open(facts, WHICH_KEY) or not bare_figure(answer.text) \
                or (hit := which(*q)) is None:
            return None
        word, column = hit
        value = figure(answer.text) or answer.text.strip()
        way = direction(q[0])
        cell = source(facts.shown, value) or facts.shown[-1]
        found = _offer(facts, which_recasts(cell.code, column.table, column.name, way))
        how = (f": group by `{column.name}` and take `.idx{way}()` of the aggregate, not "
               f"`.{way}()`" if way else f": group by `{column.name}`")
        return Refuse(WHICH.format(word=word, value=value, table=column.table,
                                   column=column.name, how=how,
                                   offer=repair.note(found) if found else ""),
                      f"the answer is a figure where the question asks which {word}"
                      + ("; offered the cell recast" if found else ""), key=WHICH_KEY)


def _period_refusal(facts: Facts, answer: Answer, question: str, word: str,
                    dates: Column) -> Refuse | None:
    """"Which month ..." answered while no cell grouped the rows by a period of their
    dates: refused once, with the newest aggregate's cell grouped by that period when the
    recast ran on a fork."""
    way = direction(question)
    if not _open(facts, PERIOD_KEY) or way is None or grouped_by_period(facts.computed, word):
        return None
    value = figure(answer.text) if bare_figure(answer.text) else None
    cell = (source(facts.shown, value) if value else None) or facts.shown[-1]
    found = _offer(facts, period_recasts(cell.code, dates, word, way))
    text = answer.text.strip()
    return Refuse(PERIOD.format(word=word, dates=dates.name, value=repr(text[:60]),
                                accessor=PERIODS[word], way=way,
                                offer=repair.note(found) if found else ""),
                  f"the question asks which {word}; no cell grouped the rows by it"
                  + ("; offered the cell recast" if found else ""), key=PERIOD_KEY)


CLOSEST = ("Not accepted yet: the question asks which is closest, and none of the cells you "
           "ran measures a distance (`(values - target).abs()`), so your answer is the "
           "smallest or largest value, not the closest one.{offer} Answer with FINAL(answer) "
           "from its output.")
CLOSEST_KEY = "closest, never measured"


class Closest(Rule):
    """An answer to "which ... is closest to ..." when no cell of the run measured a
    distance (`abs`): the 1.5B model took `medians.idxmin()` for "the region whose median
    is closest to the overall mean" (the task suite's multistep family, 0 of 5). Refused
    once per run, with the newest pick recast over the distance to a number the cell
    names, when that ran on a fork."""

    def on_answer(self, facts: Facts, answer: Answer, asked: list[str],
                  branch: Sequence[Entry]) -> Refuse | None:
        if not _open(facts, CLOSEST_KEY) or (q := _question(branch)) is None \
                or not _CLOSEST.search(q[0].lower()) \
                or any(_DISTANCE.search(c) for c in facts.computed):
            return None
        cell = next((s for s in reversed(facts.shown)
                     if any(f".{p}(" in s.code for p in _PICKS)), None)
        if cell is None:
            return None
        found = _offer(facts, closest_recasts(cell.code))
        return Refuse(CLOSEST.format(offer=repair.note(found) if found else ""),
                      "the question asks for the closest; no cell measured a distance"
                      + ("; offered the cell recast" if found else ""), key=CLOSEST_KEY)


UNPICKED = ("Not accepted yet: the question asks which {word} has the {way}imum, and none of "
            "the cells you ran picks it (`.idx{way}()`, `.sort_values()`, `.nlargest()`): "
            "your answer was read off a printed table.{offer} Answer with FINAL(answer) from "
            "its output.")
UNPICKED_KEY = "which, never picked"


class Unpicked(Rule):
    """A name answering "which <thing> had the most ..." when no cell of the run picked
    an extreme (`idxmax`, a sort, `nlargest`, `max`...): the 1.5B model printed the totals
    per category and answered the first row (the task suite's groupby family, twice, both
    verified: the answer's name and figure were shown). Refused once per run, and only
    with the newest cell that printed the totals followed by the pick, which ran on a fork
    and gave a value of the asked column."""

    def on_answer(self, facts: Facts, answer: Answer, asked: list[str],
                  branch: Sequence[Entry]) -> Refuse | None:
        if not _open(facts, UNPICKED_KEY) or bare_figure(answer.text) \
                or (q := _question(branch)) is None or (hit := which(*q)) is None \
                or (way := direction(q[0])) is None \
                or any(_PICKED.search(c) for c in facts.computed):
            return None
        word, column = hit
        for cell in reversed(facts.shown[-3:]):
            found = _offer(facts, pick_recasts(cell.code, column.table, column.name, way))
            if found is not None:
                return Refuse(UNPICKED.format(word=word, way=way, offer=repair.note(found)),
                              f"the question asks which {word} has the {way}imum; no cell "
                              "picked it; offered the cell with the pick", key=UNPICKED_KEY)
        return None
