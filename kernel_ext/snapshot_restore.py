"""A snapshot's values back into a namespace (kernel_ext.snapshot's restore).

Values are decoded unit by unit: a group (names stored together as one tuple, so the
objects they share stay shared) or a module/import entry on its own. Modules and imports
come first, then dill, then pickle; a unit that fails is tried again in a later pass, since
a class it needs may have come back meanwhile. Restored values are relinked to the
namespace's globals (functions defined in the session).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from kernel_ext import store_protocol as store
from kernel_ext.describe import summary
from kernel_ext.snapshot_codec import decode, error_reason, relink

_RESTORE_ORDER = {"module": 0, "import": 0, "dill": 1, "pickle": 2}
PASSES = 3  # later passes retry values whose classes came back meanwhile


@dataclass
class Restored:
    """What a restore did; `dropped`: skipped entries of names not bound in the kernel
    (reported once, then left out of the next manifest)."""

    restored: list[str] = field(default_factory=list)
    failed: list[dict[str, str]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    summaries: dict[str, Any] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)


def restore_values(ns: dict[str, Any], reader: store.EntryReader,
                   entries: dict[str, dict[str, Any]], groups: dict[str, dict[str, Any]],
                   bound: Collection[str]) -> Restored:
    """Bind every entry's value in `ns`, except names already `bound` in the kernel (their
    value is newer) and entries recorded as skipped."""
    out = Restored()
    units: dict[str, list[str]] = {}  # group id (or "=name" for module/import) -> names
    for name, e in entries.items():
        if e.get("kind") == "skipped":
            out.skipped.append({"name": name, "reason": e.get("reason") or "not snapshotted"})
            if name not in bound:
                out.dropped.append(name)
        elif name in bound:
            out.skipped.append({"name": name, "reason": "already bound in the kernel (newer)"})
        else:
            units.setdefault(e.get("group") or f"={name}", []).append(name)
    order = sorted(units, key=lambda u: (_RESTORE_ORDER.get(
        entries[units[u][0]].get("kind", ""), 3), u))
    failures: dict[str, str] = {}
    restored: list[str] = []
    for _ in range(PASSES):
        remaining = []
        for unit in order:
            names = units[unit]
            try:
                got = _decode_unit(unit, names, entries, groups, reader)
            except Exception as exc:  # noqa: BLE001 - each group on its own
                for k in names:
                    failures[k] = error_reason(exc)
                remaining.append(unit)
                continue
            for k in names:
                ns[k] = got[k]
                restored.append(k)
                failures.pop(k, None)
        if not remaining or len(remaining) == len(order):
            break
        order = remaining
    for name in restored:
        try:
            ns[name] = relink(ns[name], ns)
        except Exception as exc:  # noqa: BLE001
            failures[name] = f"restored but could not relink globals: {error_reason(exc)}"
    out.restored = sorted(restored)
    out.summaries = {k: entries[k].get("summary") or summary(ns[k]) for k in out.restored}
    out.failed = [{"name": k, "reason": v} for k, v in sorted(failures.items())]
    return out


def _decode_unit(unit: str, names: list[str], entries: dict[str, dict[str, Any]],
                 groups: dict[str, dict[str, Any]], reader: store.EntryReader) -> dict[str, Any]:
    if unit.startswith("="):
        e = entries[names[0]]
        return {names[0]: decode(e.get("kind", ""), [], e)}
    g = groups.get(unit)
    if g is None:
        raise ValueError(f"manifest has no group {unit!r}")
    value = decode(g["kind"], reader.read(g), g)
    if g.get("single"):
        return {names[0]: value}
    if not isinstance(value, tuple) or len(value) != len(g["members"]):
        raise ValueError(f"group {unit!r} does not hold {len(g['members'])} values")
    by_member = dict(zip(g["members"], value, strict=True))
    return {k: by_member[k] for k in names}
