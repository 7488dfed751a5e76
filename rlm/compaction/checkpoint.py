"""Tier 0: a checkpoint of the session, written in the background before it is needed.

`checkpoint.md` in the session directory says what another model needs to go on from
here, in fixed SECTIONS. A writer maintains it in place: each writing covers the log's
entries after the last watermark up to the leaf when it started, and updates the previous
checkpoint with them. Its reply is validated (every section, in order, within a token
budget) and asked again with the reason when it fails, ATTEMPTS times at most.

The watermark is a `checkpoint` entry in the log ({"watermark": the last entry covered,
"sha256" of the file, ...}), appended only after the file was written whole (temporary
file, fsync, rename). A writer that fails or is killed leaves the previous file and the
previous watermark, so the next writing covers the unconfirmed range again.

When: `rungs` are fractions of the model's window, each kept below the compaction
threshold (a checkpoint due there would come too late to spare the summary). After each
turn the compaction controller calls `CheckpointWriter.check(tokens, rungs)`: a rung the
context crossed starts a writer in a thread of its own, one per session; a rung crossed
while one runs waits for the next check; a context relieved below the lowest rung, or
compacted (a summary or a rebuild: a checkpoint from before it no longer serves), starts a
new fill. `SessionRun` owns the writer: it closes it when the run ends (S5), after which
nothing it finishes reaches the log or the file.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

from rlm import safeio
from rlm.compaction.plan import latest_compaction_index, serialize_entries
from rlm.errors import RlmError
from rlm.llm.providers import in_process
from rlm.llm.tokens import count_text, tail_within, window_or_default
from rlm.llm.types import LLM
from rlm.paths import write_private_atomic
from rlm.protocols import SessionLog
from rlm.secrets import known_secrets, redact_text
from rlm.session.branch import custom_entries
from rlm.session.entries import CustomEntry, Entry, MessageEntry

FILENAME = "checkpoint.md"
SECTIONS = (
    "Task",
    "The user's words that still matter",
    "Decisions and why",
    "Kernel names and how they were built",
    "Files touched",
    "Failed: do not retry",
    "Progress",
    "Next steps",
    "Open questions",
)
ATTEMPTS = 3
DEFAULT_RUNGS = (0.4, 0.6, 0.75)  # of the window, for a model that runs beside the session's
BELOW_COMPACTION = 0.9  # a rung at or past the compaction threshold moves to 90% of it


def default_rungs(spec: str) -> tuple[float, ...]:
    """None set: the ladder for a compaction model that computes elsewhere (a hosted one).
    One in this process (`local`, `script:`) writes none by default: `local` shares its
    one llama.cpp instance and its KV cache with the session's turns, so a writer would
    hold them up, and a script's replies must stay in their order (set
    `checkpoint_rungs`)."""
    return () if in_process(spec) else DEFAULT_RUNGS


def rungs_for(fractions: Sequence[float], window: int | None, threshold: int | None) -> list[int]:
    """Token counts at which a checkpoint is due, ascending, each below `threshold`."""
    if not window or not fractions:
        return []
    cap = int(BELOW_COMPACTION * threshold) if threshold else window
    return sorted({min(int(f * window), cap) for f in fractions if 0 < f < 1})


def budget_for(window: int | None) -> int:
    """The checkpoint's size in tokens: an eighth of the window, between 600 and 4,000."""
    return max(600, min(4000, window_or_default(window) // 8))


def path_of(session_dir: Path | str) -> Path:
    return Path(session_dir) / FILENAME


def latest(branch: Sequence[Entry]) -> CustomEntry | None:
    """The newest `checkpoint` entry (its watermark) on the branch."""
    found = custom_entries(branch, "checkpoint")
    return found[-1] if found else None


def read(session: SessionLog) -> tuple[str, dict[str, Any]] | None:
    """(text, the watermark entry's data) of the session's checkpoint, or None. The text
    is the file's only when it is the one the watermark confirmed (its sha256)."""
    entry = latest(session.branch())
    root = getattr(session, "dir", None)
    if entry is None or root is None or not isinstance(entry.data, dict):
        return None
    try:
        data = safeio.read_bytes(Path(root), FILENAME)
    except OSError:
        return None
    if hashlib.sha256(data).hexdigest() != entry.data.get("sha256"):
        return None
    return data.decode("utf-8", errors="replace"), dict(entry.data)


def reply(session: SessionLog) -> dict[str, Any] | None:
    """What the kernel's `history.checkpoint()` gets: the confirmed text, the last entry
    it covers, its size; None before the first one."""
    found = read(session)
    if found is None:
        return None
    text, data = found
    return {"text": text, "watermark": data.get("watermark"), "tokens": data.get("tokens"),
            "entries": data.get("entries")}


def validate(text: str, budget: int) -> str | None:
    """What is wrong with a reply as a checkpoint, or None."""
    at = -1
    for name in SECTIONS:
        m = re.search(rf"^##\s*{re.escape(name)}\s*$", text, re.MULTILINE | re.IGNORECASE)
        if m is None:
            return f"the section '## {name}' is missing"
        if m.start() < at:
            return f"the section '## {name}' is out of order"
        at = m.start()
    n = count_text(text)
    return f"it is {n} tokens, over the {budget}-token budget" if n > budget else None


def _prompt(name: str) -> str:
    return (files("rlm") / "prompts" / f"checkpoint_{name}.md").read_text("utf-8").rstrip()


def _request(previous: str | None, conversation: str, budget: int) -> str:
    headings = "\n".join(f"## {s}" for s in SECTIONS)
    return (f"<previous-checkpoint>\n{previous or '(none yet)'}\n</previous-checkpoint>\n\n"
            f"<conversation>\n{conversation}\n</conversation>\n\n"
            + _prompt("write").replace("{headings}", headings).replace("{budget}", str(budget)))


def _conversation(entries: Sequence[Entry], window: int | None, budget: int) -> str:
    """The conversation as the writer reads it: its newest part that fits the writer's
    window beside the previous checkpoint, the new one and the instructions (counted)."""
    text = serialize_entries(entries)
    room = max(500, window_or_default(window) - 2 * budget - 1500)  # tokens
    tail = tail_within(text, room)
    if len(tail) < len(text):
        tail = f"[... the first {len(text) - len(tail)} characters elided ...]\n" + tail
    return tail


@dataclass
class Draft:
    """A validated checkpoint not yet on disk (`confirm` writes it), or why there is none."""

    text: str | None
    upto: str
    entries: int = 0
    attempts: int = 0
    problem: str | None = None  # None with no text: nothing new to cover
    exchange: list[dict[str, Any]] = field(default_factory=list)  # the writer's messages


def draft(session: SessionLog, llm: LLM, upto: str, budget: int) -> Draft:
    """Ask `llm` to update the checkpoint with the entries after the last watermark up to
    `upto` (an entry id on the branch); a reply that fails `validate` is asked again."""
    branch = session.branch()
    ids = [e.id for e in branch]
    if upto not in ids:
        return Draft(None, upto, problem=f"entry {upto} is no longer on the branch")
    end = ids.index(upto)
    last = latest(branch[: end + 1])
    mark = last.data.get("watermark") if last is not None and isinstance(last.data, dict) else None
    covered = branch[(ids.index(mark) + 1 if mark in ids else 0): end + 1]
    if not serialize_entries(covered).strip():
        return Draft(None, upto)
    found = read(session)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": _prompt("system")},
        {"role": "user", "content": _request(found[0] if found else None,
                                             _conversation(covered, llm.context_window(), budget),
                                             budget)},
    ]
    problem = "no reply"
    for attempt in range(1, ATTEMPTS + 1):
        text = llm.complete(messages, tools=[], max_tokens=budget + budget // 4).content.strip()
        messages.append({"role": "assistant", "content": text})
        problem = validate(text, budget) or ""
        if not problem:
            return Draft(text, upto, len(covered), attempt, exchange=messages)
        if attempt < ATTEMPTS:
            messages.append({"role": "user", "content": f"That checkpoint was refused: {problem}. "
                                                        "Write it again, whole, in the format "
                                                        "given."})
    return Draft(None, upto, len(covered), ATTEMPTS,
                 f"{ATTEMPTS} replies were refused, the last because {problem}", exchange=messages)


def confirm(session: SessionLog, d: Draft, writer_log: str | None = None) -> CustomEntry:
    """Write the file whole, then append the watermark: never the other way round.
    `writer_log`: where the writer's prompt and replies are kept (`record`)."""
    assert d.text is not None
    # what the model wrote came from the redacted log; a key it made up or recalled is
    # masked too (Keys never land in checkpoints), so the file matches its watermark
    data = (redact_text(d.text, known_secrets()) + "\n").encode("utf-8")
    entry = CustomEntry(custom_type="checkpoint", display=False, content=None, data={
        "watermark": d.upto, "sha256": hashlib.sha256(data).hexdigest(),
        "tokens": count_text(d.text), "entries": d.entries, "attempts": d.attempts,
        **({"writer_log": writer_log} if writer_log else {})})
    assert session.dir is not None  # the writer runs only for a session on disk
    write_private_atomic(path_of(session.dir), data)
    session.append(entry)
    return entry


WRITER_DIR = "children/checkpoint"  # the writer's own session, under the parent's


def record(log: SessionLog, d: Draft) -> str | None:
    """Append the writing's exchange (the request, each reply, each refusal) to the
    writer's own session `log`; its last entry's id, or None when there was none."""
    last = None
    for m in d.exchange:
        if m["role"] == "system":
            continue
        entry = MessageEntry(message={"role": m["role"], "content": m["content"]})
        log.append(entry)
        last = entry.id
    return last


WAIT_POLL_S = 0.1  # how soon a wait for the writer sees Ctrl-C


class CheckpointWriter:
    """One background writer per session (see the module doc). `log`: opens the writer's
    own session (the composition root's; None keeps no exchange)."""

    def __init__(self, session: SessionLog, llm: Callable[[], LLM], budget: int,
                 fractions: Sequence[float] = (), log: Callable[[], SessionLog] | None = None):
        self.session = session
        self._llm = llm
        self._log_factory = log
        self._log: SessionLog | None = None
        self.budget = budget
        self.fractions = tuple(fractions)  # of the window: `rungs_for` makes them tokens
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._crossed: set[int] = set()
        self._fill: str | None = None  # the latest compaction when the rungs were crossed
        self.closed = False
        self.written: list[CustomEntry] = []
        self.problems: list[str] = []
        self._told = 0  # problems said on screen (take_problem)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def automatic(self) -> bool:
        """Rungs are set: it writes as the context fills, and a relief with no checkpoint
        to rebuild from starts one (rlm.compaction.rebuild.from_checkpoint)."""
        return bool(self.fractions)

    def check(self, tokens: int, rungs: Sequence[int]) -> bool:
        """After a turn: start a writer when the context crossed a rung and none runs."""
        if not rungs or self.session.dir is None:
            return False
        branch = self.session.branch()
        at = latest_compaction_index(branch)
        fill = branch[at].id if at >= 0 else None
        if tokens < rungs[0] or fill != self._fill:
            # relieved, or compacted (a summary, a rebuild: a checkpoint from before it no
            # longer serves one): the next fill crosses the rungs again
            self._crossed.clear()
            self._fill = fill
        if tokens < rungs[0]:
            return False
        due = {r for r in rungs if tokens >= r} - self._crossed
        if not due:
            return False
        started = self.start()  # a rung crossed while one runs waits for the next check
        if started:
            self._crossed |= due
        return started

    def start(self) -> bool:
        """Start a writing that covers the log up to its leaf now, unless one runs, the
        writer is closed, or the log is in memory; True when it started."""
        with self._lock:
            if self.closed or self.running or self.session.dir is None:
                return False
            upto = self.session.branch()[-1].id
            self._thread = threading.Thread(target=self._run, args=(upto,),
                                            name="rlm-checkpoint", daemon=True)
            self._thread.start()
        return True

    def _run(self, upto: str) -> None:
        try:
            d = draft(self.session, self._llm(), upto, self.budget)
        except Exception as e:  # noqa: BLE001 - a failed writer keeps the old watermark
            d = Draft(None, upto, problem=f"{type(e).__name__}: {e}")
        with self._lock:  # close() waits for the file and the watermark, or drops both
            if self.closed:
                return
            try:
                where = self._record(d)
                if d.text is not None:
                    self.written.append(confirm(self.session, d, where))
            except OSError as e:  # a full disk: the old file and watermark stand
                d.problem = f"the checkpoint could not be written: {e}"
            if d.problem:
                self.problems.append(d.problem)
                self.session.append(CustomEntry(
                    custom_type="checkpoint_outcome", display=True, content=None,
                    data={"written": False, "reason": d.problem}))

    def _record(self, d: Draft) -> str | None:
        """Keep the exchange in the writer's own session; where it is ("PATH#ENTRY"), or
        None. A log that cannot be written does not stop the checkpoint."""
        if self._log_factory is None or not d.exchange:
            return None
        try:
            if self._log is None:
                self._log = self._log_factory()
            last = record(self._log, d)
        except (OSError, RlmError):
            return None
        return f"{WRITER_DIR}#{last}" if last else None

    def take_problem(self) -> str | None:
        """The newest failed writing not yet said (the terminal says it once)."""
        if self._told >= len(self.problems):
            return None
        self._told = len(self.problems)
        return self.problems[-1]

    def wait(self, timeout: float | None = None,
             cancelled: Callable[[], bool] | None = None) -> bool:
        """Wait for a running writer; True when none runs (any more). `cancelled`: looked
        at every WAIT_POLL_S; once true the wait ends at once (Ctrl-C)."""
        t = self._thread
        if t is not None:
            end = None if timeout is None else time.monotonic() + timeout
            while t.is_alive() and not (cancelled is not None and cancelled()):
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    break
                t.join(WAIT_POLL_S if left is None else min(WAIT_POLL_S, left))
        return not self.running

    def close(self) -> None:
        """The run ends: what a running writer finishes is dropped (its model call is not
        cancelled; its thread is a daemon)."""
        with self._lock:
            self.closed = True
            if self._log is not None:  # the writer's own session: nothing more reaches it
                self._log.close()
                self._log = None
