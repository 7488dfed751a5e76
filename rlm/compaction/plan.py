"""Pure compaction planning: when to compact, where to cut, what to summarise.

Nothing here touches the network, the kernel or the session file. The input is a branch
(root -> leaf list of session entries); the output is a `Preparation` (or a `Skip` that
says why there is nothing to do). `summarize.py` makes the one LLM call; `core.py` appends
the entries.

Rules (Prime's design on pi's skeleton):
- Rolling: the region starts at the previous compaction's `first_kept_entry_id`, so the
  survivors of the last compaction are re-distilled together with the previous summary.
- Cut point: walk back from the newest entry, accumulating tokens until `keep_recent`;
  only user / assistant messages, model-visible custom entries and branch summaries are
  valid cut points, never a `tool` (cell result) message: a result stays with its call.
- Split turn: when the cut is not at a turn start, the turn's prefix is summarised apart
  from the history before it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlm.config import Config
from rlm.errors import ConfigError
from rlm.session.branch import Branch, latest_compaction
from rlm.session.context import (
    BRANCH_SUMMARY_PREFIX,
    PINNED_CUSTOM,
    RELIEF_CUSTOM,
    SUPERSEDED_CUSTOM,
    build_messages,
    summary_message,
)
from rlm.session.entries import (
    BranchSummaryEntry,
    CompactionEntry,
    CustomEntry,
    Entry,
    MessageEntry,
)

TOOL_RESULT_MAX_CHARS = 2000
# a context entry (a notebook import, a heartbeat) is input, not output: more of it is kept
CONTEXT_MAX_CHARS = 6000
# SUPERSEDED_CUSTOM: custom entries whose content is superseded by the fresh notice written
# after compaction (only the newest is projected; none is summarised)

DEFAULT_RESERVE_TOKENS = 16_384
DEFAULT_KEEP_RECENT_TOKENS = 20_000
MIN_RESERVE_FRACTION = 0.15  # pi / oh-my-pi: the reserve is at least 15% of the window
SCALED_FRACTION = 4  # a scaled default is at most 1/4 of the window
Projection = Callable[[Sequence[Entry]], list[dict[str, Any]]]


@dataclass
class CompactionSettings:
    """Reserve and keep-recent in tokens. Fields named in `auto` were not set by the user:
    `effective_settings` scales them to the model's window (see there)."""

    enabled: bool = True
    reserve_tokens: int = DEFAULT_RESERVE_TOKENS
    keep_recent_tokens: int = DEFAULT_KEEP_RECENT_TOKENS
    auto: frozenset[str] = frozenset()

    @classmethod
    def from_config(cls, config: Config) -> CompactionSettings:
        """Config values left at None (no flag, no TOML key) become scaled defaults."""
        auto = {
            name
            for name in ("reserve_tokens", "keep_recent_tokens")
            if getattr(config, name) is None
        }
        return cls(
            enabled=config.compaction_enabled,
            reserve_tokens=config.reserve_tokens or DEFAULT_RESERVE_TOKENS,
            keep_recent_tokens=config.keep_recent_tokens or DEFAULT_KEEP_RECENT_TOKENS,
            auto=frozenset(auto),
        )


@dataclass(frozen=True)
class EffectiveSettings:
    """The settings compaction runs with on a given window (what `rlm run --json` shows)."""

    window: int | None
    enabled: bool
    reserve_tokens: int
    keep_recent_tokens: int
    scaled: tuple[str, ...] = ()  # the defaults that were scaled to the window

    @property
    def threshold(self) -> int | None:
        """Compaction fires when the context exceeds this many tokens (None: never)."""
        if not self.enabled or not self.window or self.window <= 0:
            return None
        return self.window - self.reserve_tokens

    @property
    def settings(self) -> CompactionSettings:
        return CompactionSettings(self.enabled, self.reserve_tokens, self.keep_recent_tokens)

    def to_dict(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "window": self.window,
            "threshold": self.threshold,
            "reserve_tokens": self.reserve_tokens,
            "keep_recent_tokens": self.keep_recent_tokens,
            "scaled": list(self.scaled),
        }


def scaled_reserve(window: int) -> int:
    """Default reserve: Prime's 16,384 where the window allows it, never under 15% of the
    window and never over a quarter of a small window (16,384 exceeds the local 8,192)."""
    return max(math.ceil(MIN_RESERVE_FRACTION * window),
               min(DEFAULT_RESERVE_TOKENS, window // SCALED_FRACTION))


def scaled_keep_recent(window: int, reserve: int) -> int:
    """Default keep-recent: 20,000, at most a quarter of the window, and small enough that
    the kept turns plus a summary of up to `reserve` tokens land below the threshold."""
    room = (window - 2 * reserve) // 2
    return max(1, min(DEFAULT_KEEP_RECENT_TOKENS, window // SCALED_FRACTION, room))


def effective_settings(
    source: Config | CompactionSettings, window: int | None, *, strict: bool = True
) -> EffectiveSettings:
    """Settings scaled to `window`: defaults shrink to fit it, values the user set are kept.

    strict: an impossible user setting (keep-recent + reserve >= window) raises ConfigError
    naming the setting to change; otherwise the values are used as given.
    """
    s = source if isinstance(source, CompactionSettings) else CompactionSettings.from_config(source)
    if not window or window <= 0:
        return EffectiveSettings(window, s.enabled, s.reserve_tokens, s.keep_recent_tokens)
    scaled: list[str] = []
    reserve, keep = s.reserve_tokens, s.keep_recent_tokens
    if "reserve_tokens" in s.auto:
        reserve = scaled_reserve(window)
        if "keep_recent_tokens" not in s.auto and keep + reserve >= window:
            reserve = math.ceil(MIN_RESERVE_FRACTION * window)  # make room for the user's keep
        scaled.append("reserve_tokens")
    if "keep_recent_tokens" in s.auto:
        keep = scaled_keep_recent(window, reserve)
        scaled.append("keep_recent_tokens")
    if strict and s.enabled and keep + reserve >= window:
        raise ConfigError(_impossible(window, reserve, keep, s.auto))
    return EffectiveSettings(window, s.enabled, reserve, keep, tuple(scaled))


def _impossible(window: int, reserve: int, keep: int, auto: frozenset[str]) -> str:
    if "reserve_tokens" in auto:
        fix = f"lower --keep-recent-tokens (keep_recent_tokens = {keep}) below {window - reserve}"
    elif "keep_recent_tokens" in auto:
        fix = f"lower --reserve-tokens (reserve_tokens = {reserve}) below {window - keep}"
    else:
        fix = "lower --keep-recent-tokens or --reserve-tokens, or leave them unset to scale them"
    return (
        f"keep_recent_tokens ({keep}) + reserve_tokens ({reserve}) do not fit the model's "
        f"{window}-token context window: {fix} (or raise --context-window if the window is wrong)"
    )


@dataclass
class Preparation:
    """What one compaction will summarise and keep."""

    first_kept_entry_id: str
    history: list[Entry]  # summarised and dropped from the context
    turn_prefix: list[Entry]  # split turn: the start of the turn whose end is kept
    is_split_turn: bool
    tokens_before: int
    previous_summary: str | None
    read_files: list[str] = field(default_factory=list)
    modified_files: list[str] = field(default_factory=list)

    @property
    def history_text(self) -> str:
        return serialize_entries(self.history)

    @property
    def prefix_text(self) -> str:
        return serialize_entries(self.turn_prefix)


@dataclass
class Skip:
    reason: str


# ---------------------------------------------------------------- accounting


def should_compact(context_tokens: int, window: int | None, settings: CompactionSettings) -> bool:
    """True when the context no longer leaves `reserve_tokens` free in the window."""
    if not settings.enabled or not window or window <= 0:
        return False
    return context_tokens > window - settings.reserve_tokens


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, dict):
                parts.append(f"[{part.get('type', 'part')}]")
        return "\n".join(parts)
    return "" if content is None else str(content)


def is_normal_assistant(entry: Entry) -> bool:
    return isinstance(entry, MessageEntry) and entry.role == "assistant" and not entry.error


def entry_message(entry: Entry) -> dict[str, Any] | None:
    """The chat message an entry costs in the prompt (None: it never reaches the model).

    Mirrors the projection in rlm.session.context closely enough for token accounting.
    """
    if isinstance(entry, MessageEntry):
        return None if entry.error else entry.message
    if isinstance(entry, CompactionEntry):
        return summary_message(entry.summary)
    if isinstance(entry, BranchSummaryEntry):
        return {"role": "user", "content": f"{BRANCH_SUMMARY_PREFIX}\n\n<branch_summary>\n{entry.summary}\n</branch_summary>"}
    if isinstance(entry, CustomEntry) and entry.content is not None:
        return {"role": "user", "content": entry.content}
    return None


def entry_tokens(entry: Entry) -> int:
    msg = entry_message(entry)
    if msg is None:
        return 0
    from rlm.llm.tokens import count_message

    return count_message(msg)


def latest_compaction_index(branch: Sequence[Entry]) -> int:
    return latest_compaction(branch)  # a long session's Branch knows it without reading


def latest_relief_index(branch: Sequence[Entry]) -> int:
    """The latest entry that changed what is projected before it: a compaction or a
    tier's relief record (usage reported before it no longer describes the context)."""
    if isinstance(branch, Branch):  # from its index, no entry read
        return max(branch.latest_compaction(), branch.latest_of(RELIEF_CUSTOM))
    for i in range(len(branch) - 1, -1, -1):
        e = branch[i]
        if isinstance(e, CompactionEntry) or (
                isinstance(e, CustomEntry) and e.custom_type == RELIEF_CUSTOM):
            return i
    return -1


def _index_of(branch: Sequence[Entry], entry_id: str | None, default: int) -> int:
    if entry_id is None:
        return default
    for i in range(len(branch) - 1, -1, -1):  # ids are unique; the newest end is read
        if branch[i].id == entry_id:
            return i
    return default


def context_status(branch: Sequence[Entry], projection: Projection | None,
                   eff: EffectiveSettings, *, scheduled: bool) -> dict[str, Any]:
    """What `compact.status()` tells a cell: usage vs window and the last compaction."""
    tokens = context_tokens(branch, projection)
    window = eff.window
    c = latest_compaction_index(branch)
    last = None
    if c >= 0:
        e = branch[c]
        assert isinstance(e, CompactionEntry)
        last = {"id": e.id, "timestamp": e.timestamp, "trigger": e.trigger,
                "tokens_before": e.tokens_before, "first_kept_entry_id": e.first_kept_entry_id}
    return {
        "tokens": tokens,
        "context_window": window,
        "percent": round(100.0 * tokens / window, 1) if window else None,
        "threshold": eff.threshold,
        "reserve_tokens": eff.reserve_tokens,
        "keep_recent_tokens": eff.keep_recent_tokens,
        "scheduled": scheduled,
        "last_compaction": last,
    }


def first_kept_index(branch: Sequence[Entry], compaction: int) -> int:
    """Where the projection starts after the compaction at index `compaction` (-1: none)."""
    if compaction < 0:
        return 0
    first = getattr(branch[compaction], "first_kept_entry_id", None)
    return _index_of(branch, first, compaction + 1)


def default_projection(branch: Sequence[Entry]) -> list[dict[str, Any]]:
    """The messages the model sees for `branch`, without a system prompt."""
    return build_messages(branch, system_prompt="", native_tools=True)[1:]


def _count(messages: list[dict[str, Any]]) -> int:
    """What a prompt of `messages` costs, as the model call counts it (the reply priming
    included: rlm.llm.tokens.count_messages)."""
    from rlm.llm.tokens import count_messages

    return count_messages(messages)


def context_tokens(branch: Sequence[Entry], project: Projection | None = None) -> int:
    """Tokens the next prompt costs, counted on what is actually projected.

    `project` is the projection the loop sends (rlm.session.context.build_messages with its
    system prompt and tool mode); by default native tools and no system prompt. The latest
    normal assistant message's usage (input + output), if it is newer than the latest
    compaction, plus the count of what the projection added after it; floored by the
    count of the whole projection, so an under-reporting provider cannot let the history
    grow unbounded.
    """
    project = project or default_projection
    local = _count(project(branch))
    c = latest_compaction_index(branch)
    for i in range(len(branch) - 1, c, -1):
        e = branch[i]
        if isinstance(e, MessageEntry) and is_normal_assistant(e) and e.usage:
            u = e.usage
            reported = int(u.get("input_tokens", 0)) + int(u.get("output_tokens", 0))
            # what was projected since (negative when a tier replaced results after it)
            trailing = local - _count(project(branch[: i + 1]))
            return max(reported + trailing, local)
    return local


# ---------------------------------------------------------------- cut point


def _is_turn_start(entry: Entry) -> bool:
    if isinstance(entry, MessageEntry):
        return entry.role == "user" and not entry.error
    if isinstance(entry, BranchSummaryEntry):
        return True
    return isinstance(entry, CustomEntry) and entry.content is not None


def _is_cut_point(entry: Entry) -> bool:
    if isinstance(entry, MessageEntry):
        return not entry.error and entry.role in ("user", "assistant")
    return _is_turn_start(entry)


def find_cut_point(
    branch: Sequence[Entry], start: int, end: int, keep_recent: int
) -> tuple[int, int]:
    """(first kept index, turn start index or -1 when the cut does not split a turn)."""
    # O(walked entries): only the newest ~keep_recent tokens are counted and scanned
    cut = next((i for i in range(start, end) if _is_cut_point(branch[i])), -1)
    if cut < 0:
        return start, -1
    acc = 0
    for i in range(end - 1, start - 1, -1):
        tokens = entry_tokens(branch[i])
        acc += tokens
        if acc >= keep_recent:
            # the nearest cut point at or after i (Prime); but an entry that alone exceeds
            # keep-recent (a big notebook import, a pasted file) is summarised, not kept,
            # when a later cut point exists: keeping it would free nothing
            first = i + 1 if tokens > keep_recent else i
            later = next((c for c in range(first, end) if _is_cut_point(branch[c])), -1)
            if later < 0 and first > i and _is_cut_point(branch[i]):
                later = i
            if later < 0:  # only results after i: keep the last turn, not everything
                later = next(c for c in range(end - 1, start - 1, -1) if _is_cut_point(branch[c]))
            cut = later
            break
    turn_start = -1
    if not _is_turn_start(branch[cut]):
        turn_start = next((i for i in range(cut, start - 1, -1) if _is_turn_start(branch[i])), -1)
    # keep invisible entries (model changes, hidden notices) that sit just before the cut
    while cut > start and entry_message(branch[cut - 1]) is None:
        cut -= 1
    return cut, turn_start


# ---------------------------------------------------------------- preparation


def merge_file_ops(
    previous: dict[str, Any] | None, new: dict[str, Any] | None
) -> tuple[list[str], list[str]]:
    """(read-only files, modified files), sorted; a modified file is not listed as read."""
    read: set[str] = set()
    modified: set[str] = set()
    for src in (previous or {}, new or {}):
        read.update(src.get("read_files", src.get("read", [])) or [])
        modified.update(src.get("modified_files", src.get("modified", [])) or [])
    return sorted(read - modified), sorted(modified)


def plan_compaction(
    branch: Sequence[Entry],
    settings: CompactionSettings,
    *,
    previous: CompactionEntry | None = None,
    file_ops: dict[str, Any] | None = None,
    tokens_before: int | None = None,
) -> Preparation | Skip:
    """Plan one compaction of `branch`; `Skip` says why there is nothing to do.

    `previous` defaults to the latest compaction on the branch. `file_ops` are the kernel's
    {"read": [...], "modified": [...]}; they are merged with the previous details.
    """
    if not branch:
        return Skip("the session is empty")
    c = latest_compaction_index(branch)
    if c >= 0 and not any(isinstance(e, MessageEntry) for e in branch[c + 1 :]):
        return Skip("already compacted: no new messages since the last compaction")
    if previous is None and c >= 0:
        previous = branch[c]  # type: ignore[assignment]
    start = 0
    if previous is not None:
        pc = _index_of(branch, previous.id, c)
        start = _index_of(branch, previous.first_kept_entry_id, pc + 1)
    end = len(branch)
    cut, turn_start = find_cut_point(branch, start, end, settings.keep_recent_tokens)
    history_end = turn_start if turn_start >= 0 else cut
    history = [e for e in branch[start:history_end] if _summarisable(e)]
    prefix = [e for e in branch[history_end:cut] if _summarisable(e)] if turn_start >= 0 else []
    if not history and not prefix:
        return Skip(
            "nothing to summarize: everything since the last compaction fits in "
            f"keep_recent_tokens ({settings.keep_recent_tokens})"
        )
    read, modified = merge_file_ops(previous.details if previous else None, file_ops)
    return Preparation(
        first_kept_entry_id=branch[cut].id,
        history=history,
        turn_prefix=prefix,
        is_split_turn=turn_start >= 0,
        tokens_before=context_tokens(branch) if tokens_before is None else tokens_before,
        previous_summary=previous.summary if previous else None,
        read_files=read,
        modified_files=modified,
    )


def prepare_compaction(
    branch: Sequence[Entry],
    settings: CompactionSettings,
    *,
    previous: CompactionEntry | None = None,
    file_ops: dict[str, Any] | None = None,
    tokens_before: int | None = None,
) -> Preparation | None:
    """`plan_compaction` without the reason: None when there is nothing to do."""
    plan = plan_compaction(
        branch, settings, previous=previous, file_ops=file_ops, tokens_before=tokens_before
    )
    return plan if isinstance(plan, Preparation) else None


# ---------------------------------------------------------------- serialization


def _summarisable(entry: Entry) -> bool:
    if isinstance(entry, CustomEntry) and entry.custom_type in SUPERSEDED_CUSTOM:
        return False
    return not isinstance(entry, CompactionEntry) and entry_message(entry) is not None


def _call_text(call: dict[str, Any]) -> str:
    fn = call.get("function") or {}
    name = fn.get("name", "?")
    raw = fn.get("arguments", "")
    try:
        args = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        args = raw
    if name == "python" and isinstance(args, dict) and isinstance(args.get("code"), str):
        return str(args["code"])
    return f"{name}({raw if isinstance(raw, str) else json.dumps(raw)})"


def truncate_result(text: str, limit: int = TOOL_RESULT_MAX_CHARS) -> str:
    """Keep the head and the tail: a traceback's error line is at its end (Prime's W5)."""
    if len(text) <= limit:
        return text
    head, tail = text[: limit * 3 // 5], text[-(limit * 2 // 5):]
    return f"{head}\n[... {len(text) - limit} more characters truncated ...]\n{tail}"


def serialize_entry(entry: Entry) -> list[str]:
    if isinstance(entry, BranchSummaryEntry):
        return [f"[Branch summary]: {entry.summary}"]
    if isinstance(entry, CustomEntry):
        if entry.content is None or entry.custom_type in PINNED_CUSTOM:
            return []  # a pinned entry stays in the context itself (rlm.session.context)
        return [f"[Context]: {truncate_result(entry.content, CONTEXT_MAX_CHARS)}"]
    if not isinstance(entry, MessageEntry) or entry.error:
        return []
    msg = entry.message
    text = _text_of(msg.get("content"))
    if entry.role == "user":
        return [f"[User]: {text}"]
    if entry.role == "tool":
        return [f"[Tool result]: {truncate_result(text)}"]
    if entry.role == "assistant":
        out = [f"[Assistant]: {text}"] if text.strip() else []
        calls = msg.get("tool_calls") or []
        if calls:
            out.append("[Assistant tool calls]:\n" + "\n\n".join(_call_text(c) for c in calls))
        return out
    return [f"[{entry.role or 'Message'}]: {text}"] if text else []


def serialize_entries(entries: Iterable[Entry]) -> str:
    """The `<conversation>` body: tagged blocks separated by blank lines."""
    parts: list[str] = []
    for e in entries:
        parts.extend(serialize_entry(e))
    return "\n\n".join(parts)


def format_file_lists(read: Sequence[str], modified: Sequence[str]) -> str:
    out = ""
    if read:
        out += "\n\n<read-files>\n" + "\n".join(read) + "\n</read-files>"
    if modified:
        out += "\n\n<modified-files>\n" + "\n".join(modified) + "\n</modified-files>"
    return out
