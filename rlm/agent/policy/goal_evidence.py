"""Goals judged by evidence: a completion claim completes a goal only when it holds up.

A *completion claim* is `goal.complete(summary)` from the kernel (every model), or, for a
fenced-code model (the small local one, which is taught `FINAL(...)` and not the goal API),
the answer a run would end with while its goal is active. It holds when, in order:

1. every file the goal names (`report.md`, `out/summary.csv`) exists, holds what the goal's
   and the question's words declare of it (its columns, a row for every value of a column
   the input lists, an order: rlm.agent.policy.file_shape, every model, every claim; the
   refusal shows the file), and the model has been shown its current content by the host
   (a claim made before that is answered with the content, so the model checks the file
   against the goal before it may complete); a bare
   `goal.complete()` (no summary) is refused first: a completion states what it claims;
2. every `--gate` passes (the autonomous policy's gates, else GoalManager's own, which
   also guard `goal.complete()` itself: rlm.longrun.gates; rerun only when something
   changed);
3. every condition the question or the goal states (a value the input lists: a level, a
   year, a log's level; rlm.agent.policy.conditions) is spelled by the code each named
   file comes from (rlm.agent.policy.written), or by some successful cell of the run,
   and every aggregate the question names (a mean, a sum, a count of distinct values:
   rlm.agent.policy.operations) is computed by that code: for a fenced-code model, asked
   at every claim (the answer rules ask once);
4. the claim passes the answer policy's "verified" rule: every figure and name it asserts
   is in an output of this run (rlm.agent.policy.verify). The message saying it does not
   quotes no claim: the words of a continuation count as the question's for that rule.

The first check that fails is what the model reads next (with, for a small model, what
"done" means and what to do when an output does not change); it is also what a stuck note
names as missing. What "done" means is worded for small models in
rlm/prompts/goal_small.md. When all hold, the host completes the goal with the claim as its reason
and the evidence (files shown, gates passed, claims and the cells that hold them).
`judge_claim` is pure over its inputs; `GoalJudge` carries the per-session record of which
file contents were shown and reads the agent's facts.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from rlm import safeio
from rlm.agent.nudge import is_non_answer
from rlm.agent.policy import (
    FINISH_CLOSE,
    FINISH_OPEN,
    AnswerPolicy,
    agreement,
    asked_prompts,
    file_shape,
)
from rlm.agent.policy.decisions import Answer
from rlm.agent.policy.file_shape import named_files
from rlm.agent.policy.operations import file_note
from rlm.agent.policy.operations import missing as missing_operations
from rlm.agent.policy.rules import dropped_in_run, dropped_words, question_of
from rlm.agent.policy.verify import ECHOED, claims
from rlm.agent.prompts import load_prompt
from rlm.agent.runstate import RunState
from rlm.llm.types import LLM
from rlm.longrun.autonomous import AutonomousPolicy, gate_message, head_tail
from rlm.longrun.goals import ClaimVerdict, GoalManager
from rlm.protocols import SessionLog
from rlm.session.branch import custom_entries, user_questions

FILE_CHARS = 3000  # the head and tail of a named file the model is shown
MAX_STATED_LINES = 8  # a file's lines in the finish suggested after an echoed one
MAX_STATED_CHARS = 240
EVIDENCE_READ_LIMIT = 64 << 20  # the most of a named file read to check it


GOAL_DROPPED = ("Not complete: the goal states {terms}, but none of the cells you ran uses "
                "{them}, so what you wrote leaves out {that} condition{s}.{how} Write a cell "
                "that applies every condition, writes the file again and prints what it "
                "wrote; then finish.")


FILE_DROPPED = ("Not complete: the goal states {terms}, but the code that wrote {file} never "
                "uses {them}, so {file} leaves out {that} condition{s}.{how} Write {file} "
                "again from a cell that applies every condition and prints what it wrote; "
                "then finish.")


def done_means(files: list[str], gates: list[str]) -> str:
    """What "done" means for a goal, in the words a small model reads."""
    parts = []
    if files:
        one = len(files) == 1
        parts.append(f"{', '.join(files)} exist{'s' if one else ''} and "
                     f"hold{'s' if one else ''} exactly what the goal asks")
    if gates:
        parts.append("the check" + ("s " if len(gates) > 1 else " ")
                     + ", ".join(f"`{g}`" for g in gates) + (" pass" if len(gates) > 1 else " passes"))
    parts.append("your answer states only what your outputs printed")
    return load_prompt("goal_small").strip().format(what="; ".join(parts))


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


@dataclass
class FileCheck:
    """A named file the model must see before completing: (missing | unseen) or None.
    `work`: the fix takes a cell (a missing file); a file shown to be checked does not."""

    path: str
    message: str
    work: bool = True


class Missing(NamedTuple):
    """What a claim lacks: what the model reads, one line for a stuck note, and whether
    the fix takes a cell (the next reply must run one: `ClaimVerdict.work`)."""

    message: str
    short: str
    work: bool = True


def check_files(files: list[str], cwd: Path, shown: dict[str, str]) -> FileCheck | None:
    """The first named file that is missing or whose current content the model has not
    been shown (recorded in `shown` as it is shown now)."""
    for name in files:
        path = cwd / name
        if not path.is_file():
            return FileCheck(name, f"The goal names {name}, which does not exist in {cwd}. "
                                   "Write it, then finish again.")
        try:  # the kernel writes here: never followed through a link (rlm.safeio)
            data = safeio.read_bytes(cwd, name, EVIDENCE_READ_LIMIT)
        except (OSError, ValueError) as e:
            return FileCheck(name, f"The goal names {name}, which cannot be read as a file of "
                                   f"{cwd} ({e.strerror if isinstance(e, OSError) else e}). "
                                   "Write it as a regular file, then finish again.")
        digest = _digest(data)
        if shown.get(name) == digest:
            continue
        shown[name] = digest
        text = head_tail(data.decode(errors="replace"), FILE_CHARS)
        return FileCheck(name, (
            f"Before the goal can be complete, check {name} against it. Its content now:\n"
            f"<file path=\"{name}\">\n{text.rstrip()}\n</file>\n"
            "If every line is right, finish again; if not, fix the code that wrote it."),
            work=False)
    return None


class JudgedHost(Protocol):
    """What judging a claim reads of the agent (rlm.agent.loop.Agent): whether its model
    calls tools, its answer policy (facts, the verified rule; told what is missing), the
    run's accepted answer and the log's prompts."""

    llm: LLM
    answers: AnswerPolicy
    state: RunState
    session: SessionLog


@dataclass
class GoalJudge:
    """The `CompletionJudge` the composition root gives a session's goals."""

    goals: GoalManager
    cwd: Path
    policy: AutonomousPolicy | None = None  # its gates, or None
    shown: dict[str, str] = field(default_factory=dict)  # named file -> digest shown
    # the newest claim that stated what the outputs show (verified, with claims), and the
    # named files' digests then; a finish that echoes the host's words after the files
    # were shown unchanged affirms it (`_affirmed`)
    stated: tuple[str, dict[str, str | None]] | None = None
    affirmed: str | None = None

    def __call__(self, agent: JudgedHost, reason: str, claim: str | None) -> ClaimVerdict | None:
        small = not agent.llm.native_tools
        if reason not in ("goal.complete", "final", "no_code"):
            return None
        if reason != "goal.complete" and not small:
            return None  # a tool-calling model completes with goal.complete(); FINAL goes on
        goal = self.goals.get()
        if goal is None:
            return None
        files = named_files(goal.objective)
        gates = list(getattr(self.policy, "gates", []) or [])
        self._remember(agent, reason, claim, files)
        self.affirmed = None
        missing = self._missing(agent, reason, claim, files)
        if missing is None:
            agent.answers.missing = None
            evidence = {"files": dict(self.shown), "gates": gates,
                        **self._claims(agent, reason, claim)}
            if self.affirmed is not None:  # the echo affirmed the claim before it
                evidence.update(affirmed=claim, verified=True, why=None)
            return ClaimVerdict(True, summary=self.affirmed or claim or "", evidence=evidence)
        message, short, work = missing
        agent.answers.missing = short
        if small:
            message = f"{message}\n{done_means(files, gates)}"
        return ClaimVerdict(False, message=message, work=work)

    def _missing(self, agent: JudgedHost, reason: str, claim: str | None,
                 files: list[str]) -> Missing | None:
        """(what the model reads, one line for a stuck note), or None: the claim holds."""
        kernel = reason == "goal.complete"
        if not kernel and claim is not None and is_non_answer(claim):
            # FINAL(None) beside a file the gates accept completed a goal (the flights run
            # of stop 45: 40,000 wrong lines in report.md); nothing found is not done. It
            # quotes the answer: what that asserts stays a claim (AnswerPolicy.dispute)
            agent.answers.dispute(c.text for c in claims(claim.strip()[:60], [])
                                  if c.kind != "word")
            return Missing(f"Your answer ({claim.strip()[:60]}) says nothing was found: that "
                           "does not complete the goal. Print what the goal needs with a cell, "
                           "then finish with one line of what your outputs show.",
                           "a finish that states what the outputs show")
        if kernel and not (claim or "").strip():
            # a bare goal.complete() would complete on the model's word alone: what it
            # claims is what the host checks (a goal was completed with its file missing)
            return Missing("goal.complete() needs a summary: call goal.complete(summary) with one "
                           "line that states what your outputs show; the host checks it against "
                           "them.", "a summary of what the outputs show")
        # its gates are GoalManager's own (rlm.longrun.gates), checked when the call goes on
        if (shape := self._shape(agent, files)) is not None:
            return shape
        found = check_files(files, self.cwd, self.shown)
        if found is not None:
            return Missing(found.message, f"{found.path} checked against the goal", found.work)
        if (odd := self._disagrees(agent, files)) is not None:
            return odd
        gate = None if kernel else self._gate(agent)
        if gate is not None:
            return gate
        if not agent.llm.native_tools and (unapplied := self._unapplied(agent)) is not None:
            return unapplied
        verdict = self._claims(agent, reason, claim)
        if verdict.get("why") == ECHOED:
            if (earlier := self._earlier(files)) is not None:
                self.affirmed = earlier
                return None
            return Missing("Your answer repeats the words you were given; it says nothing your "
                           "outputs showed." + (self._stated(files) or " Check the file against "
                           "the goal with a cell, then finish with one line of what your "
                           "outputs show."), "a finish that states what the outputs show")
        if verdict.get("verified") is False:
            # the claims are not quoted: a continuation's words count as the question's
            # what is unsupported, by name: told only "figures or names", the 1.5B model
            # finished with the same invented page again (visits: /cart beside a file that
            # held /blog)
            why = verdict.get("why") or "it states figures or names that no output of this " \
                                        "run shows"
            agent.answers.dispute(verdict.get("unverified") or ())
            return Missing(f"Your answer is not supported: {why}. Print what supports each of "
                           "them with a cell, or finish with what your outputs show.",
                           "an output that shows what the answer claims")
        return None

    def _digests(self, files: list[str]) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for name in files:
            try:
                out[name] = _digest(safeio.read_bytes(self.cwd, name, EVIDENCE_READ_LIMIT))
            except (OSError, ValueError):
                out[name] = None
        return out

    def _remember(self, agent: JudgedHost, reason: str, claim: str | None,
                  files: list[str]) -> None:
        """Keep a claim that states what the outputs show (verified, with claims), with
        the named files as they are now."""
        if not claim or reason == "goal.complete":
            return
        v = self._claims(agent, reason, claim)
        if v.get("verified") and v.get("claims") and v.get("why") != ECHOED:
            self.stated = (claim, self._digests(files))

    def _earlier(self, files: list[str]) -> str | None:
        """The stated claim a finish that echoed the host's words affirms: the long-run
        flights run of stop 71 finished "LGA: month 3, JFK: month 12, EWR: month 7" beside
        a right report.md, was shown the file to check ("if every line is right, finish
        again") and finished with the objective's words, then ran out of turns. Only when
        every named file is as it was at that claim and as the model was shown it."""
        if self.stated is None or not files:
            return None
        claim, then = self.stated
        now = self._digests(files)
        if any(now[f] is None or now[f] != then.get(f) or self.shown.get(f) != now[f]
               for f in files):
            return None
        return claim

    def _disagrees(self, agent: JudgedHost, files: list[str]) -> Missing | None:
        """The first named CSV file that gives a key another value, under the same column
        name, than a table the session computed (rlm.agent.policy.agreement: asked of a
        fork of the kernel; the tables the file was ever written from are not asked)."""
        for name in files:
            if not name.lower().endswith(".csv"):
                continue
            # the tables it was written from, now and in its earlier versions (the model's
            # own superseded attempts), are not asked
            written = agent.answers.written
            skip = written.all_writers(self.cwd / name) | (
                {w} if (w := written.writer(self.cwd / name)) else set())
            printed = agent.answers.facts.probe(
                agreement.question(str(self.cwd / name), sorted(skip)))
            if (d := agreement.read(printed)) is not None:
                return Missing(agreement.note(name, d),
                               f"{name} agreeing with `{d.table}` on {d.column!r}")
        return None

    def _stated(self, files: list[str]) -> str:
        """For a finish that repeated the words it was given: what the first named file
        holds, and a finish that states it, built from its lines ("" when it cannot be
        read). Told "finish with one line of what your outputs show" after a right
        errors.txt, the 1.5B model sent the host's own words back four times (the long-run
        logs run of stop 71); the file's lines are what its line can say."""
        for name in files[:1]:
            try:
                text = safeio.read_bytes(self.cwd, name, EVIDENCE_READ_LIMIT).decode(
                    errors="replace")
            except (OSError, ValueError):
                return ""
            lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
            if not lines:
                return ""
            example = ", ".join(lines[:MAX_STATED_LINES])
            example = example if len(example) <= MAX_STATED_CHARS else \
                example[:MAX_STATED_CHARS - 3] + "..."
            return (f" {name} now holds:\n<file path=\"{name}\">\n"
                    f"{head_tail(text, FILE_CHARS).rstrip()}\n</file>\nIf that is what the goal "
                    f"asks, finish with one line that states what it holds, {FINISH_OPEN}"
                    f"{name}: {example}{FINISH_CLOSE}, fix the code that wrote it.")
        return ""

    def _shape(self, agent: JudgedHost, files: list[str]) -> Missing | None:
        """The first named file that lacks what the goal's and the question's words
        declare of it (rlm.agent.policy.file_shape: its columns, a row for every value
        of a column, an order), with its content; a missing or unreadable file is
        check_files' to name."""
        goal = self.goals.get()
        branch = agent.session.branch()
        asked = user_questions(branch)
        inputs = [str(e.content or "") for e in custom_entries(branch, "context_vars")]
        shapes = file_shape.declared(goal.objective if goal else "", asked[-1] if asked else "",
                                     files, inputs)
        digests: dict[str, str] = {}

        def read(name: str) -> str | None:
            try:
                data = safeio.read_bytes(self.cwd, name, EVIDENCE_READ_LIMIT)
            except (OSError, ValueError):
                return None
            digests[name] = _digest(data)
            return data.decode(errors="replace")

        found = file_shape.first_unmet(
            shapes, read, lambda name, _text: self.shown.get(name) == digests[name],
            writer=lambda name: agent.answers.written.writer(self.cwd / name))
        if found is None:
            return None
        shape, message = found
        self.shown[shape.file] = digests[shape.file]  # the refusal shows it
        return Missing(message, f"{shape.file} holding what the goal declares "
                       f"({type(shape).__name__.lower()})")

    def _unapplied(self, agent: JudgedHost) -> Missing | None:
        """The conditions the question or the goal states that the code a named file
        comes from never spelled (rlm.agent.policy.written: the statement that wrote it
        and those it read from), then the aggregates it names that code never computes;
        for a file no cell wrote, the conditions no cell of this run spelled. The
        1.5B model counted every line of a log for "the ERROR lines", shown the file it
        finished again, and the goal completed wrong; later it printed the ERROR lines
        and left the file as it was. Asked every time, not once: a goal never completes
        on a dropped condition."""
        goal = self.goals.get()
        objective = goal.objective if goal else ""
        branch = agent.session.branch()
        for name in named_files(objective):
            sources = agent.answers.written.sources(self.cwd / name)
            if sources is None:
                continue  # not written by a cell of this session: the run's cells below
            missing, inputs = dropped_in_run(branch, sources, also=objective)
            if missing:
                words = dropped_words(missing, inputs)
                return Missing(FILE_DROPPED.format(file=name, **words),
                               f"{name} written by code that applies {words['terms']}")
            ops = missing_operations(question_of(branch, objective), inputs, sources)
            if ops:
                return Missing(file_note(ops, name), f"{name} written by code that computes "
                               + " and ".join(op.kind for op in ops[:2]))
        missing, inputs = dropped_in_run(branch, agent.answers.facts.computed, also=objective)
        if not missing:
            return None
        words = dropped_words(missing, inputs)
        return Missing(GOAL_DROPPED.format(**words),
                       f"a cell that applies {words['terms']}, which the goal states")

    def _gate(self, agent: JudgedHost) -> Missing | None:
        """The first failing gate: the autonomous policy's, else the goal's own."""
        if self.policy is not None and self.policy.gates:
            failure = self.policy.check_gates(agent.answers.facts.cells)
            if failure is not None:
                return Missing(gate_message(failure), f"the check `{failure.command}` passing")
        elif (gate := getattr(self.goals, "gate", None)) is not None:  # --gate, not --autonomous
            refusal = gate.refusal()
            if refusal is not None:
                return Missing(refusal, "every --gate passing")
        return None

    def _claims(self, agent: JudgedHost, reason: str, claim: str | None) -> dict[str, Any]:
        """The verified rule on the claim: the run's accepted answer, or the summary."""
        if reason != "goal.complete":
            accepted = getattr(agent.state, "accepted", None)
            if accepted is None:
                return {}
            return {"verified": accepted.verified, "why": accepted.why,
                    "claims": accepted.evidence, "unverified": accepted.unverified_claims}
        if not claim:
            return {}
        goal = self.goals.get()
        asked = asked_prompts(agent.session.branch()) + ([goal.objective] if goal else [])
        v = agent.answers.judge(Answer(claim, "text"), asked)
        return {"verified": v.verified, "why": v.why, "claims": v.evidence,
                "unverified": v.unverified_claims}
