"""What the words of a goal and its question say a named file holds, checked against it.

The 1.5B model finished the long-run shipments goal ("late_rate.csv gives every
carrier's share of late orders, highest first"; its task: "... write late_rate.csv with the
columns carrier,late_share") with a file of one carrier and an extra column, said
"late_rate.csv is correct", and the goal completed: the file existed, its first line began
with the gate's words, and nothing compared it with what the words declare. Four
declarations are read here, each tied to a file by the sentence that names it:

- **its columns**: a list of two or more names after "column(s)", "field(s)", "header"
  ("with the columns carrier,late_share", "columns: region, total and top_product") -> a
  CSV/TSV's header is those names, in that order (any case); the list ends at the first
  word that does not end an item ("..., highest share first"); for a JSON file, the keys
  of an object the words show ('as {"station": ..., "day": "YYYY-MM-DD"}') -> the file is
  JSON and its object (each object of its list) has those keys;
- **a row for every value of a column**: "one row per region", "one line for each origin
  airport" (any sentence naming the file), and the goal's own "every carrier's share",
  "each class's pass rate", "all the stations" (its objective states the end: the
  question's "compute each station's mean, find the hottest, write hottest.json" does
  not) -> when a word of the noun is a column of the input whose values the input's
  description lists in full (kernel_ext.columns: at most 15; a sample's are not full),
  the file holds each value (a CSV cell, else a whole word of the text; integers, which a
  file may spell another way, "March" for 3, are met by as many rows). A noun that
  what follows restricts ("every item whose stock fell", "every product in ...") declares
  nothing, and neither does a question that states a condition on another column: which
  rows remain is then the data's to say;
- **a share**: "each carrier's share of late orders", "the proportion of ...", "the
  fraction ..." in a sentence naming the file -> the file's share column (the one whose
  name says share/rate/proportion/fraction/pct, else its one number column; in a text of
  one number a line, those) lies between 0 and 1; with "percent"/"percentage"/"%" in the
  sentence, between 0 and 100. A change of a share ("the change in share") declares none;
- **an order**: "highest share first", "most errors first", "in descending order" -> the
  file's number column (the one, or the one the phrase names; in a text whose every line
  holds one number, "billing: 42", those) never rises; "lowest first", "ascending" -> never
  falls.

`declared` reads the words (pure); `unmet` checks one declaration against a file's bytes and
says what is wrong in the words a small model reads, with the values it missed.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from rlm.agent.context_files import file_names as named_files
from rlm.agent.policy.conditions import _QUOTED, LINE_WORD, _column_lines, conditions
from rlm.agent.policy.decisions import Answer, Facts, Refuse
from rlm.agent.policy.rules import Rule
from rlm.longrun.gates import head_tail
from rlm.session.branch import custom_entries, user_questions
from rlm.session.entries import Entry

MAX_SHOWN = 6  # missing values named in a message, at most
FILE_CHARS = 3000  # the head and tail of a file a refusal shows


_SENTENCE = re.compile(r"(?<=[.!?;])\s+(?=[A-Z0-9(\"'`])|\n+")
_COLUMNS = re.compile(r"\b(?:columns?|fields?|header)\b(?:\s+(?:named|called|names?|headers?))?"
                      r"\s*:?", re.I)
# a JSON object the words show ('as {"station": ..., "day": "YYYY-MM-DD"}'): its keys
_JSON_OBJECT = re.compile(r"\{[^{}\n]*\}")
_JSON_KEY = re.compile(r"[\"']([^\"'\n]{1,40})[\"']\s*:")
_ITEM = re.compile(r"\s*([`'\"]?)([A-Za-z_][\w.-]*)\1")
_ITEM_END = re.compile(r"\s*(?:,|\band\b|[.;:)(]|$)")
_ITEM_SEP = re.compile(r"\s*(?:,\s*(?:and\b)?|\band\b)")
_ROWS = re.compile(r"\bone\s+(?:row|line|entry|record)\s+(?:per|for\s+(?:each|every))\s+"
                   r"(?:the\s+)?(\w+)(?:\s+(\w+))?", re.I)
_EVERY = re.compile(r"\b(?:every|each|all(?:\s+the)?|all\s+of\s+the)\s+(\w+)('s\b|'(?!\w)|\b)"
                    r"(?:\s+(\w+))?", re.I)
# what after a noun narrows it to some of its values
_RESTRICTS = {"whose", "that", "which", "where", "who", "whom", "when", "if", "having",
              "except", "but", "in", "from", "at", "on", "during", "within", "under", "over",
              "above", "below", "between", "without", "of", "than"}
_DOWN = re.compile(r"\b(?:(?:highest|largest|biggest|greatest|most|top)\b[^.;,\n]{0,30}?\bfirst"
                   r"|descending|decreasing|(?:from\s+)?(?:highest|largest|most)\s+to\s+"
                   r"(?:lowest|smallest|least|fewest))\b", re.I)
_UP = re.compile(r"\b(?:(?:lowest|smallest|least|fewest)\b[^.;,\n]{0,30}?\bfirst"
                 r"|ascending|increasing|(?:from\s+)?(?:lowest|smallest|least|fewest)\s+to\s+"
                 r"(?:highest|largest|most))\b", re.I)
_A_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")
# a share as a noun ("each carrier's share of", "the share", "proportion"), not the verb
# ("share it with the team")
_SHARE = re.compile(r"(?:\b(?:proportion|fraction|percentage)s?|(?:'s|\b(?:the|a|its|their|"
                    r"market|each|what))\s+shares?|\bshares?(?=\s+of\b))\b"
                    r"(?:\s+of\s+[\w\s']{1,40}?(?=[,.;()]|\band\b|$))?", re.I)
_PERCENT = re.compile(r"\bper\s?cent(?:age)?s?\b|%", re.I)
_CHANGE = re.compile(r"\b(?:change|changes|difference|growth|increase|decrease|delta|grew|rose|"
                     r"fell|shift)\b", re.I)
# a column whose name says it holds a share
_SHARE_COLUMN = re.compile(r"share|rate|proportion|fraction|pct|percent|ratio", re.I)
_LEVELS = re.compile(r"^\): (\d+) values?: (.*)$|; (\d+) values?: (-?\d+(?:, -?\d+)*)")


@dataclass(frozen=True)
class Columns:
    """`file`'s header is `names`."""

    file: str
    names: tuple[str, ...]


@dataclass(frozen=True)
class Covers:
    """`file` holds every value of the input's `column` (`noun`: the words that asked)."""

    file: str
    noun: str
    column: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class Order:
    """`file`'s numbers never rise (`down`) or never fall; `phrase`: the words that asked."""

    file: str
    down: bool
    phrase: str


@dataclass(frozen=True)
class Share:
    """`file`'s share column lies in [0, `high`] (`phrase`: the words that asked)."""

    file: str
    phrase: str
    high: float


Shape = Columns | Covers | Share | Order


def sentences(text: str) -> list[str]:
    return [s for s in _SENTENCE.split(text or "") if s.strip()]


def _names_file(sentence: str, file: str) -> bool:
    return re.search(rf"(?<![\w/.-]){re.escape(file)}(?![\w-])", sentence) is not None


def column_list(text: str, start: int) -> list[str]:
    """The names listed from `start` (just after "columns"): each must end an item (a
    comma, "and", the clause's end); the list stops at the first that does not."""
    names: list[str] = []
    pos = start
    while (m := _ITEM.match(text, pos)) and _ITEM_END.match(text, m.end()):
        names.append(m.group(2).rstrip(".-"))
        sep = _ITEM_SEP.match(text, m.end())
        if sep is None:
            break
        pos = sep.end()
    return names


def full_levels(descriptions: Iterable[str]) -> dict[str, set[str] | None]:
    """Each input column (lower-cased name) -> every value the description lists of it,
    or None when some table's description of a column of that name is not complete (too
    many values, a sample). A text's line words are not columns."""
    out: dict[str, set[str] | None] = {}
    for _table, column, dtype, facts in _column_lines(descriptions):
        if dtype == LINE_WORD:
            continue
        key = column.lower()
        m = _LEVELS.search(facts)
        if m is None or "in the sample" in facts:
            out[key] = None
            continue
        if m.group(1):
            values = {v.group(1) for v in _QUOTED.finditer(m.group(2))}
            complete = len(values) == int(m.group(1))
        else:
            values = set(m.group(4).split(", "))
            complete = len(values) == int(m.group(3))
        if not complete:
            out[key] = None
        elif key not in out:
            out[key] = values
        elif out[key] is not None:
            out[key] = out[key] | values  # type: ignore[operator]
    return out


def _singular(word: str) -> str:
    w = word.lower()
    for end, to in (("ies", "y"), ("sses", "ss"), ("ches", "ch"), ("shes", "sh"),
                     ("xes", "x"), ("s", "")):
        if w.endswith(end) and len(w) > len(end) + 2 and not w.endswith("ss"):
            return w[: -len(end)] + to
    return w


def _column_of(words: Sequence[str], levels: dict[str, set[str] | None]) -> str | None:
    """The input column a noun (one or two words) names: a word of it, or both joined."""
    low = [_singular(w) for w in words if w]
    joined = "_".join(low)
    for name in levels:
        if name in (joined, *low) or _singular(name) in (joined, *low):
            return name
    return None


def declared(objective: str, question: str, files: list[str],
             descriptions: Sequence[str]) -> list[Shape]:
    """What the goal's `objective` and the `question` declare of each of `files`."""
    levels = full_levels(descriptions)
    stated = [c.lower() for c in conditions(f"{question}\n{objective}", descriptions)]
    out: list[Shape] = []
    for file in files:
        table = file.lower().endswith((".csv", ".tsv"))
        found: list[Shape] = []
        for text, is_goal in ((objective, True), (question, False)):
            for s in sentences(text):
                if not _names_file(s, file):
                    continue
                if table:
                    for m in _COLUMNS.finditer(s):
                        names = column_list(s, m.end())
                        if len(names) > 1:
                            found.append(Columns(file, tuple(names)))
                elif file.lower().endswith(".json"):
                    for m in _JSON_OBJECT.finditer(s):
                        keys = _JSON_KEY.findall(m.group(0))
                        if keys:
                            found.append(Columns(file, tuple(keys)))
                nouns = [(s[m.start():m.end(1)], (m.group(1), m.group(2) or ""))
                         for m in _ROWS.finditer(s)]
                if is_goal:
                    nouns += [(s[m.start():m.end(2)], (m.group(1), "")) for m in _EVERY.finditer(s)
                              if m.group(2) or (m.group(3) or "").lower() not in _RESTRICTS]
                for words, noun in nouns:
                    column = _column_of(noun, levels)
                    values = levels.get(column) if column else None
                    if column is None or not values:
                        continue
                    low = {v.lower() for v in values}
                    if any(c not in low for c in stated):
                        continue  # the question narrows the rows: which remain is unknown
                    found.append(Covers(file, words.strip(), column, tuple(sorted(values))))
                if (share := _SHARE.search(s)) and not _CHANGE.search(s):
                    found.append(Share(file, re.sub(r"^'s\s+", "", share.group(0)).strip(),
                                       100.0 if _PERCENT.search(s) else 1.0))
                for pattern, down in ((_DOWN, True), (_UP, False)):
                    if order := pattern.search(s):
                        found.append(Order(file, down, order.group(0)))
        for shape in found:  # the first declaration of each kind (of each column)
            if not any(type(o) is type(shape) and o.file == file
                       and getattr(o, "column", "") == getattr(shape, "column", "")
                       for o in out):
                out.append(shape)
    # what a file is before what it holds, then its values, then its order
    kinds = (Columns, Covers, Share, Order)
    return sorted(out, key=lambda o: kinds.index(type(o)))


def _rows(name: str, text: str) -> list[list[str]] | None:
    """A CSV/TSV file's rows (its cells stripped), or None when it does not parse."""
    try:
        rows = list(csv.reader(io.StringIO(text),
                               delimiter="\t" if name.lower().endswith(".tsv") else ","))
    except csv.Error:
        return None
    return [[c.strip() for c in r] for r in rows if any(c.strip() for c in r)]


def _entries(name: str, text: str) -> int:
    """A table's data rows, or a text's non-empty lines."""
    if name.lower().endswith((".csv", ".tsv")):
        return max(0, len(_rows(name, text) or []) - 1)
    return sum(1 for line in text.splitlines() if line.strip())


def _number(cell: str) -> float | None:
    try:
        return float(cell.replace(",", "").rstrip("%"))
    except ValueError:
        return None


def _numbers(shape: Order | Share, text: str, least: int = 2
             ) -> tuple[str, list[float]] | None:
    """The numbers the phrase declares something of, with their column's name: a table's
    number column (a share: the one whose name says share, rate, ...; else the only one,
    or the one the phrase names), else each line's one number; None with fewer than
    `least` of them, or when which column is not clear."""
    rows = _rows(shape.file, text) if shape.file.lower().endswith((".csv", ".tsv")) else None
    if rows and len(rows) > least:
        head, body = rows[0], rows[1:]
        numeric = [i for i in range(len(head))
                   if all(len(r) > i and _number(r[i]) is not None for r in body)]
        words = set(re.findall(r"[a-z]+", shape.phrase.lower()))
        named = [i for i in numeric if words & set(re.findall(r"[a-z]+", head[i].lower()))]
        if isinstance(shape, Share):
            named = [i for i in numeric if _SHARE_COLUMN.search(head[i])] or named
        pick = named if len(named) == 1 else numeric
        if len(pick) != 1:
            return None
        return head[pick[0]], [_number(r[pick[0]]) or 0.0 for r in body]
    lines = [ln for ln in text.splitlines() if ln.strip()]
    found = [_A_NUMBER.findall(ln) for ln in lines]
    if len(lines) < least or any(len(f) != 1 for f in found):
        return None  # a line of several numbers (a log line, a date) is no "name: count"
    return "", [float(f[0]) for f in found]


def _json_keys(shape: Columns, text: str) -> str | None:
    """A JSON file's object (or each object of its list) has the keys the words show."""
    f, want = shape.file, list(shape.names)
    try:
        data = json.loads(text)
    except ValueError:
        return (f"Not complete: the task shows {f} as an object with the keys "
                f"{', '.join(want)}, but {f} is not JSON. Write it with json.dump "
                "(`json.dump({...}, open(...), default=str)`), print it, then finish.")
    objects = data if isinstance(data, list) else [data]
    for obj in objects:
        got = list(obj) if isinstance(obj, dict) else None
        if got is None or sorted(k.lower() for k in got) != sorted(k.lower() for k in want):
            return (f"Not complete: the task shows {f} as an object with the keys "
                    f"{', '.join(want)}, but it holds "
                    f"{'the keys ' + ', '.join(map(str, got)) if got is not None else type(obj).__name__}. "
                    f"Write {f} again with exactly those keys, print it, then finish.")
    return None


def unmet(shape: Shape, text: str, writer: str | None = None) -> str | None:
    """What `text` (the file's content) lacks of `shape`, as the model reads it; None when
    it holds (or cannot be told: a file that does not parse as a table). `writer`: the
    name the file was written from (rlm.agent.policy.written), which a fix names."""
    f = shape.file
    if isinstance(shape, Columns) and f.lower().endswith(".json"):
        return _json_keys(shape, text)
    if isinstance(shape, Columns):
        rows = _rows(f, text)
        if rows is None:
            return None
        head = rows[0] if rows else []
        if [h.lower() for h in head] == [n.lower() for n in shape.names]:
            return None
        want = ",".join(shape.names)
        return (f"Not complete: the task asks for {f} with the columns {want}, but its "
                f"header is {','.join(head) or '(empty)'}. {_fix(shape, head, writer)}, "
                "print it, then finish.")
    if isinstance(shape, Covers):
        if f.lower().endswith((".csv", ".tsv")):
            rows = _rows(f, text) or []
            # in the column of that name when the file has one: a header renamed over
            # other columns held 'East' under `total` and row numbers under `region`
            heads = [h.lower() for h in rows[0]] if rows else []
            at = heads.index(shape.column.lower()) if shape.column.lower() in heads else None
            held = {c.lower() for r in rows for i, c in enumerate(r) if at is None or i == at}
            where = f"{f} (its column {rows[0][at]!r})" if at is not None else f
        else:
            held = {w.lower() for w in re.findall(r"[\w][\w.-]*[\w]|\w", text)}
            where = f
        missing = [v for v in shape.values if v.lower() not in held]
        if not missing:
            return None
        if all(re.fullmatch(r"-?\d+", v) for v in shape.values) and _entries(f, text) >= len(
                shape.values):
            return None  # numbers the file may spell another way ("March" for 3): counted
        shown = ", ".join(repr(v) for v in missing[:MAX_SHOWN])
        more = f" and {len(missing) - MAX_SHOWN} more" if len(missing) > MAX_SHOWN else ""
        return (f"Not complete: the words \"{shape.noun}\" ask {f} for each of the "
                f"{len(shape.values)} values of the column {shape.column!r} in your input, "
                f"but {where} leaves out {len(missing)} of them: {shown}{more}. Write {f} again "
                f"from a table with one row for each {shape.column} (group by "
                f"{shape.column!r} over all the rows; a value with no matching rows still "
                "gets its row), print it, then finish.")
    if isinstance(shape, Share):
        return _share(shape, text)
    got = _numbers(shape, text)
    if got is None:
        return None
    numbers = got[1]
    for a, b in zip(numbers, numbers[1:], strict=False):
        if (b > a) if shape.down else (b < a):
            way = "highest" if shape.down else "lowest"
            return (f"Not complete: \"{shape.phrase}\" asks {f} to list the {way} first, but "
                    f"{b:g} comes after {a:g}. Sort it "
                    f"(`sort_values(..., ascending={not shape.down})`), write {f} again, "
                    "print it, then finish.")
    return None


def _fix(shape: Columns, head: list[str], writer: str | None) -> str:
    """How to write `shape.file` with its columns, as far as the header shows it can be
    done from what was written (`writer`: its name): a selection when every column is
    there (extra ones, another order), naming the values of a Series written with its
    index as the first column (header `class,0`), else computing what is missing. Never a
    placeholder name (the 1.5B model sent `table[[...]]` as it was) nor a selection of a
    column the table lacks (it then renamed the columns it had)."""
    cols, f = list(shape.names), shape.file
    have = {h.lower() for h in head}
    lacking = [c for c in cols if c.lower() not in have]
    how = f"Write {f} again with exactly those columns, in that order"
    if not lacking:
        if writer is None:
            return f"{how} (select them from the table you write, then `.to_csv({f!r}, " \
                   "index=False)`)"
        return f"{how} (`{writer}.reset_index()[{cols!r}].to_csv({f!r}, index=False)`)"
    if writer is not None and len(head) == len(cols) == 2 and lacking == cols[1:] \
            and head[0].lower() == cols[0].lower():  # a Series: its values had no name
        return (f"{how} (`{writer}.rename({cols[1]!r}).reset_index().to_csv({f!r}, "
                "index=False)`)")
    names = ", ".join(lacking)
    return (f"It has no column {names}: compute {'it' if len(lacking) == 1 else 'them'} "
            f"from the data as a column of the table (do not rename another column to "
            f"{lacking[0]!r}), then write {f} with exactly those columns, in that order")


def _share(shape: Share, text: str) -> str | None:
    """A share outside [0, high]: the 1.5B model wrote each class's passing scores over its
    mean score (3.89) as a "pass rate (the share of its students who pass)"."""
    got = _numbers(shape, text, least=1)
    if got is None:
        return None
    column, numbers = got
    high = 100.0 if "%" in text else shape.high  # "29%" is a share written as a percent
    bad = next((v for v in numbers if not 0 <= v <= high), None)
    if bad is None:
        return None
    f, what = shape.file, "a percentage" if shape.high == 100 else "a share"
    where = f"its column {column!r}" if column else "it"
    return (f"Not complete: \"{shape.phrase}\" asks {f} for {what}, a number from 0 to "
            f"{shape.high:g} (the part divided by the whole{', times 100' if shape.high == 100 else ''}), "
            f"but {where} holds {bad:g}. For each group, divide the number of rows that meet "
            f"the condition by the number of all its rows; write {f} again, print it, then "
            "finish.")


def first_unmet(shapes: Iterable[Shape], read: Callable[[str], str | None],
                shown: Callable[[str, str], bool] = lambda name, text: False,
                writer: Callable[[str], str | None] = lambda name: None,
                ) -> tuple[Shape, str] | None:
    """The first of `shapes` its file (`read(name)`: its text, None when there is none to
    check) lacks, with what the model reads: the problem, then the file's content unless
    `shown(name, text)` says the model has seen it as it is (a refusal repeated over an
    unchanged file filled the logs run's context with it: two compactions of 3 minutes)."""
    for shape in shapes:
        text = read(shape.file)
        problem = None if text is None else unmet(shape, text, writer(shape.file))
        if problem is None or text is None:
            continue
        if shown(shape.file, text):
            return shape, f"{problem}\n({shape.file} is as it was when you were shown it.)"
        return shape, (f"{problem}\nIts content now:\n<file path=\"{shape.file}\">\n"
                       f"{head_tail(text, FILE_CHARS).rstrip()}\n</file>")
    return None


SHAPE_KEY = "file shape:"


class DeclaredFile(Rule):
    """An answer while a file the question names, written by a cell of this session, lacks
    what the question's words declare of it (its columns, a row per value, an order):
    refused once per run and file while a turn is left, with what is wrong and the file's
    content. The run without a goal gets what a goal's judge asks at every claim
    (rlm.agent.policy.goal_evidence; with a goal in force, the judge's, not this)."""

    def on_answer(self, facts: Facts, answer: Answer, asked: list[str],
                  branch: Sequence[Entry]) -> Refuse | None:
        if facts.max_turns is not None and facts.turn >= facts.max_turns:
            return None
        questions = user_questions(branch)
        question = questions[-1] if questions else ""
        files = [f for f in named_files(question) if SHAPE_KEY + f not in facts.refused]
        if not files:
            return None
        inputs = [str(e.content or "") for e in custom_entries(branch, "context_vars")]
        found = first_unmet(declared("", question, files, inputs), facts.read_written,
                            writer=facts.writer)
        if found is None:
            return None
        shape, message = found
        return Refuse(message, f"{shape.file} lacks what the question declares of it "
                               f"({type(shape).__name__.lower()}); asked the model to write it again",
                      key=SHAPE_KEY + shape.file)
