"""Tiers 1 and 2 of context relief: prune and shake, pure decisions, no model call.

oh-my-pi's `compaction/pruning.ts` and `shake.ts`, translated to cells and their results.
The input is a branch (root -> leaf session entries); the output is a list of
`Replacement`s (entry id -> the one-line text the model sees instead of the result). The
caller (rlm.compaction.ladder) records them as one `context_relief` custom entry, and the
projection (rlm.session.context) applies every such record on the branch, so a resumed
session projects the same messages and an export shows what was replaced.

Tier 1, prune:
- superseded: a successful cell result whose every bound name (the kernel's record of what
  the cell bound, `CellResult.binds`, without loop variables: rlm.kernel.binds) was rebound
  by a later successful cell becomes `[superseded by cell N]`; so does one that read files (what the
  audit hook saw, kernel_ext.fileops, recorded per cell as `files_read`) all read again by
  later successful cells, when it bound nothing still live;
- uneventful: an error result whose final error line is repeated by a later result (the
  same traceback again) becomes `[uneventful result elided]`; only when it saves tokens.
- cache-aware (pruning.ts): a candidate is pruned only when the messages after it total at
  most `warm_suffix_tokens` (the cheap tail of the provider's cached prefix), or when the
  context has been idle for `idle_flush_s` (the cache is cold: everything may go at once).

Tier 2, shake: whole cell results older than the protected recent window become a
placeholder naming `history.cell(N)`, which returns the full text from the kernel; so does
the fenced code of a model that writes its cells in its text (`local`): each block of at
least CODE_MIN_TOKENS in an assistant message becomes `[code of cell N shaken out ...]`,
its prose kept ("code shaken"; a model with native tools keeps its code in its calls,
which are never touched).
Automatic: only results with `protect_recent_tokens` of context after them, and only when
the total saved reaches `min_savings_tokens`; manual (`/shake`, `compact.shake()`): all it
can, keeping a small recent tail.

Protected: only `tool` (cell result) messages and fenced code in assistant text are ever
replaced, never context variables,
a goal, the project memory or any other custom entry; a cell whose code carries the marker
`# rlm: keep` is never replaced either; `protected_markers` makes that configurable.
Entries before the latest summary's first kept entry are not sent: they are skipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rlm.kernel.binds import kept_names
from rlm.session.context import RELIEF_CUSTOM, relief_replacements
from rlm.session.entries import CompactionEntry, CustomEntry, Entry, MessageEntry, call_code

SUPERSEDED = "[superseded by cell {n}: its names were all rebound there; history.cell({k}) has this output]"
REREAD = ("[superseded by cell {n}: it read the same file again; history.cell({k}) has "
          "this output]")
UNEVENTFUL = "[uneventful result elided: the same error was raised again later; history.cell({k}) has it]"
SHAKEN = ("[output of cell {k} shaken out of the context (~{tokens} tokens); "
          "history.cell({k}) returns it in full]")
CODE_SHAKEN = ("[code of cell {k} shaken out of the context (~{tokens} tokens); "
               "history.cell({k}) returns it]")
KEEP_MARKER = "# rlm: keep"
CODE_MIN_TOKENS = 40  # a shorter cell tells what was done for less than a placeholder saves

# oh-my-pi's figures for a ~200k window, kept as fractions of the model's window
PROTECT_FRACTION = 16_000 / 200_000
MIN_SAVINGS_FRACTION = 4_000 / 200_000
WARM_SUFFIX_FRACTION = 8_000 / 200_000
MANUAL_PROTECT_FRACTION = 4_000 / 200_000
IDLE_FLUSH_S = 30 * 60.0  # longer than a provider's cache retention (pruning.ts)


@dataclass(frozen=True)
class TierSettings:
    enabled: bool = True
    protect_recent_tokens: int = 16_000
    min_savings_tokens: int = 4_000
    warm_suffix_tokens: int = 8_000
    manual_protect_tokens: int = 4_000
    idle_flush_s: float = IDLE_FLUSH_S
    protected_markers: tuple[str, ...] = (KEEP_MARKER,)

    @classmethod
    def for_window(cls, window: int | None, *, enabled: bool = True) -> TierSettings:
        """oh-my-pi's figures scaled to `window` (unchanged without one)."""
        if not window or window <= 0:
            return cls(enabled=enabled)
        return cls(
            enabled=enabled,
            protect_recent_tokens=max(1, int(window * PROTECT_FRACTION)),
            min_savings_tokens=max(1, int(window * MIN_SAVINGS_FRACTION)),
            warm_suffix_tokens=max(1, int(window * WARM_SUFFIX_FRACTION)),
            manual_protect_tokens=max(1, int(window * MANUAL_PROTECT_FRACTION)),
        )


@dataclass(frozen=True)
class Replacement:
    entry_id: str
    text: str
    reason: str  # superseded | uneventful | shaken
    cell: int | None
    tokens_saved: int

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.entry_id, "text": self.text, "reason": self.reason,
                "cell": self.cell, "tokens_saved": self.tokens_saved}


@dataclass
class _Result:
    """One cell result in the sent part of the branch."""

    index: int
    entry: MessageEntry
    cell: int | None
    code: str
    ok: bool
    tokens: int
    suffix_tokens: int  # tokens of everything projected after it
    binds: frozenset[str] = field(default_factory=frozenset)


# ---------------------------------------------------------------- reading the branch


def replaced_ids(branch: Sequence[Entry]) -> dict[str, str]:
    """entry id -> replacement text, over every relief record on the branch."""
    return relief_replacements(list(branch))


def _sent_start(branch: Sequence[Entry]) -> int:
    """Index of the first entry the projection sends (after the latest summary's cut)."""
    at = next((i for i in range(len(branch) - 1, -1, -1)
               if isinstance(branch[i], CompactionEntry)), None)
    if at is None:
        return 0
    comp = branch[at]
    assert isinstance(comp, CompactionEntry)
    for i in range(at - 1, -1, -1):
        if branch[i].id == comp.first_kept_entry_id:
            return i
    return at + 1


def _tokens(text: str) -> int:
    from rlm.llm.tokens import count_text

    return count_text(text)


def _entry_tokens(e: Entry, replaced: dict[str, str]) -> int:
    from rlm.compaction.plan import entry_tokens

    if e.id in replaced:
        return _tokens(replaced[e.id])
    return entry_tokens(e)


def _entry_tokens_of_text(e: MessageEntry, text: str) -> int:
    """The tokens of assistant message `e` with its text replaced (its calls kept: they
    count in the log's measure though a fenced projection shows them as this text)."""
    from rlm.compaction.plan import entry_tokens

    return entry_tokens(MessageEntry(message={**e.message, "content": text}))


def _codes_by_call(branch: Sequence[Entry]) -> dict[str, str]:
    out: dict[str, str] = {}
    for e in branch:
        if isinstance(e, MessageEntry) and e.role == "assistant":
            for c in e.message.get("tool_calls") or []:
                if isinstance(c, dict):
                    out[str(c.get("id", ""))] = call_code(c) or ""
    return out


def cell_results(branch: Sequence[Entry], replaced: dict[str, str] | None = None) -> list[_Result]:
    """The sent cell results not replaced yet, oldest first, with their suffix tokens."""
    replaced = replaced_ids(branch) if replaced is None else replaced
    codes = _codes_by_call(branch)
    out: list[_Result] = []
    for i, e, tokens, suffix in _newest_first(branch, replaced):
        if (isinstance(e, MessageEntry) and e.role == "tool" and not e.error
                and e.id not in replaced):
            cell = e.cell or {}
            code = codes.get(str(e.message.get("tool_call_id", "")), "")
            out.append(_Result(i, e, cell.get("execution_count"), code,
                               cell.get("status", "ok") == "ok", tokens, suffix,
                               _binds(cell)))
    out.reverse()
    return out


def _binds(cell: dict[str, Any]) -> frozenset[str]:
    """The names the cell bound, as its result recorded them (CellResult.binds: the
    kernel's word; a log from before them, or a kernel without kernel_ext: none)."""
    names = cell.get("binds")
    return frozenset(n for n in names if isinstance(n, str)) if isinstance(names, list) \
        else frozenset()


def _newest_first(branch: Sequence[Entry],
                  replaced: dict[str, str]) -> Iterator[tuple[int, Entry, int, int]]:
    """(index, entry, its tokens, the tokens projected after it) over the sent part of
    the branch, newest first."""
    suffix = 0
    for i in range(len(branch) - 1, _sent_start(branch) - 1, -1):
        tokens = _entry_tokens(branch[i], replaced)
        yield i, branch[i], tokens, suffix
        suffix += tokens


@dataclass
class _Code:
    """An assistant message whose text holds its cells' fenced code (a fenced-code model)."""

    entry: MessageEntry
    text: str  # the text with each long block replaced by its placeholder
    tokens: int
    suffix_tokens: int
    cells: list[int]


def _cells_by_call(branch: Sequence[Entry]) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in branch:
        if isinstance(e, MessageEntry) and e.role == "tool" and e.cell:
            n = e.cell.get("execution_count")
            if isinstance(n, int):
                out[str(e.message.get("tool_call_id", ""))] = n
    return out


def fenced_code(branch: Sequence[Entry], settings: TierSettings,
                replaced: dict[str, str] | None = None) -> list[_Code]:
    """The sent assistant messages whose text holds the fenced code of cells that ran, each
    block of at least CODE_MIN_TOKENS replaced by a placeholder, oldest first. A model with
    native tools keeps its code in its calls: none of its messages is here."""
    replaced = replaced_ids(branch) if replaced is None else replaced
    cells = _cells_by_call(branch)
    out: list[_Code] = []
    for _, e, tokens, suffix in _newest_first(branch, replaced):
        if (isinstance(e, MessageEntry) and e.role == "assistant" and not e.error
                and e.id not in replaced and isinstance(e.message.get("content"), str)):
            text, ran = e.message["content"], []
            for c in e.message.get("tool_calls") or []:
                code = call_code(c) if isinstance(c, dict) else None
                cell = cells.get(str(c.get("id", ""))) if isinstance(c, dict) else None
                block = _block_of(text, code) if code is not None else None
                if (code is None or cell is None or block is None
                        or any(m in code for m in settings.protected_markers)):
                    continue
                size = _tokens(code)
                if size >= CODE_MIN_TOKENS:
                    text = text.replace(block, CODE_SHAKEN.format(k=cell, tokens=size), 1)
                    ran.append(cell)
            if ran:
                out.append(_Code(e, text, tokens, suffix, ran))
    out.reverse()
    return out


_FENCE = re.compile(r"```[A-Za-z0-9_+-]*[ \t]*\n(.*?)```", re.DOTALL)


def _block_of(text: str, code: str) -> str | None:
    """The fenced block of `text` whose body is `code` (as the parser took it), or None."""
    want = code.strip()
    return next((m.group(0) for m in _FENCE.finditer(text) if m.group(1).strip() == want), None)


def _protected(r: _Result, settings: TierSettings) -> bool:
    return any(m in r.code for m in settings.protected_markers)


def _label(r: _Result) -> str:
    return str(r.cell) if r.cell is not None else "?"


# ---------------------------------------------------------------- tier 1: prune


def plan_prune(branch: Sequence[Entry], settings: TierSettings, *,
               now: datetime | None = None, everywhere: bool = False) -> list[Replacement]:
    """Superseded and uneventful results in the cheap tail (or all of them when the cache
    is cold: idle since `now`, or `everywhere` for a manual `/shake`)."""
    results = cell_results(branch)
    for r in results:
        r.binds = kept_names(r.binds, r.code) if r.ok and r.code else frozenset()
    out: list[Replacement] = []
    rebound: dict[str, int | None] = {}  # name -> the newest later successful cell binding it
    reread: dict[str, int | None] = {}  # file -> the newest later successful cell reading it
    errors_after: set[str] = set()
    for r in reversed(results):
        rep = None
        files = _files_read(r)
        if not _protected(r, settings):
            if r.ok and r.binds and all(n in rebound for n in r.binds):
                by = max((rebound[n] or 0) for n in r.binds)
                rep = (SUPERSEDED.format(n=by or "?", k=_label(r)), "superseded")
            elif (r.ok and files and all(f in reread for f in files)
                  and all(n in rebound for n in r.binds)):
                by = max((reread[f] or 0) for f in files)
                rep = (REREAD.format(n=by or "?", k=_label(r)), "superseded")
            elif not r.ok and (line := _error_line(r.entry)) and line in errors_after:
                rep = (UNEVENTFUL.format(k=_label(r)), "uneventful")
        if rep is not None:
            saved = r.tokens - _tokens(rep[0])
            if saved > 0:
                out.append(Replacement(r.entry.id, rep[0], rep[1], r.cell, saved))
        if r.ok:
            for n in r.binds:
                rebound.setdefault(n, r.cell)
            for f in files:
                reread.setdefault(f, r.cell)
        elif (line := _error_line(r.entry)):
            errors_after.add(line)
    out.reverse()
    if everywhere or _idle(branch, settings, now):
        return out
    suffix = {r.entry.id: r.suffix_tokens for r in results}
    return [x for x in out if suffix[x.entry_id] <= settings.warm_suffix_tokens]


def _files_read(r: _Result) -> list[str]:
    """The files the audit hook saw the cell read (kernel_ext.fileops, per cell)."""
    files = (r.entry.cell or {}).get("files_read") if r.ok else None
    return [f for f in files if isinstance(f, str)] if isinstance(files, list) else []


def _error_line(e: MessageEntry) -> str | None:
    text = str(e.message.get("content") or "")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        head = ln.split(":", 1)[0]
        if head.endswith(("Error", "Exception")) and " " not in head:
            return ln
    return None


def _idle(branch: Sequence[Entry], settings: TierSettings, now: datetime | None) -> bool:
    if now is None:
        return False
    last = next((e for e in reversed(branch) if isinstance(e, MessageEntry)), None)
    if last is None:
        return False
    try:
        then = datetime.fromisoformat(last.timestamp)
    except ValueError:
        return False
    return (now - then).total_seconds() >= settings.idle_flush_s


# ---------------------------------------------------------------- tier 2: shake


def plan_shake(branch: Sequence[Entry], settings: TierSettings, *,
               manual: bool = False) -> list[Replacement]:
    """Whole cell results beyond the protected recent window become placeholders, and so
    does the long fenced code of older replies (a fenced-code model)."""
    protect = settings.manual_protect_tokens if manual else settings.protect_recent_tokens
    replaced = replaced_ids(branch)  # read once for both kinds
    out: list[Replacement] = []
    for r in cell_results(branch, replaced):
        if r.suffix_tokens < protect or _protected(r, settings):
            continue
        text = SHAKEN.format(k=_label(r), tokens=r.tokens)
        saved = r.tokens - _tokens(text)
        if saved > 0:
            out.append(Replacement(r.entry.id, text, "shaken", r.cell, saved))
    for c in fenced_code(branch, settings, replaced):
        saved = c.tokens - _entry_tokens_of_text(c.entry, c.text)
        if c.suffix_tokens >= protect and saved > 0:
            out.append(Replacement(c.entry.id, c.text, "code shaken", c.cells[0], saved))
    if not manual and sum(x.tokens_saved for x in out) < settings.min_savings_tokens:
        return []
    return out


def relief_entry(tier: str, trigger: str, replacements: list[Replacement],
                 tokens_before: int, tokens_after: int) -> CustomEntry:
    """The record of one tier's decision (display: shown by `rlm log`, never sent)."""
    return CustomEntry(
        custom_type=RELIEF_CUSTOM,
        data={"tier": tier, "trigger": trigger, "tokens_before": tokens_before,
              "tokens_after": tokens_after,
              "tokens_saved": sum(r.tokens_saved for r in replacements),
              "replaced": [r.to_dict() for r in replacements]},
        display=True,
        content=None,
    )


def relief_line(entry: Entry) -> str:
    """One line for a relief record (`rlm log`, the chat's notice)."""
    data = entry.data if isinstance(entry, CustomEntry) and isinstance(entry.data, dict) else {}
    reasons: dict[str, int] = {}
    for r in data.get("replaced", []):
        reasons[str(r.get("reason"))] = reasons.get(str(r.get("reason")), 0) + 1
    what = ", ".join(f"{n} {k}" for k, n in sorted(reasons.items())) or "nothing"
    return (f"context {data.get('tier', 'relief')} ({data.get('trigger', '?')}): {what}; "
            f"{data.get('tokens_before', '?')} -> {data.get('tokens_after', '?')} tokens")
