"""What each name reaches, kept between cells, and the co-variable groups found from it
without walking every name (rule 5 of kernel_ext.namespace).

`co_groups` over the whole namespace walks every id every name reaches after every cell:
O(names x reach), a few hundred microseconds at 200 small names and tens of milliseconds
when many names hold large containers. This index keeps, for each reached id, the names
that reach it, so the groups of the touched names are found by walking only those groups.
The groups are the same as `co_groups` gives for them (tests/test_snapshot_groups.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kernel_ext.namespace import Reach, reachable_ids


class ReachIndex:
    def __init__(self) -> None:
        self._reach: dict[str, tuple[int, Reach]] = {}  # name -> (id(value), what it reaches)
        # reached id -> the one name that reaches it, or the set of several names
        self._owners: dict[int, str | set[str]] = {}

    def get(self, name: str) -> Reach | None:
        cached = self._reach.get(name)
        return None if cached is None else cached[1]

    def missing(self, ids: dict[str, int]) -> set[str]:
        """Names of `ids` the index never walked (restored ones): O(1) when there are none,
        as the index holds only names of `ids` (deleted ones are dropped)."""
        if len(self._reach) >= len(ids):
            return set()
        return ids.keys() - self._reach.keys()

    def update(self, name: str, value: Any, ns: dict[str, Any]) -> None:
        """Walk `value` again (it may have been mutated) and index what it reaches now."""
        self.drop(name)
        reach = reachable_ids(value, ns)
        self._reach[name] = (id(value), reach)
        owners = self._owners
        for i in reach.ids:
            held = owners.setdefault(i, name)
            if held == name:  # a set never equals a str
                continue
            if isinstance(held, str):
                owners[i] = {held, name}
            else:
                held.add(name)

    def drop(self, name: str) -> None:
        cached = self._reach.pop(name, None)
        if cached is None:
            return
        owners = self._owners
        for i in cached[1].ids:
            held = owners.get(i)
            if held is None:
                continue
            if isinstance(held, str):
                if held == name:
                    del owners[i]
                continue
            held.discard(name)
            if len(held) == 1:
                owners[i] = next(iter(held))

    def keep_only(self, names: Iterable[str]) -> None:
        """Forget every name not in `names` (deleted from the namespace)."""
        for k in self._reach.keys() - set(names):
            self.drop(k)

    def groups_of(self, names: Iterable[str]) -> list[list[str]]:
        """The co-variable groups holding `names` (indexed names only): each sorted, in the
        order of their first name, as `co_groups` orders them."""
        seen: set[str] = set()
        groups: list[list[str]] = []
        owners, reach = self._owners, self._reach
        for start in sorted(names):
            if start in seen or start not in reach:
                continue
            seen.add(start)
            group, stack = [start], [start]
            while stack:
                for i in reach[stack.pop()][1].ids:
                    held = owners.get(i)
                    if type(held) is not set:  # only this name reaches it
                        continue
                    for m in held:
                        if m not in seen:
                            seen.add(m)
                            group.append(m)
                            stack.append(m)
            groups.append(sorted(group))
        groups.sort(key=lambda g: g[0])
        return groups
