"""The answer policy's texts and pure checks: when an answer is refused once, and why.

Small fenced-code models answer too early: in prose right after a failed or silent cell,
before any cell ran (a guess), or with the text of an error they just saw
(`FINAL(NameError: ...)`). Each of those is refused once per run with the reason
(`MAX_NUDGES` in all). The rules that use these are rlm.agent.policy.rules; whether an
accepted answer is verified is rlm.agent.policy.verify.

Native-tool models are not refused: they call the `python` tool when they mean to (a
conversational reply is a legitimate answer for them); their answers are verified by the
same rule as everyone's.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

from rlm.session.entries import Entry, MessageEntry

MAX_NUDGES = 2
NUDGE_FAILED = ("Your last cell failed. Fix it with a new ```python cell: check the names and "
                "columns that exist first (the error lists them when a name is missing).")
NUDGE_EMPTY = ("Your last cell printed nothing, so you have not seen an answer yet. Print "
               "what you found (for a search: the matching line) with a ```python cell, then "
               "answer with FINAL(answer).")
NUDGE_LOOK = ("You have not looked at the data yet. Reply with a ```python cell that reads "
              "the variables you were given (in slices, or by searching them) and prints what "
              "answers the question; answer with FINAL(answer) after you see the output.")
NUDGE_NO_CELL = ("You answered before running any code, so nothing checked the answer. Reply "
                 "with a ```python cell that computes or checks it and prints the result; "
                 "answer with FINAL(answer) after you see the output.")
NUDGE_ERROR_TEXT = ("Not accepted: your answer is the text of an error ({what}), not an answer "
                    "to the question. The error means your code was wrong, not that the "
                    "answer is the error. Fix the code with a new ```python cell and answer "
                    "from its output.")
NUDGE_UNGROUNDED = ("Not accepted yet: {why}, so nothing you ran showed it. Reply with a "
                    "```python cell that computes it from the data and prints it; answer with "
                    "FINAL(answer) after you see the output.")
NUDGE_NOT_FOUND = ("Not accepted yet: your answer says nothing was found ({what}), but the "
                   "question assumes the data holds it. A search that finds nothing usually "
                   "means the pattern or the column was wrong. Look at how the data is written "
                   "first: print a slice around a word from the question (for a text `t`: "
                   "`i = t.find('word'); print(t[max(0, i - 300):i + 300])`; for a table: "
                   "`print(df.head())`), then search again and answer from what you see.")
NUDGE_LAST_TURN = ("This is your last turn ({turn} of {limit}): reply with only FINAL(answer), "
                   "written from what your cells have printed. No more cells will run.")
WHY = {NUDGE_FAILED: "after a failed cell", NUDGE_LOOK: "before looking at its data",
       NUDGE_EMPTY: "after a cell that printed nothing", NUDGE_NO_CELL: "before running any code"}

# An error message or a traceback line, not an answer: `NameError: ...`, `Traceback (most
# recent call last)`, `Error: ...`, `... does not exist`, `... is not defined`, `No such file`.
_ERROR_TEXT = re.compile(
    r"\b[A-Z]\w*(?:Error|Exception)\b\s*[:,]|Traceback \(most recent call last\)|^\s*Traceback\b"
    r"|(?:^|\s)Error\s*:|\bdoes not exist\b|\bis not defined\b|\bNo such file or directory\b"
    r"|\bcould not be (?:run|found|loaded)\b|\bNo module named\b",
    re.M)


def error_text(answer: str) -> str | None:
    """The error-looking part of `answer` (to name it in the refusal), or None."""
    m = _ERROR_TEXT.search(answer or "")
    return m.group(0).strip() if m else None


def last_turn_note(turn: int, limit: int | None, *, native_tools: bool,
                   cells_run: int) -> str | None:
    """For fenced-code models that have run cells: before the last turn the limit allows,
    a note that it is the last one, so the run ends with an answer from what the cells
    showed instead of a cell nobody reads (small models plan more cells than they have
    turns for). None otherwise."""
    if native_tools or limit is None or limit < 2 or cells_run == 0 or turn != limit:
        return None
    return NUDGE_LAST_TURN.format(turn=turn, limit=limit)


def ungrounded_refusal(answer: str, outputs: list[str], *, native_tools: bool, turn: int,
                       limit: int | None, refused: set[str], prompt: str = "",
                       cells_run: int = 0) -> str | None:
    """For fenced-code models: refuse, once per run and only while a turn is left to fix
    it, a text answer stating figures, or naming names, that no successful output of this
    run shows: small models write a number before their cells computed it, copy one from
    the prompt's example, or print a mean and name a month no cell printed. Other words are
    not checked here ("not found" after printing None is an answer); they still decide
    `verified`. An answer when cells ran but none succeeded is refused too (a guess after
    a failing cell: `FINAL(Audio)`). None to accept."""
    if native_tools or NUDGE_UNGROUNDED in refused or (limit is not None and turn >= limit):
        return None
    if error_text(answer) or (not outputs and (cells_run == 0 or NUDGE_FAILED in refused)):
        return None  # the error-text, no-cell and failed-cell refusals cover these: one
        # refusal per mistake is enough
    if not outputs:
        why: str | None = "no cell of this run has succeeded yet"
    else:
        text = "\n".join(outputs)
        why = unseen_figures(answer, text, prompt) or unseen_names(answer, text, prompt)
    return None if why is None else NUDGE_UNGROUNDED.format(why=why)


_NAME = re.compile(r"(?<![\w.])[A-Z][a-z][\w-]+")


def unseen_names(answer: str, text: str, prompt: str) -> str | None:
    """Why `answer`'s names (capitalised words that are not in the prompt: the answer's
    own claim, "September", "Turin") are unsupported by `text` (none of them appears in
    it, case-insensitively), or None. An answer naming nothing new passes."""
    asked = prompt.lower()
    names = [n for n in dict.fromkeys(_NAME.findall(answer))
             if n.lower() not in _STOPWORDS and n.lower() not in asked]
    shown = text.lower()
    if not names or any(n.lower() in shown for n in names):
        return None
    return f"the answer names {', '.join(names[:3])}, which no output of this run shows"


# answers that say the data holds no answer: "None", "not found", "No budget information
# found", "unknown", "cannot be determined", "N/A"
_NON_ANSWER = re.compile(
    r"^\W*(?:none|null|nan|unknown|n/?a|nothing(?: found)?|not (?:be )?(?:found|available)"
    r"|no (?:\w+ ){0,4}(?:found|available|information|data|match(?:es)?)\b.*"
    r"|.*\b(?:was|were|is|are|could) not (?:be )?found\b.*"
    r"|.*\bcannot be (?:determined|found)\b.*)\W*$", re.I | re.S)


def is_non_answer(answer: str) -> bool:
    """`answer` says the data holds no answer ("None", "not found", "N/A", ...)."""
    return len(answer) <= 200 and bool(_NON_ANSWER.match(answer.strip()))


def non_answer_refusal(answer: str, *, native_tools: bool, turn: int, limit: int | None,
                       refused: set[str], cells_run: int) -> str | None:
    """For fenced-code models that ran cells: refuse, once per run while a turn is left, an
    answer saying the data holds no answer. Small models take their own failed search
    (a guessed regex) for the data's; the question was asked because the data has it."""
    if (native_tools or cells_run == 0 or NUDGE_NOT_FOUND in refused
            or (limit is not None and turn >= limit) or not is_non_answer(answer)):
        return None
    return NUDGE_NOT_FOUND.format(what=answer.strip()[:60])


def choose_nudge(branch: Sequence[Entry], *, native_tools: bool, nudges: int, has_data: bool,
                 final: bool, cells_run: int = 0, refused: set[str] | None = None) -> str | None:
    """For fenced-code models answering without code: a nudge when the last cell of this
    run failed (prose only), printed nothing (even with FINAL: nothing was seen), or when no
    cell has run in this run yet (any answer; worded for attached data when there is some).
    `refused` holds the nudges already given in this run: the no-cell one is given once."""
    if native_tools or nudges >= MAX_NUDGES:
        return None
    refused = refused or set()
    if cells_run == 0:
        nudge = NUDGE_LOOK if has_data else NUDGE_NO_CELL
        return None if (NUDGE_LOOK in refused or NUDGE_NO_CELL in refused) else nudge
    # newest first, skipping the reply just appended (islice: no copy of a long branch)
    for e in itertools.islice(reversed(branch), 1, None):
        if isinstance(e, MessageEntry) and e.role == "tool":
            status = (e.cell or {}).get("status")
            if status == "ok" and (e.cell or {}).get("shaped", "").strip() == "":
                return NUDGE_EMPTY
            return NUDGE_FAILED if status not in (None, "ok") and not final else None
        if isinstance(e, MessageEntry) and e.role == "user":
            return None
    return None


_NUMBER = re.compile(r"(?<![\w.])-?\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\w])|-?\d+(?:\.\d+)?")
_STOPWORDS = frozenset(
    "the and for are was were with that this from has have its than into over under not "
    "answer final which what there their they them then also been being more most less "
    "each only one two per out all any yes true false none null".split())


def _figures(text: str) -> list[tuple[float, int]]:
    """(value, decimals) of each number in `text`; thousands separators dropped."""
    found = []
    for m in _NUMBER.finditer(text):
        raw = m.group(0).replace(",", "")
        try:
            found.append((float(raw), len(raw.split(".")[1]) if "." in raw else 0))
        except ValueError:
            continue
    return found


def _figure_seen(value: float, decimals: int, seen: list[tuple[float, int]]) -> bool:
    """An output number equal to `value` at the answer's precision (2253.4400001 and
    2253.44 agree; 0.2312 and 23.12% do too)."""
    tol = 0.5 * 10 ** -decimals + 1e-9
    return any(abs(v - value) <= tol or abs(v * 100 - value) <= tol for v, _ in seen)


def _result_figures(answer: str, prompt: str = "") -> list[tuple[float, int]]:
    """The figures `answer` claims: small whole numbers are counts and ordinals ("the top
    3") more often than results, and a figure the prompt already holds ("in 2025") is the
    question's, not the answer's."""
    asked = _figures(prompt)
    return [(v, d) for v, d in _figures(answer)
            if (d or abs(v) >= 10) and not any(v == a for a, _ in asked)]


def unseen_figures(answer: str, text: str, prompt: str = "") -> str | None:
    """Why `answer`'s figures are unsupported by `text` (none of them appears), or None
    (one appears, or the answer states no figure)."""
    figures = _result_figures(answer, prompt)
    if not figures:
        return None
    seen = _figures(text)
    if any(_figure_seen(v, d, seen) for v, d in figures):
        return None
    claimed = {v for v, _ in figures}
    shown = ", ".join(itertools.islice((m.group(0) for m in _NUMBER.finditer(answer)
                                        if float(m.group(0).replace(",", "")) in claimed), 3))
    return f"none of the answer's figures ({shown}) appears in an output of this run"
