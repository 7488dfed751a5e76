"""What counts as new information in a cell's output (issue 58). Pure, no I/O.

An output is read as a *shape* (its text with every volatile token made a placeholder and
every other number made `#`) and the *values* of those numbers. Volatile tokens carry no
information about the task: timestamps and dates, clock times, durations and rates
(`1.2s`, `350 ms`, `12.5it/s`), epoch seconds, hex ids and addresses (`0x7f3a...`, uuids,
hashes), progress-bar glyphs and the execution counts in a traceback (`In[12]`).

`Outputs.see(text)` then judges an output against every earlier one of the run:
  - a shape never seen before is new (a poll that goes from `running` to `done` changes
    its text, so it is new);
  - the same shape and the same values as an earlier output is the same output;
  - the same shape with other values is new when some number that changed is not a
    *counter*: a counter changes by the same step as it did the last time this shape was
    printed (`iteration 7`, `iteration 8`, `iteration 9`: step 1 twice). A *measure* is
    never a counter: a number followed by `%`, or the numerator of `a/b` (`40/100`) — it
    is bounded, so moving it to a value not seen before is progress toward an end (a poll
    at 10%, 20%, ... 90% is progress, each time), and it cannot go on for ever.
Limits, by design: a counter is known only at its second step (the first change of a
number counts as new, once); a quantity that grows by a constant step and is not written
as a measure (`rows loaded: 1000`, `2000`, `3000`) reads as a counter; a value that changes
at random (`print(random.random())`) reads as new every time; an error's values are not
compared at all (a failed cell's output is new only when its shape is: the same error at
another line number is the same error).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_VOLATILE = [  # (pattern, placeholder): applied in order, before numbers are read
    (r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", "<id>"),
    (r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?"
     r"(?:Z|[+-]\d{2}:?\d{2})?)?", "<time>"),
    (r"\b\d{1,2}:\d{2}(?::\d{2})?(?:[.,]\d+)?(?:\s?[AaPp][Mm])?\b", "<time>"),
    (r"\b1[5-9]\d{8}(?:\.\d+)?\b", "<time>"),  # epoch seconds (2017-2033)
    (r"\b\d+(?:\.\d+)?\s?(?:[kMG]?B|it|its|s|rows|items)/s\b", "<rate>"),
    (r"(?<![\w.])\d+(?:\.\d+)?\s?(?:ns|µs|us|ms|s|sec|secs|seconds?|mins?|minutes?|"
     r"h|hrs?|hours?)\b", "<duration>"),
    (r"\b0x[0-9a-fA-F]+\b", "<id>"),
    (r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{8,}\b", "<id>"),  # hashes, hex ids
    (r"\bIn \[\d+\]|\bIn\[\d+\]|ipykernel_\d+/\d+\.py", "<cell>"),
    (r"[█▉▊▋▌▍▎▏░▒▓■□━─╸╺]+", "<bar>"),
    (r"\[[#=>.\- ]{4,}\]", "<bar>"),
]
_VOLATILE_RE = [(re.compile(p), r) for p, r in _VOLATILE]
_NUMBER = re.compile(r"(?<![\w.])(?P<n>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)(?!\w)(?P<m>\s?%|/(?=\d))?")


@dataclass(frozen=True)
class Reading:
    shape: str
    values: tuple[float, ...]
    measures: frozenset[int]  # positions of numbers that are measures (`%`, `a/b`)


def read(text: str) -> Reading:
    """`text` as a shape and its numbers; whitespace runs are one space."""
    t = " ".join(text.split())
    for pattern, placeholder in _VOLATILE_RE:
        t = pattern.sub(placeholder, t)
    values: list[float] = []
    measures: set[int] = set()

    def number(m: re.Match[str]) -> str:
        if m.group("m"):
            measures.add(len(values))
        values.append(float(m.group("n")))
        return "#" + (m.group("m") or "")

    return Reading(_NUMBER.sub(number, t), tuple(values), frozenset(measures))


@dataclass
class Outputs:
    """Every output of one run, as shapes: `see` says whether an output is new."""

    seen: set[tuple[str, tuple[float, ...]]] = field(default_factory=set)
    last: dict[str, tuple[float, ...]] = field(default_factory=dict)  # shape -> its values
    steps: dict[str, tuple[float, ...]] = field(default_factory=dict)  # shape -> last step

    def see(self, text: str, *, values_count: bool = True) -> str | None:
        """Record `text`; None when it is new information, else how it repeats: "same"
        (an earlier output again, volatile tokens aside) or "counter" (it differs from an
        earlier one only in counters). `values_count=False` (a failed cell): only a new
        shape is new."""
        r = read(text)
        key = (r.shape, r.values)
        known, prev, step = key in self.seen, self.last.get(r.shape), self.steps.get(r.shape)
        self.seen.add(key)
        self.last[r.shape] = r.values
        if prev is None:
            return None
        if known or not values_count:
            return "same"
        new_step = tuple(round(a - b, 9) for a, b in zip(r.values, prev, strict=True))
        self.steps[r.shape] = new_step
        changed = [i for i, d in enumerate(new_step) if d != 0]
        if any(i in r.measures or step is None or step[i] != new_step[i] for i in changed):
            return None
        return "counter"
