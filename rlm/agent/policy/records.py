"""A text of records whose fields the task quotes, read into a table before the first cell
(issue 60).

"contracts.txt holds 60 agreements separated by lines of '---'. Each has a 'Contract ID:'
line and a 'Term: N months' line": the task says how its text is laid out, and the 1.5B
default model, in every long-run pass, searched for the literal 'Term: 25' and took each
record's first line as its id, then wrote an empty file until the run stopped. Read as a
table of one row a record, the question is a filter the model gets right.

`program(task, descriptions)` takes, for each text input (`- name: str, ...` in the
`context_vars` descriptions), the task's quoted strings:
- a separator: a quoted run of punctuation ('---', '***', '====') the task says records are
  separated by; records are the text split on lines that hold only it;
- fields: quoted strings that hold a colon ('Contract ID:', 'Term: N months'); the words
  before the colon name the field (`contract_id`, `term`), what follows is its value: a
  placeholder N, X or K (any case: a whole number, read as int), "..." (any text), other
  words literal ('months').
The fields are those the program finds in at least half the records: it runs on a fork of
the kernel first (Facts.offer) with that check, and is shown only when it ran (rule
`RecordFields`, before the model's first turn). Without a separator, or with no field
quoted, nothing is shown.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from rlm.agent.policy.decisions import Facts, Note
from rlm.agent.policy.rules import Rule
from rlm.agent.rewrites import Rewrite

_TEXT = re.compile(r"^- ([A-Za-z_]\w*): str, ", re.M)
_QUOTED = re.compile(r"'([^'\n]{1,60})'|\"([^\"\n]{1,60})\"|`([^`\n]{1,60})`")
_SEPARATOR = re.compile(r"[-=*#~_.+]{3,}")
_PLACEHOLDER = re.compile(r"^(?:N|X|K|n|x|k|\d+)$")
_ANY = {"...", "…", "<value>", "<text>"}
MAX_FIELDS = 8
NOTE = ("[{name} is a text of records separated by lines of {sep!r}. This cell reads it into "
        "a table, one row a record and one column a field the task names; it ran on a copy "
        "of your variables. Send it as your first cell, then work from `{table}`:\n```python\n"
        "{code}\n```]")


@dataclass(frozen=True)
class Field:
    name: str
    pattern: str  # a regex with one group: the value
    number: bool


@dataclass(frozen=True)
class Records:
    text: str  # the input's name
    separator: str
    fields: tuple[Field, ...]

    @property
    def table(self) -> str:
        return f"{self.text}_table"

    @property
    def code(self) -> str:
        lines = ["import re", "import pandas as pd", "",
                 f"records = re.split(r'(?m)^[ \\t]*{re.escape(self.separator)}[ \\t]*$', "
                 f"{self.text})", "rows = []", "for rec in records:", "    row = {}"]
        for f in self.fields:
            value = "int(m.group(1))" if f.number else "m.group(1).strip()"
            lines += [f"    m = re.search({_raw(f.pattern)}, rec)",
                      f"    row[{f.name!r}] = {value} if m else None"]
        lines += ["    rows.append(row)", f"{self.table} = pd.DataFrame(rows)",
                  f"print(len({self.table}), 'records')", f"print({self.table}.head())"]
        return "\n".join(lines)

    @property
    def guard(self) -> str:
        """The check the offer rests on: every field found in at least half the records."""
        return (f"assert len({self.table}) > 1 and "
                f"{self.table}.notna().mean().min() >= 0.5")


def _raw(pattern: str) -> str:
    """`pattern` as a raw string literal (as a plain one where both quotes occur in it)."""
    for q in ("'", '"'):
        if q not in pattern and not pattern.endswith("\\"):
            return f"r{q}{pattern}{q}"
    return repr(pattern)


def text_names(description: str) -> list[str]:
    """The text inputs (`- name: str, ...`) an input description lists."""
    return _TEXT.findall(description)


def program(task: str, descriptions: Iterable[str]) -> Records | None:
    """The records `task` describes in a text input, or None."""
    texts = [name for d in descriptions for name in text_names(d)]
    if len(texts) != 1:
        return None
    quoted = [next(g for g in m.groups() if g) for m in _QUOTED.finditer(task)]
    separator = next((q.strip() for q in quoted if _SEPARATOR.fullmatch(q.strip())), None)
    fields: list[Field] = []
    for q in quoted:
        if ":" in q and (f := _field(q)) is not None and f.name not in {x.name for x in fields}:
            fields.append(f)
    if separator is None or not fields:
        return None
    return Records(texts[0], separator, tuple(fields[:MAX_FIELDS]))


def _field(quoted: str) -> Field | None:
    label, _, value = quoted.partition(":")
    name = re.sub(r"\W+", "_", label.strip().lower()).strip("_")
    if not name or not name[0].isalpha():
        return None
    words = value.split()
    parts: list[str] = []
    group, number = False, False
    for w in words:
        if not group and _PLACEHOLDER.match(w):
            parts.append(r"(\d+)")
            group = number = True
        elif not group and w in _ANY:
            parts.append(r"(.+?)")
            group = True
        else:
            parts.append(re.escape(w))
    if not group:  # 'Contract ID:': the rest of its line
        parts.append(r"(\S.*)")
    return Field(name, re.escape(label.strip()) + r":\s*" + r"\s+".join(parts), number)


class RecordFields(Rule):
    """A text of records whose fields the task quotes: the cell that reads it into a table,
    shown before the model's first turn once it ran on a fork (module docstring)."""

    def on_turn(self, facts: Facts, turn: int) -> Note | None:
        if facts.native_tools or turn != 1 or facts.cells or not facts.prompt:
            return None
        found = program(facts.prompt, facts.described())
        if found is None or facts.offer([Rewrite(found.code, "records", found.guard)]) is None:
            return None
        facts.first_cell = found.code
        return Note(NOTE.format(name=found.text, sep=found.separator, code=found.code,
                                table=found.table),
                    f"{found.text}: a text of records, read into a table on a fork")
