"""How a run ended, decided once: the one outcome every surface shows. Pure.

The loop knows why it stopped (`reason`: final, no_code, limit:<name>, stuck, interrupted,
error) and how the answer policy judged the answer it stopped with (`Accept`: verified or
not, and why). What the run promised beyond its answer is told by the features that made
the promise, as *unmet conditions* at its end (a goal that is not complete: rlm.longrun.
goals; a gate that failed ends the run on a limit already: rlm.longrun.autonomous). From
these, `decide` makes the `RunOutcome`: one status, whether the run is answered and
verified, why not, the exit code. The terminal, `--json`, `rlm sessions`, `rlm log`, the
notebook export and `%%rlm` read it from the log entry or the event; none decides again.

Statuses (and `rlm run`'s exit code):
  answered    an answer every claim of which an output of this run shows      0
  unverified  an answer, but a claim no output of this run shows              5
  unmet       an answer, but the run left a promise unmet (its goal blocked)  3
  limit       a limit ended the run (turns, tokens, budgets, a gate that kept
              failing: limit:stalled / limit:max_continuations)               3
  stuck       the run made no progress and was stopped                        3
  interrupted the user stopped it (Ctrl-C twice, the stop button, SIGTERM)    3
  error       the model or the host failed                                    3
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

ANSWERED_REASONS = ("final", "no_code")  # the loop's reasons for a run that gave an answer
EXIT_OK, EXIT_NO_ANSWER, EXIT_UNVERIFIED = 0, 3, 5
STATUSES = ("answered", "unverified", "unmet", "limit", "stuck", "interrupted", "error")


@dataclass(frozen=True)
class Unmet:
    """A promise the run made and did not keep at its end: `what` it is (goal), `why`
    in one line the user reads."""

    what: str
    why: str


@dataclass(frozen=True)
class RunOutcome:
    status: str  # one of STATUSES
    reason: str  # the loop's reason
    verified: bool | None  # None unless answered: True (answered) or False (unverified)
    why: str | None = None  # why not answered, or why the answer is not verified
    unmet: tuple[Unmet, ...] = ()

    @property
    def answered(self) -> bool:
        return self.status in ("answered", "unverified")

    @property
    def exit_code(self) -> int:
        if self.status == "answered":
            return EXIT_OK
        return EXIT_UNVERIFIED if self.status == "unverified" else EXIT_NO_ANSWER

    @property
    def headline(self) -> str:
        """One line for the end of a run: what the user should take from it."""
        if self.status == "answered":
            return "✓ verified"
        if self.status == "unverified":
            return "unverified: " + (self.why or "no successful cell supports the answer")
        return "not answered: " + (self.why or self.reason)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["unmet"] = [asdict(u) for u in self.unmet]
        d["answered"], d["exit_code"] = self.answered, self.exit_code
        return d

    @classmethod
    def from_dict(cls, d: Any) -> RunOutcome | None:
        """The outcome a log entry recorded; None when it recorded none (an older log) or
        the record is not one (a session file is read, never trusted to be well formed)."""
        if not isinstance(d, dict) or d.get("status") not in STATUSES:
            return None
        verified = d.get("verified")
        unmet = tuple(Unmet(str(u.get("what")), str(u.get("why")))
                      for u in d.get("unmet") or [] if isinstance(u, dict))
        return cls(str(d["status"]), str(d.get("reason") or ""),
                   verified if isinstance(verified, bool) else None,
                   None if d.get("why") is None else str(d.get("why")), unmet)


def decide(reason: str, detail: str | None, verified: bool | None, why: str | None,
           unmet: list[Unmet]) -> RunOutcome:
    """The run's outcome from the loop's `reason` (and its `detail`), the accepted answer's
    verdict (`verified`, `why`; None when no answer was accepted) and the promises left
    unmet. An answer never outweighs a limit, a stop or an unmet promise."""
    if reason not in ANSWERED_REASONS:
        status = ("limit" if reason.startswith("limit:") else
                  reason if reason in ("stuck", "interrupted", "error") else "error")
        text = reason + (f": {detail}" if detail else "")
        return RunOutcome(status, reason, None, text, tuple(unmet))
    if unmet:
        return RunOutcome("unmet", reason, None, "; ".join(u.why for u in unmet), tuple(unmet))
    if verified is not True:
        return RunOutcome("unverified", reason, False, why or "the answer was not judged")
    return RunOutcome("answered", reason, True, None)
