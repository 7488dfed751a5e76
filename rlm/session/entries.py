"""Session entries: the on-disk record of a session, one JSON object per line.

Every entry has `type`, `id`, `parent_id` and `timestamp`; `parent_id` links make a tree
(branches). The first line of a file is a `SessionHeader`. Entries are plain dataclasses
that round-trip through `to_dict` / `entry_from_dict`.

Messages use the OpenAI chat shape that litellm speaks: {"role", "content", "tool_calls",
"tool_call_id", "name"}. A cell result is a `tool` message whose `cell` field holds the
structured record (see rlm.kernel.types.CellRecord.to_dict) and whose `content` is the
shaped text the model saw.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any, ClassVar

SESSION_VERSION = 1


def new_id() -> str:
    return uuid.uuid4().hex[:12]


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass
class Entry:
    type: ClassVar[str] = ""
    id: str = field(default_factory=new_id)
    parent_id: str | None = None
    timestamp: str = field(default_factory=now_iso)

    def to_dict(self) -> dict[str, Any]:
        """The entry as its log line holds it. Shallow: the values are the entry's own
        (its message dict, its cell): read them, never change them."""
        d: dict[str, Any] = {"type": self.type}
        d.update((f.name, getattr(self, f.name)) for f in fields(self))
        return d


@dataclass
class SessionHeader(Entry):
    """First line of a session file. `parent_session` is set for rlm_query children."""

    type: ClassVar[str] = "session"
    version: int = SESSION_VERSION
    cwd: str = ""
    model: str = ""
    parent_session: str | None = None
    task: str | None = None


@dataclass
class MessageEntry(Entry):
    """A chat message. `usage` is set on assistant messages (input/output/cache tokens).

    `cell` is set on tool (cell result) messages; `error` on an assistant message that
    stands for a failed model call (it never reaches the model). `origin` marks a user
    message the loop wrote itself ("nudge", "continuation"), not the user's words; it is
    not written when None, so logs from before it read the same.
    """

    type: ClassVar[str] = "message"
    message: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, int] | None = None
    model: str | None = None
    cell: dict[str, Any] | None = None
    error: str | None = None
    origin: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        if d.get("origin") is None:
            d.pop("origin", None)
        return d

    @property
    def role(self) -> str:
        return str(self.message.get("role", ""))


@dataclass
class CompactionEntry(Entry):
    type: ClassVar[str] = "compaction"
    summary: str = ""
    first_kept_entry_id: str | None = None
    tokens_before: int = 0
    details: dict[str, Any] = field(default_factory=dict)  # read_files, modified_files
    trigger: str = "threshold"  # threshold | overflow | requested | manual
    instructions: str | None = None


@dataclass
class BranchSummaryEntry(Entry):
    type: ClassVar[str] = "branch_summary"
    summary: str = ""
    from_id: str | None = None


@dataclass
class CustomEntry(Entry):
    """Host-side state and notices. `display` false: reaches the model, not the transcript.

    Known custom types: ipython_state, kernel_restored, thread_goal_state, heartbeat_prompt,
    cron_prompt, compaction_outcome, context_vars, notebook_import, final, resampled,
    rule_injection (a stream rule stopped a reply: rlm.agent.policy.stream).
    """

    type: ClassVar[str] = "custom"
    custom_type: str = ""
    data: Any = None
    display: bool = True
    # text the model sees for this entry (None: the entry does not reach the model)
    content: str | None = None


@dataclass
class ModelChangeEntry(Entry):
    type: ClassVar[str] = "model_change"
    model: str = ""


ENTRY_TYPES: dict[str, type[Entry]] = {
    cls.type: cls
    for cls in (
        SessionHeader,
        MessageEntry,
        CompactionEntry,
        BranchSummaryEntry,
        CustomEntry,
        ModelChangeEntry,
    )
}


def entry_from_dict(d: dict[str, Any]) -> Entry:
    """Build an entry from a dict read from disk. Raises ValueError on a bad shape."""
    if not isinstance(d, dict):
        raise ValueError(f"entry is a {type(d).__name__}, not an object")
    kind = d.get("type")
    cls = ENTRY_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValueError(f"unknown entry type {kind!r}")
    if not isinstance(d.get("id"), str) or not d["id"]:
        raise ValueError("entry has no string id")
    parent = d.get("parent_id")
    if parent is not None and not isinstance(parent, str):
        raise ValueError("parent_id is not a string or null")
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in d.items() if k in names})


def call_code(call: dict[str, Any]) -> str | None:
    """The python source of a stored tool call (`{"function": {"arguments": ...}}`), or None
    when its arguments are not `{"code": str}` (a garbled call from the model)."""
    import json

    fn = call.get("function") or call
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return None
    if isinstance(args, dict) and isinstance(args.get("code"), str):
        return args["code"]
    return None
