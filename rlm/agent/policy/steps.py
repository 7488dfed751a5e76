"""A task given in steps, done one step a cell (issue 60).

The long-run suite's tasks say what to do in order ("First compute ... Then, for each
origin airport, find ... Finally write ..."; "Join them, compute ..., and write ..."), and
the 1.5B default model wrote all of it in one cell: one mistake anywhere (an `idxmin`
read as a month, a column the merge dropped) failed the whole cell, and the fixes the host
offers mend one line of a cell it cannot see working. Asked one step at a time (`rlm run`
then `rlm resume` per step, by hand), its first step was right in two tasks of three
where the whole cell was right in none.

`steps_of(task)` reads the steps from the task's words: its sentences (and numbered items,
`1) ...`), each cut where a new instruction starts (`, then ...`, `, find ...`, `, and
write ...`, ` and write ...`), an instruction being a clause that begins with a verb that
asks for work on data (VERBS) or follows "then". Clauses before it in its sentence ("for
each item, sort ...") stay with it; a sentence that asks for nothing ("sales.csv holds
orders.", "A student passes when ...") is context, not a step; a step that only writes a
file is joined to the step before it (`_with_writes`: alone, it was not done). Fewer than
two steps: no plan (a question is one step; so is "compute X and write X.csv").

Rule `Steps` (fenced-code models, which write one cell a turn; a model with native tools
plans its own calls): before the first turn, the plan and "start with step 1"; after each
successful cell that printed something, the next step, its words as the task gave them
(for a step that writes a file, how that kind of file is written); an answer while a step
is left, refused once, naming the steps left. The step the run is at is read from the
run's facts, not kept (`left`): a step that writes files is done when a cell of the
session wrote them (the last step's files written: every step), the others one for each
successful cell that printed something new from the data (`done`: a cell that only
looked at the data counts, one that printed an earlier result again does not); a question
asked last is done by the answer. A step of the shape "the X with the highest Y in each Z" is shown with the
program that computes it from the input, once, after it ran on a fork
(rlm.agent.policy.per_group: the 1.5B model grouped by one of the two columns).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rlm.agent.context_files import file_names
from rlm.agent.policy.decisions import Answer, Cell, Facts, Note, Refuse
from rlm.agent.policy.per_group import program
from rlm.agent.policy.rules import Rule
from rlm.agent.rewrites import Rewrite
from rlm.session.entries import Entry

# verbs that ask for work on data, as an instruction begins (imperative, lowercase or not)
VERBS = frozenset("""
add aggregate average build calculate check clean combine compare compute convert count
create deduplicate determine drop estimate export extract fill filter find flag get group
identify join keep list load make match measure merge normalise normalize parse pick pivot
plot print rank read remove report save select show sort split store sum summarise
summarize take tally write
""".split())
# the verbs whose clause is its own step even after a bare " and ": a file written
WRITE_VERBS = frozenset({"write", "save", "export", "store"})
SEQUENCE = re.compile(r"^(?:first(?:ly)?|second(?:ly)?|third(?:ly)?|next|then|finally|lastly|"
                      r"after that|afterwards|and then)\b[,:]?\s*", re.I)
_NUMBERED = re.compile(r"(?:^|\s)\(?\d{1,2}[.)]\s+(?=[A-Za-z])")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'])")
MAX_STEPS = 8
MAX_STEP_CHARS = 300

PLAN = ("[This task has {n} steps. Do them in order, one step per cell, and print each "
        "step's result before the next:\n{steps}\nStart with step 1.]")
NEXT = "\n[Next, step {k} of {n}: {step}. Write a new cell for it{how}.]"
# a step shown with the program that does it (`_program`)
PROGRAM = "\n[Next, step {k} of {n}: {step}."
OFFER = (" Send this cell for it first; it ran on a copy of your variables ({what}):\n"
         "```python\n{code}\n```{then}]")
THEN_WRITE = "\nThen write {f} from the rows it prints ({how}), and print {f}."
# after a cell that printed no new result from the data (`done`): the step is not done
STILL = ("\n[That output holds no result from the data the earlier outputs did not show, so "
         "step {k} of {n} is still to do: {step}. Write a new cell for it{how}.]")
ASK = ("\n[Next, step {k} of {n}: {step} Answer it with FINAL(answer) when the outputs "
       "show it; if they do not, write a cell that prints what is missing.]")
# how a file of each kind is written, for a step that writes one: the 1.5B model, told
# "Next, step 3 of 3: Write one line per origin airport to report.md", printed the rows
# it had again, four times, and answered without the file
WRITE_HOW = {".csv": "the table's `.to_csv({f!r}, index=False)`",
             ".json": "`json.dump` of a dict into `open({f!r}, 'w')`"}
WRITE_TEXT = ("`with open({f!r}, 'w') as f:` and a loop over the rows your steps computed, "
              "`f.write(line + '\\n')` for each")
LEFT = ("Not finished yet: the task's step{s} {which} {are} left: {steps}. Do step {k} with "
        "a cell and print its result; answer with FINAL(answer) when every step is done.")
LEFT_KEY = "steps left"


def steps_of(task: str) -> list[str]:
    """The instructions of `task`, in order ([] when it gives fewer than two)."""
    steps: list[str] = []
    for sentence in _sentences(task):
        if sentence.rstrip().endswith("?"):  # a question asked after the steps: the last
            steps.append(_tidy(sentence))
            continue
        prefix = ""
        for clause, after_then in _clauses(sentence):
            text = SEQUENCE.sub("", clause.strip(" ,;:")).strip(" ,;:")
            if not text:
                continue
            if after_then and not _verb_first(text) and steps:
                text = f"{steps[-1].split(' ', 1)[0].lower()} {text}"  # ", then the product"
            if after_then or _verb_first(text):
                steps.append(_tidy(f"{prefix}, {text}" if prefix else text))
                prefix = ""
            else:
                prefix = f"{prefix}, {text}" if prefix else text
    steps = _with_writes([s for s in steps if s])[:MAX_STEPS]
    return steps if len(steps) >= 2 else []


def _with_writes(steps: list[str]) -> list[str]:
    """A step that only writes a file joined to the step before it ("find the worst
    month, then write ... to report.md"): the 1.5B model, given the write as a step of its
    own, printed the rows it had again or sent a cell holding only the step's words as a
    comment, twice of two; in one cell with what it computes (as it writes a whole task)
    it writes it."""
    out: list[str] = []
    for step in steps:
        first = step.split(" ", 1)[0].lower()
        if out and first in WRITE_VERBS and not out[-1].endswith("?"):
            out[-1] = f"{out[-1]}, then {step[:1].lower()}{step[1:]}"
        else:
            out.append(step)
    return out


def _sentences(task: str) -> list[str]:
    out = []
    for sentence in _SENTENCE_END.split(" ".join(task.split())):
        out += [p for p in _NUMBERED.split(sentence) if p.strip()]
    return out


def _clauses(sentence: str) -> list[tuple[str, bool]]:
    """The sentence cut where an instruction starts, outside brackets and quotes: each
    clause, and whether "then" came before it."""
    cuts: list[tuple[int, int, bool]] = []  # (cut from, clause from, after "then")
    depth, quote = 0, ""
    for i, ch in enumerate(sentence):
        if quote:
            quote = "" if ch == quote else quote
            continue
        if ch in "'\"" and (i == 0 or not sentence[i - 1].isalnum()):
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        elif depth == 0 and ch in ",;":
            rest = sentence[i + 1:]
            m = re.match(r"\s*(and then|then|and)?\s*", rest)
            assert m is not None
            word = rest[m.end():].split(" ", 1)[0].lower().strip(",")
            then = (m.group(1) or "").endswith("then")
            if then or word in VERBS:
                cuts.append((i, i + 1 + m.end(), then))
        elif depth == 0 and sentence.startswith(" and ", i):
            word = sentence[i + 5:].split(" ", 1)[0].lower()
            then = word == "then"
            if then or word in WRITE_VERBS:
                cuts.append((i, i + 5 + (5 if then else 0), then))
    out, start, then = [], 0, False
    for cut, nxt, after in cuts:
        out.append((sentence[start:cut], then))
        start, then = nxt, after
    out.append((sentence[start:], then))
    return out


def _verb_first(text: str) -> bool:
    return text.split(" ", 1)[0].lower().strip(",:") in VERBS


def _tidy(step: str) -> str:
    step = step.strip().rstrip(".;,")
    step = step[:1].upper() + step[1:]
    return step if len(step) <= MAX_STEP_CHARS else step[:MAX_STEP_CHARS - 3] + "..."


def done(facts: Facts) -> int:
    """How many steps the run has done: its successful cells that printed a new result
    from the data (`new_results`)."""
    return sum(new_results(facts))


def new_results(facts: Facts) -> list[bool]:
    """For each successful cell of the run, whether it printed a new result from the data:
    output that no earlier output of the run held whole (whitespace aside, on word
    bounds), by a cell that read the task's data. A step's result is new (rows picked from
    a table printed before are new as a whole); a cell that prints a step's result again,
    or a sentence the model wrote itself, does not do the next step (in the long-run survey
    task the 1.5B model printed `region` again after step 1's counts, was told step 3 and
    never found the product)."""
    seen: list[str] = []
    out: list[bool] = []
    for shown in facts.shown:
        text = " ".join(shown.text.split())
        out.append(bool(shown.depends and text and not any(_holds(t, text) for t in seen)))
        seen.append(text)
    return out


def _holds(text: str, part: str) -> bool:
    at = text.find(part)
    while at >= 0:
        end = at + len(part)
        if (at == 0 or not text[at - 1].isalnum()) and \
                (end == len(text) or not text[end].isalnum()):
            return True
        at = text.find(part, at + 1)
    return False


def written_by(step: str) -> list[str]:
    """The files a step asks to write ("..., then write errors.txt with ..."): the file
    names after its first write verb; [] for a step that writes none."""
    words = step.split(" ")
    at = next((i for i, w in enumerate(words) if w.lower().strip(",") in WRITE_VERBS), None)
    return [] if at is None else file_names(" ".join(words[at:]))


def left(facts: Facts) -> list[int]:
    """The steps not done yet, in order: a step that writes files until a cell of the
    session wrote them all; the others in order, one for each successful cell that printed
    something new from the data (`done`). The files a last step
    writes, written, are every step done: the steps were for them (one cell may do all)."""
    if (last := written_by(facts.steps[-1])) and all(facts.wrote(f) for f in last):
        return []
    k, out = done(facts), []
    for i, step in enumerate(facts.steps):
        if files := written_by(step):
            if not all(facts.wrote(f) for f in files):
                out.append(i)
        elif k:
            k -= 1
        else:
            out.append(i)
    return out


def unanswered(facts: Facts) -> list[int]:
    """The steps an answer now would leave undone: those `left`, but a question asked
    last, which the answer does."""
    last = len(facts.steps) - 1
    return [i for i in left(facts) if not (i == last and facts.steps[i].endswith("?"))]


def _how(step: str) -> str:
    """For a step that writes files: how the first is written, then read back."""
    files = written_by(step)
    return f" ({_write_how(files[0])}), then print {files[0]}" if files else ""


def _write_how(f: str) -> str:
    """How a file of `f`'s kind is written."""
    return WRITE_HOW.get(f[f.rfind("."):], WRITE_TEXT).format(f=f)


def _program(facts: Facts, k: int) -> str:
    """For step `k` (0-based) of the shape "the X with the highest Y in each Z": the program
    that computes it from the input (rlm.agent.policy.per_group), to send first, then how
    the step's file is written from what it prints; offered once and only when it ran on a
    fork; "" otherwise. (After the note "write a new cell ... a loop over the rows your
    steps computed", the 1.5B model wrote every month's row and left the program below it
    unread: the program comes first, the writing after it.)"""
    key = f"per group: step {k}"
    if key in facts.noted or (found := program(facts.steps[k], facts.described())) is None:
        return ""
    facts.noted.add(key)
    if facts.offer([Rewrite(found.code, found.what)]) is None:
        return ""
    files = written_by(facts.steps[k])
    then = THEN_WRITE.format(f=files[0], how=_write_how(files[0])) if files else ""
    return OFFER.format(k=k + 1, what=found.what, code=found.code, then=then)


class Steps(Rule):
    """A task in steps, one step a cell (module docstring)."""

    def on_turn(self, facts: Facts, turn: int) -> Note | None:
        if facts.native_tools or not facts.steps or turn != 1 or facts.cells:
            return None
        listed = "\n".join(f"{i}. {s}" for i, s in enumerate(facts.steps, 1))
        first = _program(facts, 0)
        plan = PLAN.format(n=len(facts.steps), steps=listed)
        return Note(plan[:-1] + first if first else plan,
                    f"the task has {len(facts.steps)} steps: asked for one a cell")

    def on_cell(self, facts: Facts, cell: Cell) -> str | None:
        if facts.native_tools or not facts.steps or not cell.ok or not cell.output.strip() \
                or (cell.runs_before and cell.repeat) or not (todo := left(facts)):
            return None
        step = facts.steps[todo[0]]
        if step.endswith("?"):  # a question asked last: answered from the outputs
            return ASK.format(k=todo[0] + 1, n=len(facts.steps), step=step)
        fresh = new_results(facts)
        note = STILL if fresh and not fresh[-1] else NEXT
        if program_note := _program(facts, todo[0]):
            return PROGRAM.format(k=todo[0] + 1, n=len(facts.steps), step=step) + program_note
        return note.format(k=todo[0] + 1, n=len(facts.steps), step=step, how=_how(step))

    def on_answer(self, facts: Facts, answer: Answer, asked: list[str],
                  branch: Sequence[Entry]) -> Refuse | None:
        if facts.native_tools or not facts.steps or LEFT_KEY in facts.refused \
                or (facts.max_turns is not None and facts.turn >= facts.max_turns) \
                or not (todo := unanswered(facts)):
            return None
        n, many = len(facts.steps), len(todo) > 1
        which = (f"{todo[0] + 1} to {todo[-1] + 1}" if todo == list(range(todo[0], todo[-1] + 1))
                 else ", ".join(str(i + 1) for i in todo)) if many else str(todo[0] + 1)
        return Refuse(LEFT.format(s="s" if many else "", which=which, are="are" if many else "is",
                                  steps="; ".join(f"{i + 1}. {facts.steps[i]}" for i in todo),
                                  k=todo[0] + 1),
                      f"the model answered with {len(todo)} of the task's {n} steps left; "
                      "asked for the next", key=LEFT_KEY)
