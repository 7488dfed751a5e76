"""The rules the answer policy consults, in order. Each hook returns a decision or None.

A rule is an object with any of these hooks (`Rule` has them all as no-ops):

  on_turn(facts, turn)            -> Note | None      before a turn's model call
  on_reply(facts, reply)          -> Resample | None  before a reply's cells run
  on_cell(facts, cell)            -> str | None       a note appended to a cell's result
  on_answer(facts, answer, asked) -> Refuse | None    before an answer is accepted

`facts` (rlm.agent.policy.decisions.Facts) is the run so far; `asked` the session's user
prompts. Rules hold no state of their own: what must be given once per run is in
`facts.refused`, which the policy fills from the decisions it returns.
"""

from __future__ import annotations

from collections.abc import Sequence

from rlm.agent import repair
from rlm.agent.codeparse import code_tool_calls
from rlm.agent.context_files import file_names, question_example
from rlm.agent.nudge import (
    NUDGE_EMPTY,
    NUDGE_ERROR_TEXT,
    NUDGE_LOOK,
    NUDGE_NOT_FOUND,
    NUDGE_UNGROUNDED,
    WHY,
    choose_nudge,
    error_text,
    last_turn_note,
    non_answer_refusal,
    ungrounded_refusal,
)
from rlm.agent.policy.conditions import dropped, how_to_use, used
from rlm.agent.policy.decisions import Answer, Cell, Facts, Note, Refuse, Reply, Resample
from rlm.agent.policy.labels import row_label
from rlm.agent.policy.operations import missing as missing_operations
from rlm.agent.policy.operations import note as operation_note
from rlm.agent.policy.partial import partial_note
from rlm.agent.policy.precedence import precedence_note
from rlm.session.branch import custom_entries, user_questions
from rlm.session.entries import Entry

# a fenced-code reply whose first cell is the failing cell again is not run: it is sampled
# again (up to RESAMPLES times, at RESAMPLE_TEMPERATURE) from a context that leaves the
# failed cell out (rlm.agent.policy.retry), and itself kept out of the context
RESAMPLES = 2
RESAMPLE_TEMPERATURE = 1.0
REPEATED = ("\n[You sent exactly the same code as your previous cell and it failed again. "
            "Change the code: check the names, columns and types involved with a small cell "
            "first.]")
RAN_AGAIN = ("\n[This cell is the same as one you already ran, and {what}: nothing new. "
             "If that output answers the question, reply with FINAL(answer); if it does not, "
             "write a different cell that prints what is missing.]")


def ran_again(what: str) -> str:
    """The note on a repeated cell that brought nothing new, saying how it repeated (its
    output may have changed in a counter: "its output is the same" would be false)."""
    return RAN_AGAIN.format(what=what.removeprefix("the same cell "))


class Rule:
    """A rule with no opinion on anything; subclasses override the hooks they need."""

    def on_turn(self, facts: Facts, turn: int) -> Note | None:
        return None

    def on_reply(self, facts: Facts, reply: Reply) -> Resample | None:
        return None

    def on_cell(self, facts: Facts, cell: Cell) -> str | None:
        return None

    def on_answer(self, facts: Facts, answer: Answer, asked: list[str],
                  branch: Sequence[Entry]) -> Refuse | None:
        return None


class LastTurn(Rule):
    """Before the last turn a limit allows, a fenced-code model that ran cells is told to
    answer from what its cells printed (rlm.agent.nudge.last_turn_note)."""

    def on_turn(self, facts: Facts, turn: int) -> Note | None:
        note = last_turn_note(turn, facts.max_turns, native_tools=facts.native_tools,
                              cells_run=facts.cells)
        if note is None:
            return None
        return Note(note, f"last turn ({turn} of {facts.max_turns}): asked the model to "
                          "answer from what its cells showed")


class RepeatedCell(Rule):
    """A fenced-code reply whose first cell is the cell that just failed, or a cell that
    already succeeded twice in this run and whose newest run brought nothing new, unchanged,
    is sampled again; a repeat that runs anyway gets a note saying how it repeated. A cell
    whose output changed when it ran again (rlm.agent.policy.novelty: not only a counter)
    is polling, not a loop: it runs, without a note. A first repeat of a
    successful cell runs: after a refusal the local model re-runs its cell to see the
    output again, then answers from it (the e2e region test: resampling that repeat made
    it answer a bare total instead of the region). A small model that sees its own cell
    repeated in the context repeats it more (the task suite's 1.5B model sent one failing
    groupby four times in a row; `rlm run`'s own example got one cell sixteen times), so
    the resample of a failing cell is drawn without it in the context (`leave_out`)."""

    def on_reply(self, facts: Facts, reply: Reply) -> Resample | None:
        if facts.native_tools or reply.tool_calls or facts.resamples >= RESAMPLES:
            return None
        calls = code_tool_calls(reply.content)
        code = str(calls[0].arguments.get("code", "")).strip() if calls else ""
        failed = facts.last_failed_code
        if code and failed is not None and code == failed.strip():
            return Resample("the reply's first cell repeats the cell that just failed",
                            RESAMPLE_TEMPERATURE, leave_out=code)
        if code and facts.succeeded.get(code, 0) >= 2 and code in facts.stale:
            return Resample("the reply's first cell repeats a cell that already ran twice in "
                            "this run and brought nothing new", RESAMPLE_TEMPERATURE)
        return None

    def on_cell(self, facts: Facts, cell: Cell) -> str | None:
        if cell.failed_again:
            return REPEATED  # small models at temperature 0 can loop on one failing cell
        return ran_again(cell.repeat) if cell.runs_before and cell.repeat else None


class NoCodeNudge(Rule):
    """A fenced-code model answering without code right after a failed or silent cell,
    or before any cell of this run (rlm.agent.nudge.choose_nudge); not after a silent cell
    when a file the question names was written (`_wrote_asked`)."""

    def on_answer(self, facts: Facts, answer: Answer, asked: list[str],
                  branch: Sequence[Entry]) -> Refuse | None:
        if not answer.without_code:
            return None
        nudge = choose_nudge(branch, native_tools=facts.native_tools, nudges=facts.nudges,
                             has_data=facts.has_data, final=answer.source != "reply",
                             cells_run=facts.cells, refused=facts.refused)
        if nudge is None or nudge == NUDGE_EMPTY and _wrote_asked(facts, asked):
            return None
        # the search its input's description showed, as a cell to send: told only to look,
        # the 1.5B model typed the log into a literal, then answered an invented badge
        # the cell the host showed before the first turn (a table of records, lines
        # counted) is this question's example; else the input's search example
        example = (facts.first_cell or question_example(branch)) if nudge == NUDGE_LOOK \
            else None
        text = nudge + (f"\nFor this question:\n```python\n{example}\n```" if example else "")
        return Refuse(text, f"the model answered without code {WHY[nudge]}; asked it to use a "
                            "cell first", key=nudge, counts_as_nudge=True)


def _wrote_asked(facts: Facts, asked: list[str]) -> bool:
    """Whether a cell of the session wrote a file the question (or the goal) names: a cell
    that writes the file asked for prints nothing, and the file is its output, which a
    goal's judge shows and checks (DeclaredFile without one). Told "your last cell printed
    nothing", the 1.5B model ran the cell that wrote a right salaries.md again, and again,
    until the run stopped stuck (the long-run suite's staff)."""
    return any(facts.wrote(f) for f in file_names("\n".join(asked)))


class ErrorText(Rule):
    """An answer that is the text of an error, once per run, for every model."""

    def on_answer(self, facts: Facts, answer: Answer, asked: list[str],
                  branch: Sequence[Entry]) -> Refuse | None:
        what = error_text(answer.text)
        if what is None or NUDGE_ERROR_TEXT in facts.refused:
            return None
        return Refuse(NUDGE_ERROR_TEXT.format(what=what[:80]),
                      f"the model answered with an error message ({what[:80]}); asked it to fix "
                      "its code instead", key=NUDGE_ERROR_TEXT)


class NotFound(Rule):
    """A fenced-code model's text answer saying the data holds nothing, once per run while a
    turn is left (rlm.agent.nudge.non_answer_refusal)."""

    def on_answer(self, facts: Facts, answer: Answer, asked: list[str],
                  branch: Sequence[Entry]) -> Refuse | None:
        if answer.source not in ("text", "reply"):
            return None
        nudge = non_answer_refusal(answer.text, native_tools=facts.native_tools, turn=facts.turn,
                                   limit=facts.max_turns, refused=facts.refused,
                                   cells_run=facts.cells)
        return None if nudge is None else Refuse(
            nudge, "the model answered that nothing was found; asked it to look at the data",
            key=NUDGE_NOT_FOUND)


class UnknownTool(Rule):
    """A reply whose only tool calls name tools that do not exist (`bash`, `shell`,
    `execute`): without this it would end the run as an empty answer the model never
    learns about. Every time (the turn limit bounds it): the model is told the one tool
    there is and how to run a shell command from it."""

    def on_answer(self, facts: Facts, answer: Answer, asked: list[str],
                  branch: Sequence[Entry]) -> Refuse | None:
        if answer.source != "reply" or not answer.unknown_tools:
            return None
        names = ", ".join(repr(n[:40]) for n in dict.fromkeys(answer.unknown_tools))
        return Refuse(unknown_tool_note(names),
                      f"the model called a tool that does not exist ({names}); told it to use "
                      "the python tool", key=f"unknown_tool:{names}")


def unknown_tool_note(names: str) -> str:
    return (f"[There is no tool named {names}: nothing ran. The only tool is `python`, which "
            "runs a cell in the Python kernel. For a shell command use `!command` in a cell "
            "(or subprocess.run). Call python with your code now.]")


class Ungrounded(Rule):
    """A fenced-code model's text answer stating figures or names no output of this run
    shows, once per run while a turn is left (rlm.agent.nudge.ungrounded_refusal). Words
    of any prompt of the session are the question's."""

    def on_answer(self, facts: Facts, answer: Answer, asked: list[str],
                  branch: Sequence[Entry]) -> Refuse | None:
        if answer.source not in ("text", "reply"):
            return None
        nudge = ungrounded_refusal(answer.text, facts.outputs, native_tools=facts.native_tools,
                                   turn=facts.turn, limit=facts.max_turns,
                                   refused=facts.refused, prompt="\n".join(asked),
                                   cells_run=facts.cells)
        return None if nudge is None else Refuse(
            nudge, "the model answered with something no output of this run shows; asked it "
                   "to compute it first", key=NUDGE_UNGROUNDED)


DROPPED = ("Not accepted yet: the question states {terms}, but none of the cells you ran uses "
           "{them}, so your answer leaves out {that} condition{s}.{how} Write a cell that "
           "applies every condition of the question and prints the result; answer with "
           "FINAL(answer) from that output.")


class DroppedCondition(Rule):
    """A fenced-code model's answer when a condition the question states (a value the
    input description lists, a number that tells rows apart: rlm.agent.policy.conditions)
    is spelled by no successful cell of this run: refused once per run while a turn is
    left, naming the conditions and the rows they mean. Small models drop a filter ("Africa
    in 2007" summed over every year); the answer is then shown by an output and verified,
    and wrong. After the refusal, a reply whose first cell still spells none of them is
    sampled again (up to RESAMPLES times, then it runs): the 1.5B model re-ran its cell
    unchanged and gave the same answer, or sent it again without its first line (the
    everyday suite's gap-brazil-rise: `[1] - [0]` for "from 1952 to 2007"). The
    refusal's key carries the conditions (`facts.refused` is the rules' only memory)."""

    def on_answer(self, facts: Facts, answer: Answer, asked: list[str],
                  branch: Sequence[Entry]) -> Refuse | None:
        if (facts.native_tools or _dropped_terms(facts) is not None or not facts.shown
                or (facts.max_turns is not None and facts.turn >= facts.max_turns)):
            return None
        missing, inputs = dropped_in_run(branch, facts.computed)
        if not missing:
            return None
        terms = ", ".join(repr(t) for t in missing)
        return Refuse(DROPPED.format(**dropped_words(missing, inputs)),
                      f"the answer's cells never used {terms}, which the question states; "
                      "asked the model to apply every condition",
                      key=DROPPED_KEY + "\x1f".join(missing))

    def on_reply(self, facts: Facts, reply: Reply) -> Resample | None:
        terms = _dropped_terms(facts)
        if not terms or facts.native_tools or reply.tool_calls or facts.resamples >= RESAMPLES:
            return None
        calls = code_tool_calls(reply.content)
        code = str(calls[0].arguments.get("code", "")).strip() if calls else ""
        if code and not any(used(t, [code]) for t in terms):
            return Resample("the reply's cell leaves out the conditions the answer was "
                            "refused for", RESAMPLE_TEMPERATURE)
        return None


DROPPED_KEY = "dropped condition:"


def question_of(branch: Sequence[Entry], also: str = "") -> str:
    """The words a run's conditions come from: the last prompt the user wrote (a
    continuation's words are the host's: a goal judge's message, a heartbeat), and `also`
    (a goal's objective)."""
    asked = user_questions(branch)
    return "\n".join(t for t in (asked[-1] if asked else "", also) if t)


def dropped_in_run(branch: Sequence[Entry], codes: Sequence[str],
                   also: str = "") -> tuple[list[str], list[str]]:
    """(the conditions the run's question states that no code of `codes` spells, at most
    four; the input descriptions they were found by)."""
    question = question_of(branch, also)
    if not question:
        return [], []
    inputs = [str(e.content or "") for e in custom_entries(branch, "context_vars")]
    return dropped(question, inputs, codes)[:4], inputs


def dropped_words(missing: list[str], inputs: list[str]) -> dict[str, str]:
    """The fields of DROPPED (and the goal judge's message) for `missing`."""
    many = len(missing) > 1
    hows = [h for t in missing if (h := how_to_use(t, inputs))]
    return {"terms": ", ".join(repr(t) for t in missing), "them": "them" if many else "it",
            "that": "those" if many else "that", "s": "s" if many else "",
            "how": (" The rows it means: " + "; ".join(hows) + ".") if hows else ""}


def _dropped_terms(facts: Facts) -> list[str] | None:
    """The conditions the dropped-condition refusal named (None: not given in this run)."""
    for key in facts.refused:
        if key.startswith(DROPPED_KEY):
            return key.removeprefix(DROPPED_KEY).split("\x1f")
    return None


class QuestionOperation(Rule):
    """A fenced-code model's answer when the question names an aggregate (a mean, median,
    standard deviation, sum, or a count of distinct things: rlm.agent.policy.operations)
    that no successful cell of this run computes: refused once per run while a turn is
    left, naming the operation in the question's word and how to compute it. The 1.5B
    model counted gapminder's rows for "how many countries" (360 for 30) and took
    `value_counts().idxmin()` for "the lowest average life expectancy"; the answer is
    shown by an output and verified, and wrong. Only on a session's first question: a
    follow-up ("multiply it by the mean bonus you found") may use an aggregate an earlier
    run computed, whose cells this run does not see."""

    def on_answer(self, facts: Facts, answer: Answer, asked: list[str],
                  branch: Sequence[Entry]) -> Refuse | None:
        if (facts.native_tools or not facts.shown
                or any(k.startswith(OPERATION_KEY) for k in facts.refused)
                or (facts.max_turns is not None and facts.turn >= facts.max_turns)):
            return None
        asks = user_questions(branch)
        if len(asks) != 1:
            return None  # a follow-up: "the mean bonus you found" was computed by a run before
        inputs = [str(e.content or "") for e in custom_entries(branch, "context_vars")]
        ops = missing_operations(asks[0], inputs, facts.computed)
        if not ops:
            return None
        kinds = ", ".join(op.kind for op in ops[:2])
        return Refuse(operation_note(ops),
                      f"the question asks for {kinds}, which none of the answer's cells "
                      "computes; asked the model to compute it", key=OPERATION_KEY + kinds)


OPERATION_KEY = "question operation:"


class PartialResult(Rule):
    """A successful cell whose output shows its result only in part (pandas' `...` rows)
    or shows none (`nan`, no rows): a note says so, every time (rlm.agent.policy.partial).
    A repeated cell already has its note (RepeatedCell)."""

    def on_cell(self, facts: Facts, cell: Cell) -> str | None:
        if not cell.ok or (cell.runs_before and cell.repeat):
            return None
        return partial_note(cell.output)


class MaskPrecedence(Rule):
    """A cell that compares around a bare `&`/`|` (`df.a == 'x' & df.b > 0`), failed or
    not: a note with the grouping Python gave it (rlm.agent.policy.precedence). A repeated
    cell already has its note (RepeatedCell)."""

    def on_cell(self, facts: Facts, cell: Cell) -> str | None:
        if cell.failed_again or (cell.runs_before and cell.repeat):
            return None
        return precedence_note(cell.code)


SHRUNK = ("Not accepted yet: {names} {holds} only part of {its} rows ({counts}): a cell read "
          "the file again in part. Read it in full (or use the table you were given), "
          "compute the answer over all rows, print it, then answer with FINAL(answer).")
SHRUNK_KEY = "shrunk input"


class ShrunkInput(Rule):
    """An answer while an input table holds only part of its rows because a cell read its
    file again in part (`airports = pd.read_csv('airports.csv', nrows=10)`; facts.shrunk,
    kept by rlm.agent.cells): refused once per run while a turn is left. The 1.5B model
    answered "the highest airport" from ten rows, and it was marked verified."""

    def on_answer(self, facts: Facts, answer: Answer, asked: list[str],
                  branch: Sequence[Entry]) -> Refuse | None:
        if not facts.shrunk or SHRUNK_KEY in facts.refused or (
                facts.max_turns is not None and facts.turn >= facts.max_turns):
            return None
        names = ", ".join(f"`{n}`" for n in facts.shrunk)
        many = len(facts.shrunk) > 1
        counts = "; ".join(f"{now:,} of {was:,}" for now, was in facts.shrunk.values())
        return Refuse(SHRUNK.format(names=names, holds="hold" if many else "holds",
                                    its="their" if many else "its", counts=counts),
                      f"the answer rests on {names}, read again in part; asked the model to "
                      "read it in full", key=SHRUNK_KEY)


class RowLabel(Rule):
    """A successful cell whose printed result is a row's label or position
    (`df['temp_min'].idxmin()` -> 706; per group, `t.groupby(k)['v'].idxmax()` on a table
    whose labels are row numbers), not a value of the row: a note says what it is and how
    to read that row (rlm.agent.policy.labels), with the cell recast to print the row
    when that ran on a fork (a group's note only then: the data decides). A repeated cell
    already has its note."""

    def on_cell(self, facts: Facts, cell: Cell) -> str | None:
        if not cell.ok or (cell.runs_before and cell.repeat):
            return None
        hit = row_label(cell.code, cell.output, facts.codes[:-1], cell.wrote)
        if hit is None:
            return None
        note, recasts, needs_data = hit
        found = facts.offer(recasts)
        if found is None and needs_data:
            return None  # a group's labels: row numbers only where the trial showed it
        return note + (repair.note(found) if found is not None else "")
