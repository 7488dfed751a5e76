"""Per-variable snapshots of the kernel namespace after each successful cell, and restore.

Public functions (the host calls them through `user_expressions`, so each returns one JSON
string; all default to `get_ipython()`):
    snapshot_now(ip=None, full=False) -> {"saved", "skipped", "bytes_written", "seconds",
                                          "generation"}
    restore_report_json(ip=None)      -> {"restored": [names], "failed": [{name, reason}],
                                          "skipped": [{name, reason}], "snapshot_found"}
    namespace_json(ip=None)           -> {"names": [{name, type, bytes, restorable, reason}]}

Env read by `install`: RLM_SNAPSHOT_DIR (unset/empty: no snapshots are written; listing
and restore still answer), RLM_SNAPSHOT_VAR_CAP (bytes, default 256 MiB),
RLM_SNAPSHOT_TOTAL_CAP (bytes, default 1 GiB). Fault injection: RLM_SNAPSHOT_CRASH_AFTER_FILES
(see kernel_ext.snapshot_store).

Which names are re-pickled after a cell: see kernel_ext.namespace (the touched-name rule).
How values are encoded: kernel_ext.snapshot_codec. The files: kernel_ext.snapshot_store.

A failed restore never lets an automatic snapshot shrink the last good one: manifest
entries of names that are not live in this kernel (not restored yet, or failed to restore)
are carried into every new manifest until the user binds the name again. Names the user
deletes (`del x`) leave the manifest. Entries recorded as skipped are reported once by the
restore and then dropped.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from kernel_ext import snapshot_store as store
from kernel_ext.namespace import (
    cell_names,
    estimate_size,
    is_immutable_scalar,
    referenced_globals,
    user_values,
)
from kernel_ext.snapshot_codec import decode, encode, error_reason, over_cap_reason, relink
from kernel_ext.wire import MANIFEST_NAME

DEFAULT_VAR_CAP = 256 * 1024 * 1024
DEFAULT_TOTAL_CAP = 1024 * 1024 * 1024
_DATA_KINDS = ("pickle", "dill")
_RESTORE_ORDER = {"module": 0, "import": 0, "dill": 1, "pickle": 2}

_state: Snapshotter | None = None


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else default


class Snapshotter:
    def __init__(self, ip: Any, path: str | None, var_cap: int, total_cap: int) -> None:
        self.ip, self.path = ip, path
        self.var_cap, self.total_cap = var_cap, total_cap
        self.entries: dict[str, dict[str, Any]] = {}
        self.generation = 0
        self.next_gen = 1
        self.ids: dict[str, int] = {}  # live names -> id() at the last snapshot/restore
        self.pending: set[str] = set()
        self.pending_full = False
        self.report: dict[str, Any] | None = None
        self.manifest_error: str | None = None
        self.min_gc_gen = 0
        self.last_error: str | None = None
        if path:
            store.ensure_dir(path)
            manifest, self.manifest_error = store.read_manifest(path)
            if manifest is not None:
                self.entries, self.generation = manifest["entries"], manifest["generation"]
            self.next_gen = max(self.generation, store.max_generation(path)) + 1
            # unreadable manifest: we cannot tell which old files it used; never delete them
            self.min_gc_gen = self.next_gen if self.manifest_error else 0

    # ---- after each cell -------------------------------------------------------------
    def post_run_cell(self, result: Any) -> None:
        info = getattr(result, "info", None)
        raw = getattr(info, "raw_cell", None) or ""
        try:
            names = cell_names(self.ip.transform_cell(raw))
        except Exception:  # noqa: BLE001 - a transform failure means "could be anything"
            names = cell_names("(")
        self.pending |= names.names
        self.pending_full = self.pending_full or names.full
        if not self.path:
            self.pending.clear()
            return
        if not getattr(result, "success", False):
            return  # touched names stay pending for the next successful cell
        try:
            self.snapshot()
            self.last_error = None
        except Exception as exc:  # noqa: BLE001 - never break the user's cell
            self.last_error = error_reason(exc)
            print(f"[rlm] snapshot failed: {self.last_error}", file=sys.stderr)

    def _touched(self, values: dict[str, Any], ids: dict[str, int], full: bool) -> set[str]:
        old = self.ids
        touched = {k for k, i in ids.items() if old.get(k) != i}
        touched |= self.pending & ids.keys()
        if full or self.pending_full:
            touched |= {k for k, v in values.items() if not is_immutable_scalar(v)}
        if touched:
            more = referenced_globals([values[k] for k in touched], self.ip.user_ns)
            touched |= more & ids.keys()
            if len(touched) < len(ids):  # aliases: another name bound to a touched object
                tids = {ids[k] for k in touched}
                touched |= {k for k, i in ids.items() if i in tids}
        return touched

    def snapshot(self, full: bool = False) -> dict[str, Any]:
        t0 = time.perf_counter()
        stats: dict[str, Any] = {"saved": 0, "skipped": 0, "bytes_written": 0, "seconds": 0.0,
                                 "generation": self.generation}
        if not self.path:
            stats["disabled"] = True
            return stats
        values = user_values(self.ip)
        ids = {k: id(v) for k, v in values.items()}
        touched = self._touched(values, ids, full)
        deleted = [k for k in self.ids if k not in ids]
        if touched or deleted or full:
            self._write(values, touched, set(deleted), stats)
        self.ids = ids
        self.pending.clear()
        self.pending_full = False
        stats["seconds"] = time.perf_counter() - t0
        return stats

    def _kept_entries(self, touched: set[str], deleted: set[str]) -> dict[str, dict[str, Any]]:
        return {k: e for k, e in self.entries.items() if k not in touched and k not in deleted}

    def _encode_into(self, name: str, value: Any, writer: store.GenerationWriter,
                     budget: int, entry: dict[str, Any]) -> int:
        """Fills `entry` for one value; returns the bytes it takes from the total budget."""
        enc = encode(value, self.var_cap)
        entry["kind"] = enc.kind
        if enc.kind in _DATA_KINDS:
            size = enc.size
            if size > budget:
                entry.update(kind="skipped", reason=over_cap_reason(
                    self.total_cap - budget + size, self.total_cap, "total snapshot"))
                return 0
            entry["bytes"] = size
            loc = writer.add(name, enc.parts, size)
            if loc:
                entry.update(loc)
            return size
        if enc.kind == "skipped":
            entry["reason"] = enc.reason
        else:
            entry.update(enc.meta)
        return 0

    def _write(self, values: dict[str, Any], touched: set[str], deleted: set[str],
               stats: dict[str, Any]) -> None:
        assert self.path
        gen = self.next_gen
        writer = store.GenerationWriter(self.path, gen)
        entries = self._kept_entries(touched, deleted)
        budget = self.total_cap - sum(int(e.get("bytes", 0)) for e in entries.values())
        small_files = {e["file"] for e in entries.values() if e.get("file", "").endswith("-small.bin")}
        if len(small_files) > store.MAX_SMALL_FILES:  # regroup old small pickles
            reader = store.EntryReader(self.path)
            for k, e in entries.items():
                if e.get("file") in small_files:
                    parts = reader.read_copy(e)
                    writer.add(k, parts, sum(len(p) for p in parts))
        # smallest first so one huge value cannot crowd out many small ones
        for name in sorted(touched, key=lambda k: estimate_size(values[k])):
            entry: dict[str, Any] = {"type": type(values[name]).__name__}
            budget -= self._encode_into(name, values[name], writer, budget, entry)
            entries[name] = entry
            stats["skipped" if entry["kind"] == "skipped" else "saved"] += 1
        for name, loc in writer.finish_small().items():
            entries[name].update(loc)
        self._preserve_corrupt_manifest()
        store.write_manifest(self.path, gen, entries)
        store.collect_garbage(self.path, {e["file"] for e in entries.values() if "file" in e},
                              self.min_gc_gen)
        self.entries, self.generation, self.next_gen = entries, gen, gen + 1
        stats.update(bytes_written=writer.bytes_written, generation=gen)

    def _preserve_corrupt_manifest(self) -> None:
        if self.manifest_error and self.path:
            src = os.path.join(self.path, MANIFEST_NAME)
            if os.path.exists(src):
                os.replace(src, os.path.join(self.path, f"manifest.corrupt-{int(time.time())}.json"))
            self.manifest_error = None

    # ---- restore ---------------------------------------------------------------------
    def restore(self) -> dict[str, Any]:
        if self.report is not None:
            return self.report
        rep: dict[str, Any] = {"restored": [], "failed": [], "skipped": [], "snapshot_found": False}
        self.report = rep
        if not self.path:
            return rep
        manifest, err = store.read_manifest(self.path)
        if err:
            rep["snapshot_found"] = True
            rep["failed"].append({"name": MANIFEST_NAME, "reason": err})
            return rep
        if manifest is None:
            return rep
        rep["snapshot_found"] = True
        self._restore_entries(manifest["entries"], rep)
        return rep

    def _restore_entries(self, entries: dict[str, dict[str, Any]], rep: dict[str, Any]) -> None:
        assert self.path
        ns, reader = self.ip.user_ns, store.EntryReader(self.path)
        todo = []
        for name, e in entries.items():
            if e.get("kind") == "skipped":
                rep["skipped"].append({"name": name, "reason": e.get("reason") or "not snapshotted"})
                if name not in self.ids:
                    self.entries.pop(name, None)  # reported once; nothing to carry
            elif name in self.ids:
                rep["skipped"].append({"name": name, "reason": "already bound in the kernel (newer)"})
            else:
                todo.append(name)
        todo.sort(key=lambda k: _RESTORE_ORDER.get(entries[k].get("kind", ""), 3))
        failures: dict[str, str] = {}
        restored: list[str] = []
        for _ in range(3):  # later passes retry values whose classes came back meanwhile
            remaining = []
            for name in todo:
                e = entries[name]
                try:
                    parts = reader.read(e) if e.get("kind") in _DATA_KINDS else []
                    ns[name] = decode(e.get("kind", ""), parts, e)
                    restored.append(name)
                    failures.pop(name, None)
                except Exception as exc:  # noqa: BLE001 - each name on its own
                    failures[name] = error_reason(exc)
                    remaining.append(name)
            if not remaining or len(remaining) == len(todo):
                break
            todo = remaining
        for name in restored:
            try:
                ns[name] = relink(ns[name], ns)
            except Exception as exc:  # noqa: BLE001
                failures[name] = f"restored but could not relink globals: {error_reason(exc)}"
            self.ids[name] = id(ns[name])
        rep["restored"] = sorted(restored)
        rep["failed"] = [{"name": k, "reason": v} for k, v in sorted(failures.items())]

    # ---- listing ---------------------------------------------------------------------
    def namespace(self) -> dict[str, Any]:
        out = []
        for name, value in user_values(self.ip).items():
            e = self.entries.get(name)
            reason: str | None
            if not self.path:
                restorable, reason = False, "snapshots disabled (RLM_SNAPSHOT_DIR unset)"
            elif e is None:
                restorable, reason = False, "not yet snapshotted"
            elif e.get("kind") == "skipped":
                restorable, reason = False, e.get("reason")
            elif self.ids.get(name) != id(value):
                restorable, reason = True, "snapshot is older than the current value"
            else:
                restorable, reason = True, None
            out.append({"name": name, "type": type(value).__name__, "bytes": estimate_size(value),
                        "restorable": restorable, "reason": reason})
        return {"names": out}


def _from_env(ip: Any) -> Snapshotter:
    path = os.environ.get("RLM_SNAPSHOT_DIR", "").strip() or None
    return Snapshotter(ip, os.path.abspath(path) if path else None,
                       _env_int("RLM_SNAPSHOT_VAR_CAP", DEFAULT_VAR_CAP),
                       _env_int("RLM_SNAPSHOT_TOTAL_CAP", DEFAULT_TOTAL_CAP))


def install(ip: Any) -> None:
    global _state
    uninstall(ip)
    _state = _from_env(ip)
    ip.events.register("post_run_cell", _state.post_run_cell)


def uninstall(ip: Any) -> None:
    global _state
    if _state is not None:
        try:
            ip.events.unregister("post_run_cell", _state.post_run_cell)
        except ValueError:
            pass
        _state = None


def _get(ip: Any) -> Snapshotter:
    global _state
    if ip is None:
        from IPython import get_ipython

        ip = get_ipython()
    if _state is None or _state.ip is not ip:
        _state = _from_env(ip)  # not installed: answer without registering the hook
    return _state


def snapshot_now(ip: Any = None, full: bool = False) -> str:
    return json.dumps(_get(ip).snapshot(full=full))


def restore_report_json(ip: Any = None) -> str:
    return json.dumps(_get(ip).restore())


def namespace_json(ip: Any = None) -> str:
    return json.dumps(_get(ip).namespace())
