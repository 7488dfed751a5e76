"""The current branch (root -> leaf) as a sequence whose entries may still be on disk.

A long session's branch holds every entry since the first, but a turn needs only its
tail (the projection starts at the latest compaction) and a few scans (the newest
`run_options`, the newest goal). `Branch` keeps, per position, the entry or only its
line's byte offset in session.jsonl, and reads lines back in chunks when a position is
first touched. Custom entries are also kept by type (`customs`), and compactions, prompts
and replies by kind, so "the newest entry of type X", "what the user asked" and "how many
replies" cost O(matches) reads instead of a scan of the whole branch.

`view()` is an O(1) snapshot: later appends to the branch are not seen through it (what
`SessionStore.branch()` returns: the old list copy cost O(branch) per call).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from itertools import islice
from typing import Any, overload

from rlm.session.entries import CompactionEntry, CustomEntry, Entry, MessageEntry

CHUNK = 256  # entries read back per touch of an unread position
# keys of positions kept beside the custom types' (never a custom type's name: NUL)
COMPACTIONS = "\0compaction"
PROMPTS = "\0prompt"  # user messages that are not the loop's own nudges
REPLIES = "\0reply"  # assistant messages that reached the model
FAILED = "\0failed"  # assistant entries that stand for a failed model call
# reads the entries whose lines start at these (increasing) offsets
Reader = Callable[[list[int]], list[Entry]]


class Branch(Sequence[Entry]):
    """Entries root -> leaf; unread ones are byte offsets until first touched."""

    __slots__ = ("_items", "_offsets", "_customs", "_read", "_n", "_unread")

    def __init__(
        self,
        items: list[Entry | None],
        offsets: array[int],
        read: Reader | None = None,
        customs: dict[str, list[int]] | None = None,
        n: int | None = None,
        unread: list[int] | None = None,
    ) -> None:
        self._items = items  # shared with views: only appended to, and filled in place
        self._offsets = offsets
        self._read = read
        self._n = n  # a view's fixed length; None: follows the items (the live branch)
        # positions still on disk, shared with views: at 0, reads are plain list reads
        self._unread = unread if unread is not None else [sum(e is None for e in items)]
        if customs is None:
            customs = {}
            for i, e in enumerate(items):
                key = _kind(e)
                if key is not None:
                    customs.setdefault(key, []).append(i)
        self._customs = customs

    @classmethod
    def of(cls, entries: list[Entry], offsets: list[int] | None = None) -> Branch:
        """A branch whose entries are all in memory."""
        return cls(list(entries), array("q", offsets if offsets is not None
                                        else [-1] * len(entries)))

    # -- the live branch --------------------------------------------------------------

    def append(self, entry: Entry, offset: int = -1) -> None:
        assert self._n is None, "a view is read-only"
        key = _kind(entry)
        if key is not None:
            self._customs.setdefault(key, []).append(len(self._items))
        self._items.append(entry)
        self._offsets.append(offset)

    def view(self) -> Branch:
        return Branch(self._items, self._offsets, self._read, self._customs, len(self),
                      self._unread)

    def same_entries(self, other: Branch) -> bool:
        """Whether this is `other` or a view or prefix of it (the same entries)."""
        return self._items is other._items and len(self) <= len(other)

    @property
    def entry_list(self) -> list[Any]:
        """The list this branch and its views share (an identity to compare with)."""
        return self._items

    def same_entries_as(self, entry_list: list[Any]) -> bool:
        """Whether this branch reads `entry_list` (an `entry_list` taken earlier)."""
        return self._items is entry_list

    @property
    def offsets(self) -> array[int]:
        return self._offsets[: len(self)]

    def customs_index(self) -> dict[str, list[int]]:
        n = len(self)
        return {t: [i for i in pos if i < n] for t, pos in self._customs.items()}

    def read(self) -> list[Entry]:
        """The entries already in memory."""
        return [e for e in self._items[: len(self)] if e is not None]

    def unread(self) -> int:
        if not self._unread[0]:
            return 0
        return sum(1 for e in self._items[: len(self)] if e is None)

    # -- reading ------------------------------------------------------------------------

    def positions(self, key: str) -> list[int]:
        """Where the entries of a custom type or kind (COMPACTIONS, PROMPTS, REPLIES) are,
        oldest first (no entry read)."""
        pos = self._customs.get(key, [])
        n = len(self)
        return pos if not pos or pos[-1] < n else pos[: bisect_left(pos, n)]

    def of_kind(self, key: str) -> list[Entry]:
        """The entries at `positions(key)`; only those lines are read."""
        pos = self.positions(key)
        self._fill_at(pos)
        return [self._items[i] for i in pos]  # type: ignore[misc]

    def customs(self, custom_type: str) -> list[CustomEntry]:
        """The custom entries of one type on the branch, oldest first."""
        return [e for e in self.of_kind(custom_type) if isinstance(e, CustomEntry)]

    def latest_compaction(self) -> int:
        """The position of the newest compaction, -1 if none (no entry read)."""
        return self.latest_of(COMPACTIONS)

    def latest_of(self, custom_type: str) -> int:
        """The position of the newest custom entry of `custom_type` (or COMPACTIONS), -1
        if none (no entry read)."""
        n = len(self)
        return next((i for i in reversed(self._customs.get(custom_type, ())) if i < n), -1)

    def projection_start(self) -> int:
        return projection_start(self)

    def __len__(self) -> int:
        return len(self._items) if self._n is None else self._n

    @overload
    def __getitem__(self, i: int) -> Entry: ...

    @overload
    def __getitem__(self, i: slice) -> list[Entry]: ...

    def __getitem__(self, i: int | slice) -> Entry | list[Entry]:
        n = len(self)
        if isinstance(i, slice):
            idx = range(*i.indices(n))
            if idx.start == 0 and idx.step == 1:  # a prefix: an O(1) view, read lazily
                return Branch(self._items, self._offsets, self._read, self._customs,
                              len(idx), self._unread)  # type: ignore[return-value]
            if not self._unread[0] and idx.step == 1:
                return self._items[idx.start:idx.stop]  # type: ignore[return-value]
            if idx.step == 1 and len(idx):
                self._fill(idx.start, idx.stop)
            return [self[k] for k in idx]
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("branch index out of range")
        e = self._items[i]
        if e is None:
            self._fill(max(0, i - CHUNK), min(n, i + CHUNK))
            e = self._items[i]
            assert e is not None
        return e

    def __iter__(self) -> Iterator[Entry]:
        n = len(self)
        if not self._unread[0]:  # all in memory: iterate the list itself
            yield from islice(self._items, n)  # type: ignore[misc]
            return
        for i in range(n):
            yield self[i]

    def __reversed__(self) -> Iterator[Entry]:
        for i in range(len(self) - 1, -1, -1):
            yield self[i]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other,
                                                                         strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __add__(self, other: Sequence[Entry]) -> list[Entry]:
        return [*self, *other]

    def __repr__(self) -> str:
        return f"Branch({len(self)} entries, {self.unread()} on disk)"

    def _fill(self, start: int, stop: int) -> None:
        self._read_in([k for k in range(start, stop) if self._items[k] is None])

    def _fill_at(self, positions: list[int]) -> None:
        """Read the unread ones of `positions` (increasing): one read per run of them
        lying within CHUNK entries of each other, not the span from the first to the last."""
        if not self._unread[0]:
            return
        todo = [k for k in positions if self._items[k] is None]
        start = 0
        for j in range(1, len(todo) + 1):
            if j == len(todo) or todo[j] - todo[j - 1] > CHUNK:
                self._read_in(todo[start:j])
                start = j

    def _read_in(self, todo: list[int]) -> None:
        if not todo:
            return
        assert self._read is not None, "an unread entry without a reader"
        got = self._read([self._offsets[k] for k in todo])
        for k, e in zip(todo, got, strict=True):
            self._items[k] = e
        self._unread[0] -= len(todo)


def latest_compaction(branch: Sequence[Entry]) -> int:
    """The position of the newest compaction in `branch`, -1 if none."""
    if isinstance(branch, Branch):
        return branch.latest_compaction()
    for i in range(len(branch) - 1, -1, -1):
        if isinstance(branch[i], CompactionEntry):
            return i
    return -1


def projection_start(branch: Sequence[Entry]) -> int:
    """Where the projection of `branch` begins: the latest compaction's first kept entry
    (or the compaction itself when that id is not found before it), else 0. Nothing
    before it is ever shown, so nothing before it needs reading."""
    at = latest_compaction(branch)
    if at < 0:
        return 0
    comp = branch[at]
    assert isinstance(comp, CompactionEntry)
    if comp.first_kept_entry_id is not None:
        for i in range(at - 1, -1, -1):
            if branch[i].id == comp.first_kept_entry_id:
                return i
    return at


def pinned_before(branch: Sequence[Entry], custom_types: frozenset[str], end: int) -> list[Entry]:
    """The custom entries of `custom_types` before position `end`, in branch order (a
    Branch reads only those)."""
    if isinstance(branch, Branch):
        pos = sorted(i for t in custom_types for i in branch._customs.get(t, ()) if i < end)
        return [branch[i] for i in pos]
    return [e for e in branch[:end] if isinstance(e, CustomEntry) and e.custom_type in custom_types]


def _kind(e: Entry | None) -> str | None:
    if isinstance(e, CustomEntry):
        return e.custom_type
    if isinstance(e, MessageEntry):
        if e.role == "assistant":
            return FAILED if e.error else REPLIES
        return PROMPTS if e.role == "user" and e.origin != "nudge" else None
    return COMPACTIONS if isinstance(e, CompactionEntry) else None


def custom_entries(branch: Sequence[Any], custom_type: str) -> list[CustomEntry]:
    """The custom entries of `custom_type` in `branch`, oldest first; O(matches) on a
    `Branch`, a scan on any other sequence."""
    if isinstance(branch, Branch):
        return branch.customs(custom_type)
    return [e for e in branch if isinstance(e, CustomEntry) and e.custom_type == custom_type]


def prompts(branch: Sequence[Any]) -> list[MessageEntry]:
    """The user's messages on `branch` (a run's prompt, a continuation; not the loop's
    own nudges), oldest first; O(matches) on a `Branch`, a scan on any other sequence."""
    found = branch.of_kind(PROMPTS) if isinstance(branch, Branch) else branch
    return [e for e in found if isinstance(e, MessageEntry) and _kind(e) == PROMPTS]


def user_questions(branch: Sequence[Any]) -> list[str]:
    """The user's own prompts on `branch`, oldest first: not a continuation (a goal's, a
    heartbeat's: the host's words) and not a note the loop wrote. What the answer rules
    read as "the question": one place, so a host message never reads as the user's."""
    return [e.message["content"] for e in prompts(branch)
            if e.origin is None and isinstance(e.message.get("content"), str)]


def reply_count(branch: Sequence[Any], *, failed: bool = False) -> int:
    """How many assistant replies `branch` holds (with `failed`, also the entries that
    stand for failed model calls); no entry read on a `Branch`."""
    kinds = (REPLIES, FAILED) if failed else (REPLIES,)
    if isinstance(branch, Branch):
        return sum(len(branch.positions(k)) for k in kinds)
    return sum(1 for e in branch if _kind(e) in kinds)


def with_replies_before(branch: Sequence[Any], custom_type: str) -> list[tuple[CustomEntry, int]]:
    """Each custom entry of `custom_type`, oldest first, with how many replies (as
    `reply_count` counts them) precede it; O(matches) reads on a `Branch`."""
    if isinstance(branch, Branch):
        replies = branch.positions(REPLIES)
        return [(e, bisect_left(replies, at)) for at, e in
                zip(branch.positions(custom_type), branch.of_kind(custom_type), strict=True)
                if isinstance(e, CustomEntry)]
    out, n = [], 0
    for e in branch:
        kind = _kind(e)
        if kind == REPLIES:
            n += 1
        elif kind == custom_type and isinstance(e, CustomEntry):
            out.append((e, n))
    return out


__all__ = ["Branch", "custom_entries", "latest_compaction", "projection_start", "prompts",
           "reply_count", "with_replies_before"]
