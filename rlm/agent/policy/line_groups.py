"""The lines of a text that hold one value, counted per the word at another position: a
log's ERROR lines per service (issue 60).

"app.log is a server log. Count the ERROR lines per service ..., then write errors.txt
with one line per service like 'billing: 42'": the input description lists the words that
take few values by their position in each line (kernel_ext.line_fields: `split()[1]`:
'[INFO]', '[ERROR]', ...; `split()[2]`: 'upload:', 'billing:', ...). The 1.5B default
model counted every `word:` of the text (timestamps' pieces among them) in every long-run
pass, then wrote the ERROR lines themselves.

`program(task, descriptions)`: a task that counts ("count", "how many", "number of") per
something ("per", "each", "by") and names a value of one position (ERROR for '[ERROR]')
of a text whose description lists exactly one other position: the lines holding the value
counted per that other position's word, most first, shown with what they print; offered
before the first turn once it ran on a fork (rule `LineGroups`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from rlm.agent.policy.conditions import _DECOR, _EXAMPLE
from rlm.agent.policy.decisions import Facts, Note
from rlm.agent.policy.records import text_names
from rlm.agent.policy.rules import Rule
from rlm.agent.rewrites import Rewrite

_POSITION = re.compile(r"^  split\(\)\[(\d+)\] \(line word\): \d+ values: (.*)$", re.M)
_VALUE = re.compile(r"'((?:[^'\\\n]|\\.){1,40})'")
_COUNTS = re.compile(r"\b(?:count|counts|how many|number of|tally)\b", re.I)
_PER = re.compile(r"\b(?:per|each|by|for every)\b", re.I)
NOTE = ("[In {text}, the lines holding {value!r} at word {at} counted per the word at "
        "position {by} (split on spaces), most first; this cell ran on a copy of your "
        "variables. Send it as your first cell, then answer from what it prints:\n```python\n"
        "{code}\n```]")


@dataclass(frozen=True)
class LineCount:
    text: str
    at: int  # the position of the value
    value: str  # as the line writes it ('[ERROR]')
    by: int  # the position counted per

    @property
    def code(self) -> str:
        need = max(self.at, self.by) + 1
        return (f"from collections import Counter\n\n"
                f"words = [line.split() for line in {self.text}.splitlines()]\n"
                f"counts = Counter(w[{self.by}].strip({_DECOR!r}) for w in words\n"
                f"                 if len(w) >= {need} and w[{self.at}] == {self.value!r})\n"
                f"for name, n in counts.most_common():\n"
                f"    print(f'{{name}}: {{n}}')")


def program(task: str, descriptions: Iterable[str]) -> LineCount | None:
    """The count per line word `task` asks of a text input, or None."""
    if not _COUNTS.search(task) or not _PER.search(task):
        return None
    found = []
    for d in descriptions:
        texts = text_names(d)
        positions = [(int(m.group(1)), [v.group(1) for v in _VALUE.finditer(m.group(2))])
                     for m in _POSITION.finditer(d)]
        if len(texts) != 1 or len(positions) != 2:
            continue
        low = _EXAMPLE.sub(" ", task).lower()  # 'billing: 42' is the format's example
        for (at, values), (by, _) in (positions, positions[::-1]):
            named = [v for v in values if (w := v.strip(_DECOR).lower())
                     and re.search(rf"(?<!\w){re.escape(w)}(?!\w)", low)]
            if len(named) == 1:
                found.append(LineCount(texts[0], at, named[0], by))
    return found[0] if len(found) == 1 else None


class LineGroups(Rule):
    """A text's lines of one value counted per another position's word: the cell, shown
    before the model's first turn once it ran on a fork (module docstring)."""

    def on_turn(self, facts: Facts, turn: int) -> Note | None:
        if facts.native_tools or turn != 1 or facts.cells or not facts.prompt:
            return None
        found = program(facts.prompt, facts.described())
        if found is None or facts.offer([Rewrite(found.code, "line counts")]) is None:
            return None
        facts.first_cell = found.code
        return Note(NOTE.format(text=found.text, value=found.value, at=found.at, by=found.by,
                                code=found.code),
                    f"{found.text}: lines counted per a word, on a fork")
