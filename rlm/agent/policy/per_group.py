"""The X with the highest Y in each Z: a step of that shape, done by one program the data
ran (issue 60).

The long-run suite's tasks ask it in several words ("the product with the highest total
amount in each region", "for each origin airport, find the month with the worst average
departure delay"), and the 1.5B default model, asked the step alone, grouped by one of
the two columns (sales: by region, then `['product']` of a table that no longer had it,
five cells until the run stopped) or took each group's `idxmin` as the month (flights).
The answer needs both columns grouped, then the top row of each group: a program of two
lines the model does not compose, and copies when shown.

`program(step, descriptions)` reads the step's words against the input tables' columns
(the `context_vars` descriptions): X is the column named just before "with the
<extreme>", Z the column after "in/for/of each", "per" or "for every" (anywhere in the
step), Y the number column whose name's parts begin the words after the extreme
(`dep_delay` in "departure delay", `amount` in "total amount"); the aggregate is the
word before Y (total/sum, average/mean, median; none: the rows themselves; "the most" with
no Y: the rows counted). All three from one table; a step that names no such columns
gets none. "worst" and "best" take their direction from what the words after them
measure: of a cost (a delay, errors, a loss: `_COSTS`) the worst is the largest, of
anything else (a score, revenue) the smallest.

The program is offered only after it ran on a fork of the kernel (Facts.offer), by the
rule that shows the step (rlm.agent.policy.steps).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from rlm.agent.policy.operations import Column, _forms, table_columns

_EXTREME = {"highest": "max", "largest": "max", "biggest": "max", "greatest": "max",
            "most": "max", "top": "max", "maximum": "max", "max": "max", "lowest": "min",
            "smallest": "min", "least": "min", "fewest": "min", "minimum": "min",
            "min": "min", "worst": "", "best": ""}
_AGG = {"total": "sum", "sum": "sum", "summed": "sum", "average": "mean", "avg": "mean",
        "mean": "mean", "median": "median"}
_WITH = re.compile(r"\b(?:the\s+)?([a-z][\w ]{0,40}?)\s+(?:with|that has|having|has|had|have)\s+the\s+(?:"
                   + "|".join(_EXTREME) + r")\b", re.I)
_EACH = re.compile(r"\b(?:in|for|of|within)\s+each\s+([a-z]\w*)|\bper\s+([a-z]\w*)"
                   r"|\bfor\s+every\s+([a-z]\w*)", re.I)
_NUMBER_TYPES = ("int", "float", "uint")
# what is worse the more of it there is: "the worst delay" is the largest, "the best
# delay" the smallest; of anything else (a score, revenue) the worst is the smallest
_COSTS = re.compile(r"^(?:delay|late|lateness|latency|error|fail|failure|defect|cost|loss|"
                    r"complaint|wait|waiting|duration|downtime|churn|return|cancel|"
                    r"cancellation|debt|expense|risk|crash|incident|bug|miss)", re.I)



@dataclass(frozen=True)
class PerGroup:
    table: str
    label: Column  # X
    by: Column  # Z
    value: Column | None  # Y (None: count the rows)
    agg: str  # sum | mean | median | size | "" (the rows themselves)
    extreme: str  # max | min | "" (both)

    @property
    def code(self) -> str:
        t, x, z = self.table, self.label.name, self.by.name
        if self.agg == "size":
            y = "rows"
            lines = [f"per = {t}.groupby([{z!r}, {x!r}]).size().reset_index(name='rows')"]
        elif self.agg:
            y = self.value.name if self.value else ""
            lines = [f"per = {t}.groupby([{z!r}, {x!r}])[{y!r}].{self.agg}().reset_index()"]
        else:
            y = self.value.name if self.value else ""
            lines = [f"per = {t}[[{z!r}, {x!r}, {y!r}]]"]
        if self.agg in ("sum", "size"):
            # each Z's own total beside its top row: the long-run sales run wrote the top
            # product's amount as the region's total (the only figure the rows held)
            lines.append(f"per[{z + '_total'!r}] = per.groupby({z!r})[{y!r}].transform('sum')")
        order = f"per.sort_values({y!r}).groupby({z!r})"
        if self.extreme == "max":
            lines.append(f"top = {order}.tail(1)\nprint(top)")
        elif self.extreme == "min":
            lines.append(f"top = {order}.head(1)\nprint(top)")
        else:
            lines.append(f"largest = {order}.tail(1)\nsmallest = {order}.head(1)\n"
                         "print('largest:')\nprint(largest)\nprint('smallest:')\nprint(smallest)")
        return "\n".join(lines)

    @property
    def what(self) -> str:
        by = f"{self.agg} of {self.value.name}" if self.value and self.agg not in ("", "size") \
            else "rows" if self.agg == "size" else self.value.name if self.value else ""
        pick = {"max": "the top row", "min": "the bottom row"}.get(
            self.extreme, "the largest and the smallest row")
        also = f" with its {self.by.name}_total" if self.agg in ("sum", "size") else ""
        return (f"{by} per {self.by.name} and {self.label.name}, then {pick} of each "
                f"{self.by.name}{also}")


def program(step: str, descriptions: Iterable[str]) -> PerGroup | None:
    """The per-group extreme `step` asks for, in the input's columns, or None."""
    with_ = _WITH.search(step)
    each = _EACH.search(step)
    if with_ is None or each is None:
        return None
    columns = table_columns(descriptions)
    extreme = re.findall(r"[a-z]+", with_.group(0).lower())[-1]
    words = re.findall(r"[a-z][a-z0-9]*", step.lower()[with_.end():])[:6]
    by_word = next(g for g in each.groups() if g).lower()
    for table in dict.fromkeys(c.table for c in columns if c.table):
        cols = [c for c in columns if c.table == table]
        label = _named(with_.group(1).lower().split()[-1], cols)
        by = _named(by_word, cols)
        if label is None or by is None or label.name == by.name:
            continue
        value, at = _value(words, cols, {label.name, by.name})
        agg = _agg(words[:at], value, extreme)
        if agg is None:
            continue
        return PerGroup(table, label, by, value, agg, _direction(extreme, words))
    return None


def _direction(extreme: str, words: list[str]) -> str:
    """max or min for the extreme word; "worst" and "best" by what the words after them
    measure (`_COSTS`: more is worse); "" where neither is known (not reached now)."""
    if _EXTREME[extreme]:
        return _EXTREME[extreme]
    cost = any(_COSTS.match(w) for w in words[:4])
    return "max" if (extreme == "worst") == cost else "min"


def _named(word: str, cols: list[Column]) -> Column | None:
    """The column `word` names: by its name, or a singular of it (`products`)."""
    forms = _forms(word)
    return next((c for c in cols if c.name.lower() in forms), None)


def _value(words: list[str], cols: list[Column], taken: set[str]
           ) -> tuple[Column | None, int]:
    """The number column the words after the extreme name, and the word it starts at:
    each part of its name begins one of the words, in order (`dep_delay`: "departure
    delay"; `amount`: "amount"). (None, all the words) when none does."""
    for i in range(len(words)):
        for col in cols:
            parts = [p for p in col.name.lower().split("_") if p]
            if col.name in taken or not parts or not col.dtype.startswith(_NUMBER_TYPES):
                continue
            if len(words) - i >= len(parts) and all(
                    w.startswith(p) for p, w in zip(parts, words[i:], strict=False)):
                return col, i
    return None, len(words)


def _agg(before: list[str], value: Column | None, extreme: str) -> str | None:
    """The aggregate the words before the value ask of it ("" for the rows themselves;
    "size" for "the most X" with no value column: rows counted); None when they ask for
    nothing the data has."""
    agg = next((_AGG[w] for w in before if w in _AGG), "")
    if value is None:
        return "size" if not agg and extreme in ("most", "fewest", "least") else None
    return agg
