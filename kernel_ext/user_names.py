"""The user's names in the kernel's namespace, kept between cells.

After every cell the snapshot needs the user's names (`namespace.user_values`' rule), which
of them are new or bound to another object, which are gone, and which share an object with
a given name (rule 4 of kernel_ext.namespace). Asked afresh each time, that was six passes
over the namespace, half of which is IPython's own `_i<N>` history and grows by one name a
cell: ~0.6 ms a cell at 600 names (issue 32). `UserNames` keeps the answer: a scan is one
pass that compares each name's id() with the one it had, and applies the rule only to names
bound since; who shares an object is kept as a map from id to names.

An id() says which object a name was bound to when it was last looked at; like the
snapshot's own ids before, a name rebound to a new object that took a freed object's
address looks unchanged here (the cell's text still names it: `Snapshotter.pending`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kernel_ext.namespace import is_user_value

DIRTY = -1  # no object has it: a name marked so is looked at again by the next scan


class UserNames:
    def __init__(self) -> None:
        self.ids: dict[str, int] = {}  # user name -> id() of its value at the last scan
        self._others: dict[str, int] = {}  # names not the user's -> id() of the value judged
        self._by_id: dict[int, str | set[str]] = {}  # id() -> the user name(s) bound to it

    def scan(self, ns: dict[str, Any], hidden: dict[str, Any]) -> tuple[set[str], set[str]]:
        """(user names new or bound to another object, user names deleted or no longer the
        user's) since the last scan of `ns` (a copy: `ids` then describes it)."""
        ids, others = self.ids, self._others
        changed: set[str] = set()
        same = 0
        for name, value in ns.items():
            i = id(value)
            if ids.get(name) == i:
                same += 1
            elif others.get(name) != i:
                if is_user_value(name, value, hidden):
                    changed.add(name)
                    others.pop(name, None)
                else:
                    others[name] = i
        if len(others) > 2 * len(ns) + 64:  # names gone since: forget them
            self._others = {k: i for k, i in others.items() if k in ns}
        deleted: set[str] = set()
        if same + len(changed & ids.keys()) < len(ids):  # some old name is not accounted for
            deleted = {k for k, i in ids.items()
                       if k not in changed and (k not in ns or id(ns[k]) != i)}
        for k in deleted:
            self._set(k, None)
        for k in changed:
            self._set(k, id(ns[k]))
        return changed, deleted

    def bind(self, name: str, value: Any) -> None:
        """`name` is bound to `value` as the snapshot knows it (a restore bound it)."""
        self._set(name, id(value))

    def mark_dirty(self, names: Iterable[str]) -> None:
        """The next scan reports these again (changed, or deleted if gone): what a scan
        reported was not saved (a full disk)."""
        for k in names:
            self._set(k, DIRTY)

    def sharing(self, names: Iterable[str]) -> set[str]:
        """The user names bound to the same object as any of `names`."""
        out: set[str] = set()
        for k in names:
            held = self._by_id.get(self.ids.get(k, DIRTY))
            if isinstance(held, str):
                out.add(held)
            elif held is not None:
                out |= held
        return out

    def _set(self, name: str, i: int | None) -> None:
        """Bind `name` to id `i` (None: forget it) in `ids` and `_by_id`."""
        ids = self.ids
        old = ids.pop(name, None) if i is None else ids.get(name)
        if old is not None and old != DIRTY:
            held = self._by_id.get(old)
            if held == name:
                del self._by_id[old]
            elif isinstance(held, set):
                held.discard(name)
                if len(held) == 1:
                    self._by_id[old] = next(iter(held))
        if i is None:
            return
        ids[name] = i
        if i == DIRTY:
            return
        held = self._by_id.setdefault(i, name)
        if held == name:
            return
        if isinstance(held, str):
            self._by_id[i] = {held, name}
        else:
            held.add(name)
