"""One generation's values into its files and manifest entries (kernel_ext.snapshot's save).

A group (names whose values share objects, kernel_ext.reach_index) is encoded as one tuple,
so the sharing survives a restore; a name alone as its value. Values that cannot be stored
are recorded as skipped with their reason, and so is what would pass the total cap. Module
and import entries hold only what rebinds them (no file).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kernel_ext import store_protocol as store
from kernel_ext.describe import summary
from kernel_ext.namespace import shared_array_roots
from kernel_ext.snapshot_codec import encode, encode_group, over_cap_reason

_DATA_KINDS = ("pickle", "dill")


@dataclass
class Packer:
    """Encodes groups of one generation `gen` into `writer`'s files, recording them in
    `entries` and `groups` (the new manifest's, updated in place)."""

    values: dict[str, Any]
    writer: store.GenerationWriter
    entries: dict[str, dict[str, Any]]
    groups: dict[str, dict[str, Any]]
    gen: int
    var_cap: int
    total_cap: int
    reach: Callable[[str], Any]  # a name's reach (kernel_ext.reach_index), or None

    def store(self, names: list[str], budget: int) -> int:
        """Encodes one group (or one name); returns the bytes it uses of `budget`."""
        values = self.values
        roots = shared_array_roots(r for k in names if (r := self.reach(k)) is not None)
        if len(names) > 1:
            enc = encode_group([values[k] for k in names], self.var_cap, roots)
            if enc.kind != "skipped":
                return self._place(names, enc, budget)
            return self._split(names, enc.reason or "", budget)
        return self._place(names, encode(values[names[0]], self.var_cap, roots), budget)

    def _split(self, names: list[str], reason: str, budget: int) -> int:
        """The group as one tuple failed: members that cannot be stored alone are left out
        (each with its own reason) and the rest stay together; if that fails too, each
        member is stored on its own and says that identity between them was not kept."""
        bad = [k for k in names if encode(self.values[k], self.var_cap).kind == "skipped"]
        good = [k for k in names if k not in bad]
        used = 0
        if bad and len(good) > 1:
            for k in bad:
                used += self.store([k], budget - used)
            return used + self.store(good, budget - used)
        split = f"stored one by one, identity between them not kept ({reason})"
        for k in names:
            used += self.store([k], budget - used)
            self.entries[k]["split"] = split
        return used

    def _place(self, names: list[str], enc: Any, budget: int) -> int:
        entries, groups = self.entries, self.groups
        entries.update({k: {"type": type(self.values[k]).__name__, "kind": enc.kind,
                            "summary": summary(self.values[k])} for k in names})
        if enc.kind == "skipped":
            for k in names:
                entries[k]["reason"] = enc.reason
            return 0
        if enc.kind not in _DATA_KINDS:
            entries[names[0]].update(enc.meta)
            return 0
        size = enc.size
        if size > budget:
            reason = over_cap_reason(self.total_cap - budget + size, self.total_cap,
                                     "total snapshot")
            for k in names:
                entries[k].update(kind="skipped", reason=reason)
            return 0
        gid = f"{self.gen}.{len(groups)}"
        while gid in groups:
            gid += "x"
        group: dict[str, Any] = {"kind": enc.kind, "members": list(names),
                                 "single": len(names) == 1, "bytes": size}
        loc = self.writer.add(gid, enc.parts, size)
        if loc:
            group.update(loc)
        groups[gid] = group
        for k in names:
            entries[k]["group"] = gid
            entries[k]["bytes"] = size
        return size
