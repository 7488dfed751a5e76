"""The answer policy: every rule about what a run's replies, cells and answers lead to.

The loop (rlm.agent.loop) tells the policy what happened and carries out what it decides;
it knows no rule. One `AnswerPolicy` lives as long as its Agent; `start_run` resets its
facts. Decisions (rlm.agent.policy.decisions):

  turn_note(turn)                -> Note | None         a message before the model call
  reply(content, tool_calls)     -> Run | Resample      before a reply's cells run
  cell(code, result, entry_id)   -> CellVerdict         the note for the result, looping
  cell_not_run()                                        a garbled or refused cell (failed)
  answer(Answer, branch)         -> Refuse | Accept     refuse with a note, or accept with
                                                        verified + evidence / claims
  temperature(configured)        -> float | None        for the next model call
  tool_choice(turn)              -> "required" | None   the next reply must run a cell:
                                                        an answer was refused (a rule's
                                                        refusal, a goal's or a gate's:
                                                        `continued`) and none was sent
                                                        since
  watch(branch)                  -> ReplyScanner | None the stream rules watching the next
                                                        reply (rlm.agent.policy.stream)
  rule_hit(match, branch)        -> Abort               drop the reply, inject, retry
  rule_note(match, branch)       -> CustomEntry         a match that does not interrupt
  system_note(branch)            -> str                 the rules every context carries
  halt(turn, tokens)             -> End | None          before a turn: end a stuck run
                                                        (rlm.agent.policy.stuck)

New rules plug in as objects in `rules` (rlm.agent.policy.rules: `Rule` and the hooks),
consulted in order; the first decision wins (cell notes: every rule's note is appended).
Verification is not a rule that can refuse: it is how an accepted answer is judged
(rlm.agent.policy.verify).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from rlm import safeio
from rlm.agent.codeparse import ran_before_error
from rlm.agent.nudge import error_text
from rlm.agent.policy.dataflow import DataFlow
from rlm.agent.policy.decisions import (
    Accept,
    Answer,
    Cell,
    CellVerdict,
    Facts,
    Note,
    Refuse,
    Reply,
    Resample,
    Run,
)
from rlm.agent.policy.file_shape import DeclaredFile
from rlm.agent.policy.line_groups import LineGroups
from rlm.agent.policy.recast import Closest, CountedRows, Unpicked, WhichAsFigure
from rlm.agent.policy.records import RecordFields
from rlm.agent.policy.rules import (
    RESAMPLE_TEMPERATURE,
    RESAMPLES,
    DroppedCondition,
    ErrorText,
    LastTurn,
    MaskPrecedence,
    NoCodeNudge,
    NotFound,
    PartialResult,
    QuestionOperation,
    RepeatedCell,
    RowLabel,
    Rule,
    ShrunkInput,
    Ungrounded,
    UnknownTool,
)
from rlm.agent.policy.steps import Steps, steps_of
from rlm.agent.policy.stream import Abort, StreamRules, input_literal_rule
from rlm.agent.policy.stuck import StuckWatch, escalation_note, thresholds_for
from rlm.agent.policy.verify import Shown, verify
from rlm.agent.policy.written import Written, files_written
from rlm.agent.steer.match import Match, ReplyScanner
from rlm.protocols import End
from rlm.session.branch import prompts
from rlm.session.entries import CustomEntry, Entry

LOOP_BREAK_TEMPERATURE = 0.7
READ_WRITTEN_LIMIT = 64 << 20  # the most of a written file read to check what it holds

__all__ = [
    "LOOP_BREAK_TEMPERATURE", "RESAMPLES", "RESAMPLE_TEMPERATURE", "Abort", "Accept", "Answer",
    "AnswerPolicy", "CellVerdict", "Facts", "Note", "Refuse", "Resample", "Rule", "Run",
    "asked_prompts",
]


def default_rules() -> list[Rule]:
    """The built-in rules in the order they are consulted (the ones that try the data on a
    fork of the kernel after those that decide from the run's record)."""
    return [LastTurn(), RepeatedCell(), UnknownTool(), NoCodeNudge(), ErrorText(), NotFound(),
            Ungrounded(), DroppedCondition(), QuestionOperation(), DeclaredFile(), ShrunkInput(),
            CountedRows(), WhichAsFigure(), Unpicked(), Closest(), PartialResult(),
            MaskPrecedence(), RowLabel(), RecordFields(), LineGroups(), Steps()]


# what the host read from a file and put in a continuation (a goal's judge shows a named
# file, and a finish built from its lines): data, not the question's words. Left in, a
# finish that stated the file's figures had no claim left to check and was an "echo" of
# the host's note (the long-run logs run of stop 71, refused four times with a right file)
# the finish the host builds from a file's lines is written between these (GoalJudge._stated)
FINISH_OPEN, FINISH_CLOSE = "e.g. FINAL(", "). If it is not"
HOST_DATA = re.compile(r'(<file path="[^"\n]*">).*?(</file>)|'
                       f"({re.escape(FINISH_OPEN)}).*?({re.escape(FINISH_CLOSE)})", re.S)


def asked_prompts(branch: Sequence[Entry]) -> list[str]:
    """Every user prompt on the branch (the user's and continuations; not the loop's own
    nudges): their words and figures are the question's, not an answer's claims; what the
    host read from a file and showed in them is not (`HOST_DATA`)."""
    return [HOST_DATA.sub(lambda m: "".join(g for g in m.groups() if g), e.message["content"])
            for e in prompts(branch)  # O(prompts) on a long log
            if isinstance(e.message.get("content"), str)]


class AnswerPolicy:
    def __init__(self, rules: list[Rule] | None = None):
        self.rules: list[Rule] = default_rules() if rules is None else rules
        self.facts = Facts()
        self.stream = StreamRules()  # rule files (rlm.agent.steer), set by the composition root
        self.stuck = StuckWatch()
        # what a stuck note names: the goal in force, and what the host last found missing
        # (set by the goal's judge, rlm.agent.policy.goal_evidence)
        self.goal: Callable[[], str | None] = lambda: None
        # whether the host checks the work itself (a goal in force or completed: its files
        # and gates), so a claimless "done" is the host's to judge (rlm.agent.policy.verify)
        self.host_checks: Callable[[], bool] = lambda: False
        self.missing: str | None = None
        self.flow: DataFlow | None = None  # which names hold the task's data (the session's)
        self.written = Written()  # where each file a cell wrote comes from (the process's)
        # claims a refusal named as unsupported (lowercased; the session's): a refusal the
        # goal's judge gives is a prompt, and a prompt's words are the question's: naming an
        # invented figure there would make it pass next time (rlm.agent.policy.verify.claims)
        self.disputed: set[str] = set()

    def start_run(self, *, native_tools: bool, max_turns: int | None, has_data: bool,
                  inputs: Iterable[str] = (), held: Callable[[], set[str]] | None = None,
                  offer: Callable[[list[Any]], Any] | None = None,
                  cwd: Path | None = None, prompt: str | None = None,
                  described: Callable[[], list[str]] | None = None,
                  probe: Callable[[str], str | None] | None = None) -> None:
        """A run starts: its facts afresh. The names holding data (`flow`) live as long as
        the session: the first run in this process starts from what the session's last run
        recorded (`held`) and the inputs; every run adds the inputs it was given. `offer`
        tries rewrites of a cell on a fork of the kernel (Facts.offer); `cwd`, the kernel's
        working directory, is where the files the cells wrote are read (Facts.read_written);
        `prompt`, the run's, is read for the steps it gives (rlm.agent.policy.steps);
        `described` gives the input's descriptions as the session holds them; `probe`
        runs the host's own question on a fork and returns what it printed (Facts.probe)."""
        self.facts = Facts(native_tools=native_tools, max_turns=max_turns, has_data=has_data,
                           steps=steps_of(prompt) if prompt else [], prompt=prompt or "")
        if offer is not None:
            self.facts.offer = offer
        if described is not None:
            self.facts.described = described
        if probe is not None:
            self.facts.probe = probe
        if cwd is not None:
            self.facts.read_written = lambda name: self._read_written(cwd, name)
            self.facts.writer = lambda name: self.written.writer(cwd / name)
            self.facts.wrote = lambda name: self.written.sources(cwd / name) is not None
        if self.flow is None:
            self.flow = DataFlow(held() if held is not None else set())
        inputs = list(inputs)
        self.flow.derived.update(inputs)
        rule = input_literal_rule(inputs)
        self.stream.builtin = (rule,) if rule is not None else ()
        self.stuck = StuckWatch(thresholds_for(native_tools))
        self.missing = None

    def _read_written(self, cwd: Path, name: str) -> str | None:
        if self.host_checks() or self.written.sources(cwd / name) is None:
            return None  # a goal's judge checks its files; a file no cell wrote is input
        try:  # the kernel wrote it: never followed through a link (rlm.safeio)
            return safeio.read_bytes(cwd, name, READ_WRITTEN_LIMIT).decode(errors="replace")
        except (OSError, ValueError):
            return None

    def halt(self, turn: int, tokens: int) -> End | None:
        """Before turn `turn` (`tokens` spent so far): end the run when it is stuck and the
        one escalation note did not help."""
        return self.stuck.halt(turn, tokens)

    def halting(self) -> bool:
        """Whether `halt` ends the run before its next turn (the turn just taken closed):
        work done between turns for the next one (a compaction) is then not done."""
        return self.stuck.halting()

    # ------------------------------------------------------------------------ turns
    def turn_note(self, turn: int) -> Note | None:
        """A turn starts: a note the model should read before it replies, or None."""
        self.facts.turn, self.facts.resamples = turn, 0
        self.stream.start_turn()
        self.stuck.open_turn()
        if self.stuck.escalate(turn):
            missing = self.missing or ("an output that meets the goal" if self.goal() else
                                       "an output that answers the question")
            w = self.stuck
            assert w.signal is not None
            return Note(escalation_note(w.signal, w.repeated_code, self.goal(), w.last_output,
                                        missing),
                        f"stuck ({self.stuck.signal}): told the model once what is missing")
        if turn != 1:
            return _first(r.on_turn(self.facts, turn) for r in self.rules)
        # before the first turn the notes are what the task is (its steps, its records):
        # every rule's, together
        notes = [n for r in self.rules if (n := r.on_turn(self.facts, turn)) is not None]
        if len(notes) < 2:
            return notes[0] if notes else None
        return Note("\n".join(n.text for n in notes), "; ".join(n.notice for n in notes),
                    notes[0].origin)

    def temperature(self, configured: float | None) -> float | None:
        """The next call's temperature: at least LOOP_BREAK_TEMPERATURE for a fenced-code
        model whose newest cell repeated the failing one (or a successful one that ran twice
        before): at temperature 0 a small model sends the same cell again whatever the
        result says (the task suite's 1.5B model sent one failing groupby five times)."""
        if self.facts.looping and not self.facts.native_tools:
            self.stuck.sampled_hot()
            return max(configured or 0.0, LOOP_BREAK_TEMPERATURE)
        return configured

    def tool_choice(self, turn: int) -> str | None:
        """"required" when an answer was refused for work not done and no cell was sent since
        (one the host did not run, or a stream rule stopped, counts: sent),
        unless this is the last turn a limit allows (it asks for FINAL alone): the 1.5B
        model answered a failing gate, a wrong header or an unsupported claim with the
        same FINAL four times in a row, never running the fix it was shown (the long-run
        shipments, grades, contracts and survey tasks ended stuck so). Every model: a
        fenced-code model not sent tools is not sent this either (rlm.llm.seam)."""
        f = self.facts
        if not f.work_asked or (f.max_turns is not None and turn >= f.max_turns):
            return None
        return "required"

    def continued(self, work: bool) -> None:
        """The run goes on with a continuation (a goal's judge, a failing gate: rlm.
        protocols.Continue); `work`: it refused an answer whose fix is work."""
        self.facts.work_asked = self.facts.work_asked or work

    def reply(self, content: str, tool_calls: bool) -> Run | Resample:
        decision = _first(r.on_reply(self.facts, Reply(content, tool_calls)) for r in self.rules)
        if decision is None:
            return Run()
        self.facts.resamples += 1
        self.stuck.resampled()
        return decision

    def would_run(self, content: str, tool_calls: bool) -> bool:
        """Whether `reply` would run as it is (no rule would resample it), counting nothing:
        a candidate reply is screened so (rlm.app.candidates)."""
        return _first(r.on_reply(self.facts, Reply(content, tool_calls)) for r in self.rules) \
            is None

    # ----------------------------------------------------------------- stream rules
    def watch(self, branch: Sequence[Entry]) -> ReplyScanner | None:
        """The scanner the next reply streams through (None: no rule may fire now)."""
        return self.stream.watch(branch) if self.stream.stream_rules else None

    def rule_hit(self, match: Match, branch: Sequence[Entry]) -> Abort:
        self.facts.work_asked = False  # it wrote a cell the host stopped: the call is free
        return self.stream.hit(match, branch)

    def rule_note(self, match: Match, branch: Sequence[Entry]) -> CustomEntry:
        return self.stream.note(match, branch)

    def system_note(self, branch: Sequence[Entry]) -> str:
        return self.stream.context_note(branch) \
            if self.stream.rules or self.stream.builtin else ""

    # ------------------------------------------------------------------------ cells
    def cell(self, code: str, result: Any, entry_id: str) -> CellVerdict:
        """A cell ran (`result`: rlm.kernel.types.CellResult) and its result will be the
        session entry `entry_id`."""
        f = self.facts
        f.cells += 1
        f.work_asked = False
        f.last_cell_ok = result.ok
        f.codes.append(code)
        f.last_entry = entry_id
        if self.flow is None:
            self.flow = DataFlow()
        # a failed cell bound what ran before its error: the flow takes it too
        flow = self.flow.cell(code, getattr(result, "provenance", None),
                              getattr(result, "binds", None))
        self.written.cell(code, getattr(result, "provenance", None), getattr(result, "binds", None))
        if result.ok:
            f.shown.append(Shown(entry_id, result.shaped, code, flow.depends, flow.evidence))
            f.final_depends = flow.final_depends
        elif getattr(result, "binds", None) and (ran := ran_before_error(code, result.shaped)):
            f.ran_before_errors.append(ran)
        failed_again = result.status == "error" and f.last_failed_code == code
        before = f.succeeded.get(code.strip(), 0) if result.ok else 0
        repeat = self.stuck.cell(code, result.shaped, result.ok,
                                 getattr(result, "binds", None))
        if repeat is None:  # new information: a poll whose output changed is no loop
            f.stale.discard(code.strip())
        else:
            f.stale.add(code.strip())
        f.looping = failed_again or (before >= 2 and repeat is not None)
        cell = Cell(code, result.ok, result.status, failed_again, before, repeat, result.shaped,
                    files_written(getattr(result, "provenance", None)))
        note = "".join(n for r in self.rules if (n := r.on_cell(f, cell)))
        f.last_failed_code = code if result.status == "error" else None
        if result.ok:
            f.succeeded[code.strip()] = before + 1
        return CellVerdict(note, f.looping)

    def inputs_read(self, names: set[str], shrunk: dict[str, tuple[int, int]]) -> None:
        """A cell read the input tables `names` again from their files: `shrunk`, those it
        read only in part (rows now, rows loaded); the others hold all their rows again."""
        for name in names:
            self.facts.shrunk.pop(name, None)
        self.facts.shrunk.update(shrunk)

    def cell_not_run(self, code: str | None = None) -> None:
        """A cell the loop did not run (garbled arguments, a literal over an input): it
        counts as a failed cell for what follows, so the same cell sent again is resampled
        like a repeated failing one (RepeatedCell)."""
        self.facts.last_cell_ok = False
        self.facts.last_failed_code = code
        # a cell was sent: what the requirement asked. Required again, the 1.5B model typed
        # its input into a literal until the time limit (task suite needle, farapart)
        self.facts.work_asked = False

    # ---------------------------------------------------------------------- answers
    def answer(self, answer: Answer, branch: Sequence[Entry]) -> Refuse | Accept:
        """Refuse `answer` (once per rule and run), or accept it, verified or not."""
        asked = asked_prompts(branch) + [g for g in (self.goal(),) if g]
        refusal = _first(r.on_answer(self.facts, answer, asked, branch) for r in self.rules)
        if refusal is not None:  # every refusal asks for a cell (its note says which)
            self.facts.refused.add(refusal.key)
            self.facts.work_asked = True
            self.facts.nudges += refusal.counts_as_nudge
            return refusal
        return self.judge(answer, asked)

    def judge(self, answer: Answer, asked: list[str]) -> Accept:
        f = self.facts
        text = answer.text
        v = verify(text, source=answer.source, shown=f.shown, codes=f.codes, prompts=asked,
                   cells_run=f.cells, last_cell_ok=f.last_cell_ok, error_like=error_text(text),
                   final_entry=f.last_entry if answer.from_kernel else None,
                   final_depends=f.final_depends, host_checks=self.host_checks(),
                   disputed=frozenset(self.disputed))
        return Accept(v.verified, v.why, v.evidence, v.unverified_claims)

    def dispute(self, claims: Iterable[str]) -> None:
        """A refusal names `claims` as unsupported: they stay claims for this session."""
        self.disputed.update(c.lower() for c in claims)


def _first(decisions: Any) -> Any:
    return next((d for d in decisions if d is not None), None)
