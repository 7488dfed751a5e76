"""The advisor: a second model beside the agent, on its own thread, that reads what the
agent does and may call one tool, `advise(note, severity)`.

`update(branch)` hands it the delta since its last update (rendered by
rlm.agent.advisor.guard); the composition root calls it when a reply's cells are about to
run, so a blocker can stop them, and after a turn that ran none (rlm.app.advising). Its
context is its own, append-only: system prompt, the seed, then update / its reply /
"Recorded." per call. A compaction, a branch switch or a resume re-seeds it from what the
agent's own context shows (the summary, pinned rule reminders, the kept recent turns), and
so does its context passing CONTEXT_SHARE of its model's window. The main loop never waits
on it: `update` only queues, and what the advisor says reaches the agent through `deliver`
(the composition root steers it into the run), each `Advice` with the id of the reply it
judged: the newest reply on the branch of the update it answered.

Cost and health are its own: calls, tokens and advice are counted (`stats`); its tokens are
charged to the run's budget through `charge`. Past `cost_fraction` of the primary's tokens
its updates are thinned (only every THIN_EVERY-th turn is sent, the skipped deltas ride
along). Three consecutive failures drop its backlog and tell the user (`tell`) once; its
health reads "failing" until a call succeeds; later updates try again.
`AdvisorStats.report()` is what `--json` and `rlm ps` show ("silent for N turns" while it
has not advised, never "healthy").
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from rlm.agent.advisor.guard import (
    ADVISE_TOOL,
    RECORDED,
    EmissionGuard,
    given_before,
    judged_reply,
    render_delta,
    text_advice,
)
from rlm.llm.tokens import count_messages, window_or_default
from rlm.llm.types import LLM, Usage
from rlm.session.context import projected_entries
from rlm.session.entries import CompactionEntry, CustomEntry, Entry

COST_FRACTION = 0.25  # of the primary's tokens; past it, updates are thinned
THIN_EVERY = 3
MAX_FAILURES = 3
CONTEXT_SHARE = 0.5  # of the advisor model's window; past it, the next update re-seeds
STATS_ENTRY = "advisor_stats"  # the custom entry that records its report in the session log
SYSTEM = (
    "You watch an AI agent that solves tasks by writing Python cells in a persistent kernel. "
    "You see its work as updates. When it drifts (breaks a stated constraint, repeats a "
    "failing approach, heads for a wrong answer), call advise(note, severity) once, with a "
    "specific note: nit (small), concern (fix before the next step) or blocker (stop the "
    "running cell). Most updates need no advice: then reply with nothing.")
# for a model without native tool calls: the same job, advice as a line of text
SYSTEM_TEXT = SYSTEM.replace(
    "call advise(note, severity) once, with a specific note",
    "write one line `ADVISE(severity): note`, with a specific note").replace(
    "then reply with nothing", "then reply with the one word NONE")


@dataclass
class AdvisorStats:
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    advice: int = 0
    suppressed: int = 0
    failures: int = 0  # consecutive
    updates: int = 0
    thinned: int = 0
    turns_silent: int = 0  # updates since its last advice
    last_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def health(self) -> str:
        if self.failures:
            return f"failing ({self.failures} in a row: {self.last_error})"
        if self.advice == 0 or self.turns_silent:
            return f"silent for {self.turns_silent} turns"
        return "advised this turn"

    def report(self) -> dict[str, Any]:
        """What `--json`, `rlm ps` and the `advisor_stats` log entry say: the counters and
        the health word (never "healthy" for an advisor that has not advised)."""
        return {**self.to_dict(), "health": self.health}


def report_line(report: dict[str, Any]) -> str:
    """One line for a person: "silent for 12 turns (14 calls, 9000 + 300 tokens, ...)"."""
    return (f"{report.get('health', '?')} ({report.get('calls', 0)} calls, "
            f"{report.get('input_tokens', 0)} + {report.get('output_tokens', 0)} tokens, "
            f"{report.get('advice', 0)} advice, {report.get('suppressed', 0)} suppressed)")


def latest_report(branch: Sequence[Entry]) -> dict[str, Any] | None:
    """The newest `advisor_stats` entry's report on `branch` (None: no advisor ran)."""
    for e in reversed(branch):
        if isinstance(e, CustomEntry) and e.custom_type == STATS_ENTRY and isinstance(e.data, dict):
            return e.data
    return None


@dataclass
class Advice:
    note: str
    severity: str
    # the session entry id of the reply it judged (the newest on the branch it read): a
    # blocker stops only that reply's cells (rlm.app.advising)
    reply: str | None = None


@dataclass
class _Feed:
    seed: bool  # re-seed the context before this text
    text: str
    reply: str | None  # the newest reply on the branch this text ends with


@dataclass
class Advisor:
    llm: LLM
    deliver: Callable[[Advice], None]
    knowledge: Callable[[], str] = lambda: ""  # WATCHDOG.md, project context, memory
    primary_tokens: Callable[[], int] = lambda: 0
    charge: Callable[[Usage], None] = lambda usage: None
    tell: Callable[[str], None] = lambda text: None
    cost_fraction: float = COST_FRACTION
    stats: AdvisorStats = field(default_factory=AdvisorStats)
    context: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.guard = EmissionGuard()
        self._sent: set[str] = set()
        self._fed: list[str] = []  # ids of the branch entries fed, in order
        self._compaction: str | None = None
        self._pending = ""  # thinned deltas not sent yet
        self._skipped = 0
        self._context_tokens = 0  # what `context` costs (counted), kept by its own thread
        self._max_tokens: int | None = None  # set after its first call (a local model is loaded)
        self._queue: queue.SimpleQueue[_Feed | None] = queue.SimpleQueue()
        self._idle = threading.Event()
        self._idle.set()
        self._thread = self._start()

    def _start(self) -> threading.Thread:
        thread = threading.Thread(target=self._work, name="rlm-advisor", daemon=True)
        thread.start()
        return thread

    # ------------------------------------------------------------------ the loop's side
    def update(self, branch: list[Entry]) -> None:
        """Queue what is new on `branch` since the last update (never blocks)."""
        latest = next((e.id for e in reversed(branch) if isinstance(e, CompactionEntry)), None)
        ids = [e.id for e in branch]
        reseed = (latest != self._compaction or ids[:len(self._fed)] != self._fed
                  or not self._fed or self._context_tokens > (self._max_tokens or 1 << 62))
        if reseed:
            self._compaction, self._sent = latest, set()
            self.guard.given |= given_before(branch)  # "once per session" outlives a resume
            text = self._seed_text(branch)
        else:
            text = render_delta(branch[len(self._fed):], self._sent)
        self._fed = ids
        if not text.strip():
            return
        self.stats.updates += 1
        if not reseed and self._over_budget():
            self._skipped += 1
            self._pending += text + "\n\n"
            if self._skipped < THIN_EVERY:
                self.stats.thinned += 1
                return
        text, self._pending, self._skipped = self._pending + text, "", 0
        if not self._thread.is_alive():  # closed with its agent, which was started again
            self._thread = self._start()
        self._idle.clear()
        self._queue.put(_Feed(reseed, text, judged_reply(branch)))

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Tests and the run's end: wait until every queued update was handled."""
        return self._idle.wait(timeout)

    def close(self) -> None:
        self._queue.put(None)

    def _over_budget(self) -> bool:
        spent = self.stats.input_tokens + self.stats.output_tokens
        return spent > self.cost_fraction * max(self.primary_tokens(), 1)

    def _seed_text(self, branch: list[Entry]) -> str:
        body = render_delta(projected_entries(branch), self._sent)
        return "The agent's work so far:\n\n" + body if body else ""

    # ----------------------------------------------------------------- its own thread
    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                self._idle.set()
                return
            try:
                self._call(item)
            finally:
                if self._queue.empty():
                    self._idle.set()

    def _call(self, item: _Feed) -> None:
        native = getattr(self.llm, "native_tools", True)
        if item.seed or not self.context:
            known = self.knowledge()
            system = (SYSTEM if native else SYSTEM_TEXT) + (
                f"\n\nWhat you know of this project:\n{known}" if known else "")
            self.context = [{"role": "system", "content": system}]
        self.context.append({"role": "user", "content": item.text})
        try:
            done = self.llm.complete(list(self.context), tools=[ADVISE_TOOL] if native else None)
        except Exception as e:  # noqa: BLE001 - the advisor's failure never reaches the run
            self._failed(e)
            return
        self.stats.failures, self.stats.last_error = 0, None
        self.stats.calls += 1
        self.stats.input_tokens += done.usage.input_tokens
        self.stats.output_tokens += done.usage.output_tokens
        self.charge(done.usage)
        calls = [c for c in done.tool_calls if c.name == "advise"]
        reply: dict[str, Any] = {"role": "assistant", "content": done.content or ""}
        if calls:
            reply["tool_calls"] = [c.to_message() for c in calls]
        self.context.append(reply)
        advice = [(c.arguments.get("note"), c.arguments.get("severity")) for c in calls]
        if not native:  # text lines; no tool result to answer (nothing says what was kept)
            advice = list(text_advice(done.content or ""))
        used = False
        for note, severity in advice:
            if self.guard.admit(note, severity, slot_used=used):
                used = True
                self.deliver(Advice(str(note).strip(), str(severity), item.reply))
        for c in calls:
            self.context.append({"role": "tool", "tool_call_id": c.id, "content": RECORDED})
        self.stats.suppressed = self.guard.suppressed
        self._context_tokens = count_messages(self.context)  # grows at its end: O(new)
        if self._max_tokens is None:
            window = self.llm.context_window() if hasattr(self.llm, "context_window") else None
            self._max_tokens = int(CONTEXT_SHARE * window_or_default(window))
        if used:
            self.stats.advice += 1
            self.stats.turns_silent = 0
        else:
            self.stats.turns_silent += 1

    def _failed(self, e: Exception) -> None:
        self.context.pop()  # the update goes with the backlog it belonged to
        self.stats.failures += 1
        self.stats.last_error = f"{type(e).__name__}: {str(e)[:200]}"
        if self.stats.failures >= MAX_FAILURES:
            while not self._queue.empty():  # drop the backlog
                try:
                    if self._queue.get_nowait() is None:
                        self._queue.put(None)
                        break
                except queue.Empty:
                    break
            if self.stats.failures == MAX_FAILURES:  # once a streak; health says "failing"
                self.tell(f"the advisor failed {self.stats.failures} times in a row "
                          f"({self.stats.last_error}); its backlog was dropped, the run goes "
                          "on and later updates try again")
            self._fed = []  # the next update re-seeds it

