"""The three compaction triggers (requested, threshold, overflow) and their guards.

Settings are sized to the model that runs: `effective()` scales the defaults to
`window_fn()` (see plan.effective_settings) and raises ConfigError for an impossible user
combination; call it (or `start_run()`) when building the agent so the user hears at start.

How the agent loop drives it:
- call `start_run()` at the start of every run, before the first model call: it resets
  the overflow state (a run that once ended in an overflow must try to compact again) and
  returns the effective settings (ConfigError when they cannot fit the window);
- set `turn_active` (or pass `turn_active_fn`) while the model is working, so that
  `compact.run` from a cell (`request`) is accepted only then;
- call `after_turn(kernel)` after every model step whose cells have run, before the next
  model call: a pending request runs first (even with automatic compaction disabled),
  else the threshold check;
- on `ContextOverflow`, append the error entry and call `on_overflow(entry.id, entry.model,
  kernel)`: "retry" means compacted (or the error does not count): call the model again;
  "report" means tell the user `overflow_message` and stop;
- call `note_assistant_ok()` after every normal assistant message (resets the overflow
  state machine).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from rlm.compaction.checkpoint import CheckpointWriter, rungs_for
from rlm.compaction.core import perform_compaction
from rlm.compaction.ladder import LowYieldGuard, Relief, reject, relieve
from rlm.compaction.notes import default_notes
from rlm.compaction.plan import (
    CompactionSettings,
    EffectiveSettings,
    Projection,
    context_status,
    context_tokens,
    effective_settings,
    is_normal_assistant,
    latest_compaction_index,
    latest_relief_index,
    should_compact,
)
from rlm.compaction.rebuild import from_checkpoint
from rlm.compaction.tiers import TierSettings
from rlm.llm.cancellable import CancellableLLM
from rlm.llm.types import LLM
from rlm.protocols import Executor, SessionLog
from rlm.session.entries import CompactionEntry, Entry, MessageEntry

SHAKE_NOTE = (
    "A shake is scheduled for the end of this turn: old cell outputs become placeholders "
    "(history.cell(N) returns them). Continue working normally."
)
CHECKPOINT_WAIT_S = 180.0  # an automatic relief waits this long for a checkpoint writer
REBUILD_WAIT_S = 300.0  # a manual /rebuild

SCHEDULED_NOTE = (
    "Compaction is scheduled for the end of this turn; you resume automatically afterwards. "
    "Continue working normally."
)


class CompactionController:
    """Triggers + guards around one `perform_compaction` core. One per running session."""

    def __init__(
        self,
        session: SessionLog,
        llm: LLM | Callable[[], LLM],
        settings: CompactionSettings,
        window_fn: Callable[[], int | None],
        *,
        current_model_fn: Callable[[], str | None] | None = None,
        turn_active_fn: Callable[[], bool] | None = None,
        projection: Projection | None = None,
        tiers: bool = True,
    ):
        """`settings`: what the user asked for (`CompactionSettings.from_config`); fields in
        its `auto` set scale to `window_fn()`. `projection`: the messages the loop sends for
        a branch (system prompt included), so the threshold counts what is projected.
        `tiers`: prune and shake (rlm.compaction.tiers) before a summary."""
        self.session = session
        self._llm = llm
        self.settings = settings
        self.window_fn = window_fn
        self.projection = projection
        self.current_model_fn = current_model_fn
        self.turn_active = False
        self.turn_active_fn = turn_active_fn or (lambda: self.turn_active)
        self.overflow_state = "idle"  # idle -> attempted -> reported
        self.overflow_message: str | None = None
        self._pending: str | None = None
        self._has_pending = False
        self._lock = threading.Lock()  # request() comes from the bridge thread
        self.tiers = tiers
        # written after a relief (rlm.compaction.notes): the root hands its own (rlm.app.seam)
        self.notes = default_notes()
        self.low_yield = LowYieldGuard()
        self.notice: str | None = None  # the low-yield stop, for the UI once
        self.last_relief: Relief | None = None
        self._shake_pending = False
        # tier 0 (rlm.compaction.checkpoint): attached by the composition root
        self.checkpoint: CheckpointWriter | None = None
        self.checkpoint_wait_s = CHECKPOINT_WAIT_S
        # set by the composition root: Ctrl-C stops a summary at once (the context stays as
        # it was), and the summary is named on screen while it is written
        self.cancelled: Callable[[], bool] = lambda: False
        self.announce: Callable[[str], None] = lambda text: None

    # ------------------------------------------------------------------ helpers
    @property
    def llm(self) -> LLM:
        if hasattr(self._llm, "complete"):
            return self._llm  # type: ignore[return-value]
        self._llm = self._llm()  # type: ignore[operator]
        return self._llm  # type: ignore[return-value]

    @property
    def pending(self) -> bool:
        return self._has_pending

    def _take_pending(self) -> tuple[bool, str | None]:
        with self._lock:
            had, instr = self._has_pending, self._pending
            self._has_pending, self._pending = False, None
        return had, instr

    def effective(self) -> EffectiveSettings:
        """Window, threshold, reserve and keep-recent as compaction uses them now.

        ConfigError when values the user set cannot fit the model's window."""
        return effective_settings(self.settings, self.window_fn())

    def _effective(self) -> EffectiveSettings:
        # mid-run (e.g. after a model switch) never raise: use the user's values as given
        return effective_settings(self.settings, self.window_fn(), strict=False)

    def start_run(self) -> EffectiveSettings:
        """Call at the start of every run: resets the overflow state; returns `effective()`."""
        self.overflow_state = "idle"
        self.overflow_message = None
        self.low_yield.reset()
        return self.effective()

    def tier_settings(self) -> TierSettings:
        return TierSettings.for_window(self.window_fn(), enabled=self.tiers)

    def context_tokens(self) -> int:
        return context_tokens(self.session.branch(), self.projection)

    def compact(
        self, trigger: str = "manual", kernel: Executor | None = None, instructions: str | None = None
    ) -> CompactionEntry | None:
        """Compact now with the effective settings (e.g. `/compact`, `rlm compact`)."""
        return self._compact(trigger, kernel, instructions)

    def _compact(self, trigger: str, kernel: Executor | None, instructions: str | None = None):
        llm = self.llm
        self.announce(f"compacting the context ({self.context_tokens():,} tokens): "
                      f"{llm.spec} writes a summary")
        return perform_compaction(
            self.session,
            CancellableLLM(llm, self.cancelled),
            self._effective().settings,
            trigger=trigger,
            instructions=instructions,
            kernel=kernel,
            projection=self.projection,
            notes=self.notes,
        )

    def _ladder(self, trigger: str, kernel: Executor | None) -> Entry | None:
        """Prune, then shake, then a summary only if still over the threshold; the
        low-yield guard counts the whole step."""
        eff = self._effective()
        before = self.context_tokens()
        result: Entry | None = None
        if self.tiers:
            relief = relieve(self.session, self.tier_settings(), trigger,
                             limit=eff.threshold, projection=self.projection)
            self.last_relief = relief
            if relief.records:
                result = relief.records[-1]
            if not should_compact(relief.tokens_after, eff.window, eff.settings):
                return self._yielded(trigger, before, eff.window, self._noted(result))
        rebuilt = self._rebuild(trigger, kernel, eff.threshold)
        compacted = None if rebuilt is not None else self._compact(trigger, kernel)
        if rebuilt is None and compacted is None:
            self._noted(result)  # the tier's relief (a compaction wrote its own notes)
        result = rebuilt or compacted or result
        if self.cancelled():  # stopped by the user: no yield to judge
            return result
        return self._yielded(trigger, before, eff.window, result)

    def _rebuild(self, trigger: str, kernel: Executor | None, limit: int | None, *,
                 manual: bool = False) -> CompactionEntry | None:
        """Tier 0's use: a boundary from the checkpoint, with no model call on the main path
        when one is ready. A writer running now is waited for; with none ready, an
        automatic writer (rungs set) or a manual `/rebuild` writes one now. Bounded: past
        the wait, the summary runs."""
        if self.checkpoint is None or not (self.tiers or manual):  # --no-context-tiers
            return None
        branch = self.session.branch()
        entry = from_checkpoint(
            self.checkpoint, self.session, trigger, limit=limit, projection=self.projection,
            keep_recent=self._effective().keep_recent_tokens,
            wait_s=REBUILD_WAIT_S if manual else self.checkpoint_wait_s,
            start=manual or self.checkpoint.automatic, fresh=manual,
            announce=self.announce, cancelled=self.cancelled)
        return self.notes.after(self.session, entry, branch, kernel)

    def rebuild(self, kernel: Executor | None = None) -> CompactionEntry | None:
        """`/rebuild`: the context rebuilt from the checkpoint now, written first unless a
        confirmed one covers the log; None when there is no writer (a child, a log in
        memory, compaction off) or it could not shrink the context."""
        return self._rebuild("manual", kernel, None, manual=True)

    def _yielded(self, trigger: str, before: int, window: int | None,
                 result: Entry | None) -> Entry | None:
        notice = self.low_yield.record(before - self.context_tokens(), window)
        if notice is not None:
            reject(self.session, trigger, notice)
            self.notice = notice
        return result

    def shake(self, trigger: str = "manual") -> Relief:
        """`/shake`: prune and shake everything clearable now (a small recent tail stays),
        then the relief's notes."""
        relief = self._shake(trigger)
        self._noted(relief.records[-1] if relief.records else None)
        return relief

    def _shake(self, trigger: str) -> Relief:
        return relieve(self.session, self.tier_settings(), trigger, limit=None,
                       projection=self.projection, manual=True)

    def _noted(self, relief: Entry | None) -> Entry | None:
        """A tier's relief record (None: none) and the notes that follow any relief."""
        return self.notes.after(self.session, relief, self.session.branch(), None)

    def request_shake(self) -> dict[str, Any]:
        """`compact.shake()` from the kernel: scheduled for the end of the turn."""
        if not self.turn_active_fn():
            return {"scheduled": False,
                    "reason": "compact.shake is accepted only while the model is working; "
                              "use /shake in chat between turns"}
        with self._lock:
            self._shake_pending = True
        return {"scheduled": True, "note": SHAKE_NOTE}

    def take_notice(self) -> str | None:
        notice, self.notice = self.notice, None
        return notice

    # ------------------------------------------------------------ compact.run / status
    def request(self, instructions: str | None = None) -> dict[str, Any]:
        """`compact.run(instructions)` from the kernel: scheduled for the end of the turn."""
        if not self.turn_active_fn():
            return {
                "scheduled": False,
                "reason": "compact.run is accepted only while the model is working; "
                "use `rlm compact SESSION` between runs",
            }
        branch = self.session.branch()
        c = latest_compaction_index(branch)
        if not any(isinstance(e, MessageEntry) for e in branch[c + 1 :]):
            return {"scheduled": False, "reason": "already compacted: nothing new to summarize"}
        with self._lock:
            self._pending = instructions or None
            self._has_pending = True
        return {"scheduled": True, "note": SCHEDULED_NOTE}

    def status(self) -> dict[str, Any]:
        """`compact.status()`: usage vs window and the last compaction."""
        return context_status(self.session.branch(), self.projection, self._effective(),
                              scheduled=self._has_pending)

    # ----------------------------------------------------------------- triggers
    def after_turn(self, kernel: Executor | None = None) -> Entry | None:
        """Run a pending request (a shake, then a summary), else relieve the context when it
        is over the threshold (the ladder), unless the low-yield guard stopped that; then
        start the checkpoint writer when the context, as relieved, crossed one of its rungs."""
        entry = self._after_turn(kernel)
        if self.checkpoint is not None:
            eff = self._effective()
            rungs = rungs_for(self.checkpoint.fractions, eff.window, eff.threshold)
            if rungs:  # none (`local`, `script:`, tiers off): the count is not needed
                self.checkpoint.check(self.context_tokens(), rungs)
            problem = self.checkpoint.take_problem()  # a writing that failed since
            if problem is not None and self.notice is None:
                self.notice = f"the checkpoint was not written: {problem}"
        return entry

    def _after_turn(self, kernel: Executor | None) -> Entry | None:
        with self._lock:
            shake, self._shake_pending = self._shake_pending, False
        shaken = self._shake("requested").records if shake else []
        had, instructions = self._take_pending()
        if had:
            return self._compact("requested", kernel, instructions)
        if shaken:
            return self._noted(shaken[-1])
        if not self.settings.enabled or self.low_yield.stopped:
            return None
        branch = self.session.branch()
        c = latest_relief_index(branch)
        # stale guard: only usage reported after the latest compaction may trigger
        if not any(is_normal_assistant(e) for e in branch[c + 1 :]):
            return None
        eff = self._effective()
        if not should_compact(context_tokens(branch, self.projection), eff.window, eff.settings):
            return None
        return self._ladder("threshold", kernel)

    def before_prompt(self, kernel: Executor | None = None) -> Entry | None:
        """Before a run's first model call: compact when the context is already over the
        threshold (a resumed long session, a large notebook import or context file), so
        the first call is not spent on a prompt that barely fits, or overflows."""
        if not self.settings.enabled:
            return None
        eff = self._effective()
        if not should_compact(self.context_tokens(), eff.window, eff.settings):
            return None
        return self._ladder("threshold", kernel)

    def note_assistant_ok(self) -> None:
        self.overflow_state = "idle"
        self.overflow_message = None

    def on_overflow(self, error_entry_id: str, model: str | None, kernel: Executor | None = None) -> str:
        """"retry" (compacted, or the error does not count) or "report" (tell the user)."""
        if not self._overflow_counts(error_entry_id, model):
            return "retry"
        if self.overflow_state != "idle":
            self.overflow_state = "reported"
            self.overflow_message = self._report(model, "even after compaction")
            return "report"
        self.overflow_state = "attempted"
        had, instructions = self._take_pending()
        if not (self.settings.enabled or had):
            self.overflow_state = "reported"
            self.overflow_message = self._report(model, "and automatic compaction is disabled")
            return "report"
        done = (self._compact("overflow", kernel, instructions) if had
                else self._ladder("overflow", kernel))
        if done is None:
            self.overflow_state = "reported"
            self.overflow_message = self._report(model, "and compaction could not shorten it")
            return "report"
        return "retry"

    def _overflow_counts(self, error_entry_id: str, model: str | None) -> bool:
        current = self.current_model_fn() if self.current_model_fn else None
        if current and model and model != current:
            return False  # the error came from the model used before a switch
        branch = self.session.branch()
        ids = [e.id for e in branch]
        if error_entry_id not in ids:
            return True
        return ids.index(error_entry_id) > latest_relief_index(branch)

    def _report(self, model: str | None, why: str) -> str:
        name = model or "the current model"
        return (
            f"The conversation no longer fits the context window of {name} {why}. "
            "Switch to a model with a larger context window (--model, or --context-window "
            "if the window is set too low), or lower --keep-recent-tokens, then resume."
        )
