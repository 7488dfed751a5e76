"""Per-variable snapshots of the kernel namespace after each successful cell, and restore.

Public functions (the host calls them through `user_expressions`, so each returns one JSON
string; all default to `get_ipython()`):
    snapshot_now(ip=None, full=False) -> {"saved", "skipped", "bytes_written", "seconds",
                                          "generation"}
    restore_report_json(ip=None)      -> {"restored": [names], "failed": [{name, reason}],
                                          "skipped": [{name, reason}], "snapshot_found",
                                          "summaries": {name: one line}}
    namespace_json(ip=None)           -> {"names": [{name, type, bytes, restorable, reason,
                                          summary, last_used, shares?}]} largest and most
                                          recently used first (kernel_ext.describe)

Env read by `install` (declared in kernel_ext.contract): RLM_SNAPSHOT_URL (an fsspec URL, e.g. s3://bucket/prefix/<session>:
snapshots go there; credentials come from this process's environment), else
RLM_SNAPSHOT_DIR (unset/empty: no snapshots are written; listing and restore still
answer), RLM_SNAPSHOT_VAR_CAP (bytes, default 256 MiB),
RLM_SNAPSHOT_TOTAL_CAP (bytes, default 1 GiB). Fault injection: RLM_SNAPSHOT_CRASH_AFTER_FILES
(see kernel_ext.snapshot_store).

Which names are re-pickled after a cell: see kernel_ext.namespace (the touched-name rule).
How values are encoded: kernel_ext.snapshot_codec; into a generation's files:
kernel_ext.snapshot_pack. The files: kernel_ext.store_protocol (what every store is), kernel_ext.snapshot_store
(a local dir), kernel_ext.object_store (a URL). Restore:
kernel_ext.snapshot_restore.

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

from kernel_ext import cell_syntax, contract, lineage, snapshot_log
from kernel_ext import store_protocol as store
from kernel_ext.describe import order_names, summary
from kernel_ext.namespace import (
    estimate_size,
    is_immutable_scalar,
    names_in,
    referenced_globals,
    user_values,
)
from kernel_ext.reach_index import ReachIndex
from kernel_ext.snapshot_codec import error_reason
from kernel_ext.snapshot_pack import Packer
from kernel_ext.snapshot_restore import restore_values
from kernel_ext.stores import open_store
from kernel_ext.user_names import UserNames
from kernel_ext.wire import MANIFEST_NAME

DEFAULT_VAR_CAP = 256 * 1024 * 1024
DEFAULT_TOTAL_CAP = 1024 * 1024 * 1024

_state: Snapshotter | None = None


def _positive_int(raw: str | None, default: int) -> int:
    raw = (raw or "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else default


class Snapshotter:
    def __init__(self, ip: Any, path: str | None, var_cap: int, total_cap: int) -> None:
        self.ip, self.path = ip, path  # a local dir or a URL (kernel_ext.stores)
        self.store: store.SnapshotStore | None = open_store(path) if path else None
        self.var_cap, self.total_cap = var_cap, total_cap
        self.entries: dict[str, dict[str, Any]] = {}
        self.groups: dict[str, dict[str, Any]] = {}
        self.grouping = True  # False: the per-name rule of manifest v1 (benchmarks compare)
        self.reach = ReachIndex()  # what each name's value reaches, between cells
        self.used: int | None = None  # bytes the groups hold; None: count them again
        self.generation = 0
        self.next_gen = 1
        self.names = UserNames()  # the user's names -> id() at the last snapshot/restore
        self.pending: set[str] = set()
        self.cell_no = 0
        self.last_used: dict[str, int] = {}  # name -> cell count when a cell last named it
        self.pending_full = False
        self.report: dict[str, Any] | None = None
        self.manifest_error: str | None = None
        self.min_gc_gen = 0
        self.last_error: str | None = None
        self.loaded = False
        if self.store is not None:
            try:
                self._load()
            except store.StoreError as exc:  # unreachable: said at restore and at each snapshot
                self.manifest_error = str(exc)

    def _load(self) -> None:
        """Read the current manifest. Until this succeeded nothing is written: a snapshot
        taken without it would drop the names it holds from the newest manifest."""
        assert self.store is not None
        self.store.ensure()
        manifest, self.manifest_error = self.store.read_manifest()
        if manifest is not None:
            self.entries, self.generation = manifest["entries"], manifest["generation"]
            self.groups = manifest["groups"]
        self.used = None  # groups no entry names any more are dropped at the next write
        self.next_gen = max(self.generation, self.store.max_generation()) + 1
        # unreadable manifest: we cannot tell which old files it used; never delete them
        self.min_gc_gen = self.next_gen if self.manifest_error else 0
        self.loaded = True

    # ---- after each cell -------------------------------------------------------------
    def post_run_cell(self, result: Any) -> None:
        self.cell_no += 1
        info = getattr(result, "info", None)
        raw = getattr(info, "raw_cell", None) or ""
        parsed: cell_syntax.Parsed | None = None  # one parse for the names and the record
        try:
            code: str | None = self._transformed(raw)
            parsed = cell_syntax.parse(code or "")
        except Exception:  # noqa: BLE001 - a transform failure means "could be anything"
            code = None
        names = names_in(parsed)
        self.pending |= names.names
        for k in names.names:
            self.last_used[k] = self.cell_no
        self.pending_full = self.pending_full or names.full
        if not self.path:
            self.pending.clear()
            return
        if not getattr(result, "success", False):
            return  # touched names stay pending for the next successful cell
        if raw.strip():
            try:
                line = lineage.record_line(raw, self.ip.transform_cell(raw) if code is None else code,
                                           self.ip.user_ns, parsed)
                if line is not None and self.store is not None:
                    self.store.append_cell(line)
            except Exception as exc:  # noqa: BLE001 - never break the user's cell
                print(f"[rlm] could not record the cell for replay: {error_reason(exc)}", file=sys.stderr)
        try:
            self.snapshot()
            self.last_error = None
        except Exception as exc:  # noqa: BLE001 - never break the user's cell
            self.last_error = error_reason(exc)
            print(f"[rlm] snapshot failed: {self.last_error}", file=sys.stderr)

    def _transformed(self, raw: str) -> str:
        """The cell as IPython ran it: its history's last entry when that is this cell
        (it ran with store_history), else transformed again (~0.1 ms a cell)."""
        hm = getattr(self.ip, "history_manager", None)
        raws, parsed = getattr(hm, "input_hist_raw", None), getattr(hm, "input_hist_parsed", None)
        if raws and parsed and len(raws) == len(parsed) and raws[-1] == raw.rstrip("\n"):
            return str(parsed[-1])
        return str(self.ip.transform_cell(raw))

    def _touched(self, values: dict[str, Any], changed: set[str], full: bool) -> set[str]:
        ids = self.names.ids
        touched = changed | (self.pending & ids.keys())
        if full or self.pending_full:
            touched |= {k for k in ids if not is_immutable_scalar(values[k])}
        if touched:
            more = referenced_globals([values[k] for k in touched], self.ip.user_ns)
            touched |= more & ids.keys()
            if len(touched) < len(ids):  # aliases: another name bound to a touched object
                touched |= self.names.sharing(touched)
            if self.grouping and len(touched) < len(ids):  # rule 5: the stored groups
                touched |= self._group_mates(touched) & ids.keys()
        return touched

    def _group_mates(self, names: set[str]) -> set[str]:
        """Names stored in the same group as any of `names` (by the current manifest)."""
        out: set[str] = set()
        gids = {self.entries[k].get("group") for k in names if k in self.entries}
        for gid in gids:
            g = self.groups.get(gid) if isinstance(gid, str) else None
            if g is not None and not g.get("single"):
                out.update(m for m in g["members"] if self.entries.get(m, {}).get("group") == gid)
        return out

    def snapshot(self, full: bool = False) -> dict[str, Any]:
        t0 = time.perf_counter()
        stats: dict[str, Any] = {"saved": 0, "skipped": 0, "bytes_written": 0, "seconds": 0.0,
                                 "generation": self.generation}
        if not self.path:
            stats["disabled"] = True
            return stats
        values = dict(self.ip.user_ns)  # a copy: a subshell may list during a cell
        changed, deleted = self.names.scan(values, self.ip.user_ns_hidden)
        touched = self._touched(values, changed, full)
        for k in deleted:
            self.reach.drop(k)
        if touched or deleted or full:
            try:
                self._write(values, changed, touched, deleted, stats)
            except BaseException as exc:
                # not saved: the next scan says so again (all of them: the data of any name
                # may have been in a journal that is gone)
                lost = isinstance(exc, snapshot_log.JournalLost)
                self.names.mark_dirty((self.names.ids.keys() if lost else changed) | deleted)
                raise
        self.pending.clear()
        self.pending_full = False
        stats["seconds"] = time.perf_counter() - t0
        return stats

    # ---- co-variable groups ----------------------------------------------------------
    def _plan_groups(self, values: dict[str, Any], changed: set[str],
                     touched: set[str]) -> tuple[set[str], list[list[str]]]:
        """The names to write (touched, closed over old and new groups) and the new groups
        that cover them. Reach is recomputed for names to write, kept for the rest."""
        if not self.grouping:
            return touched, [[k] for k in sorted(touched)]
        ns, index, ids = self.ip.user_ns, self.reach, self.names.ids
        # every name indexed (new, rebound, restored), or a group could be missed
        fresh = changed | index.missing(ids)
        for k in fresh:
            index.update(k, values[k], ns)
        todo = set(touched)
        for _ in range(4):
            for k in todo - fresh:
                index.update(k, values[k], ns)
                fresh.add(k)
            groups = index.groups_of(todo)
            grown = set(todo).union(*groups)
            grown |= self._group_mates(grown) & ids.keys()
            if grown == todo:
                return todo, groups
            todo = grown
        return todo, index.groups_of(todo)

    def _write(self, values: dict[str, Any], changed: set[str], touched: set[str],
               deleted: set[str], stats: dict[str, Any]) -> None:
        assert self.store is not None
        if not self.loaded:
            self._load()  # raises StoreError while the store stays unreachable
        gen = self.next_gen
        try:
            self._write_generation(gen, values, changed, touched, deleted, stats)
        except BaseException:
            try:  # a full disk: no partial file of this generation stays behind
                self.store.discard(gen)
            except OSError:
                pass
            raise

    def _write_generation(self, gen: int, values: dict[str, Any], changed: set[str],
                          touched: set[str], deleted: set[str], stats: dict[str, Any]) -> None:
        assert self.store is not None
        writer = self.store.writer(gen)
        touched, new_groups = self._plan_groups(values, changed, touched)
        written = touched | deleted
        entries, groups, used, dropped = self._kept(written)
        budget = self.total_cap - used
        # checked every few generations: a late regroup costs a few more small files
        small_files = {g["file"] for g in groups.values()
                       if g.get("file", "").endswith(store.SMALL_SUFFIXES)} if gen % 8 == 0 else ()
        if len(small_files) > store.MAX_SMALL_FILES:  # regroup old small pickles
            reader = self.store.reader()
            for gid, g in groups.items():
                if g.get("file") in small_files:
                    parts = reader.read_copy(g)
                    writer.add(gid, parts, sum(len(p) for p in parts))
        # smallest first so one huge value cannot crowd out many small ones
        new_groups.sort(key=lambda g: sum(estimate_size(values[k]) for k in g))
        packer = Packer(values, writer, entries, groups, gen, self.var_cap, self.total_cap,
                        self.reach.get)
        for names in new_groups:
            budget -= packer.store(names, budget)
            for k in names:
                stats["skipped" if entries[k]["kind"] == "skipped" else "saved"] += 1
        placed = writer.finish_small()
        for gid, loc in placed.items():
            groups[gid] = {**groups[gid], **loc}  # never changed in place: the log compares
        differ = None
        if dropped is not None:  # what may differ from the last generation: O(written)
            made = {g for k in written if isinstance(g := entries.get(k, {}).get("group"), str)}
            differ = (written, dropped | made | placed.keys())
        self._preserve_corrupt_manifest()
        self.store.write_manifest(gen, entries, groups, writer, differ)
        self.entries, self.groups, self.generation, self.next_gen = entries, groups, gen, gen + 1
        self.used = self.total_cap - budget
        stats.update(bytes_written=writer.bytes_written, generation=gen)
        self.store.collect_garbage(groups, self.min_gc_gen)

    def _kept(self, written: set[str]) -> tuple[dict[str, Any], dict[str, Any], int, set[str] | None]:
        """The entries and groups a generation keeps from the last one (`written` names are
        written again or deleted), the bytes those groups hold, and the groups dropped: in
        O(written) from the last generation's, or from every entry after a manifest was
        read or a restore dropped entries (then None: which groups went is not known)."""
        if self.used is None:
            entries = {k: e for k, e in self.entries.items() if k not in written}
            kept = {e["group"] for e in entries.values() if "group" in e}
            groups = {gid: g for gid, g in self.groups.items() if gid in kept}
            return entries, groups, sum(int(g.get("bytes", 0)) for g in groups.values()), None
        entries, groups, used = dict(self.entries), dict(self.groups), self.used
        dropped: set[str] = set()
        left = set()
        for k in written:
            gid = entries.pop(k, {}).get("group")
            if isinstance(gid, str):
                left.add(gid)
        for gid in left:  # a group goes once no entry it stores still names it
            g = groups.get(gid)
            if g is not None and not any(entries.get(m, {}).get("group") == gid
                                         for m in g.get("members", ())):
                del groups[gid]
                dropped.add(gid)
                used -= int(g.get("bytes", 0))
        return entries, groups, used, dropped

    def _preserve_corrupt_manifest(self) -> None:
        if self.manifest_error and self.store is not None:
            self.store.preserve_corrupt_manifest()
            self.manifest_error = None

    # ---- restore ---------------------------------------------------------------------
    def restore(self) -> dict[str, Any]:
        if self.report is not None:
            return self.report
        rep: dict[str, Any] = {"restored": [], "failed": [], "skipped": [], "snapshot_found": False}
        self.report = rep
        if self.store is None:
            return rep
        try:
            manifest, err = self.store.read_manifest()
        except store.StoreError as exc:
            manifest, err = None, str(exc)
        if err:
            rep["snapshot_found"] = True
            rep["failed"].append({"name": MANIFEST_NAME, "reason": err})
            return rep
        if manifest is None:
            return rep
        rep["snapshot_found"] = True
        self._restore_entries(manifest["entries"], manifest["groups"], rep)
        return rep

    def _restore_entries(self, entries: dict[str, dict[str, Any]], groups: dict[str, dict[str, Any]],
                         rep: dict[str, Any]) -> None:
        assert self.store is not None
        ns = self.ip.user_ns
        got = restore_values(ns, self.store.reader(), entries, groups, self.names.ids.keys())
        for name in got.dropped:  # reported once; nothing to carry
            self.entries.pop(name, None)
            self.used = None  # the next generation starts from every entry
        for name in got.restored:
            self.names.bind(name, ns[name])
        rep["skipped"].extend(got.skipped)
        rep["restored"], rep["summaries"], rep["failed"] = got.restored, got.summaries, got.failed

    # ---- rebuild by replay ------------------------------------------------------------
    def _lost(self) -> list[str]:
        rep = self.restore()
        return [d["name"] for d in rep["failed"] + rep["skipped"]
                if d["name"] != MANIFEST_NAME and d["name"] not in self.ip.user_ns]

    def rebuild_plan(self) -> dict[str, Any]:
        """What `rebuild` would re-run, without running anything: {"cells": [{"cell",
        "code"}], "rebuilt": {name: [cells]}, "lost": {name: reason}} (the host tells
        the user before it asks for the rebuild)."""
        if not self.path:
            return {"cells": [], "rebuilt": {}, "lost": {}}
        assert self.store is not None
        records = lineage.parse_records(self.store.cell_lines())
        order, rebuilt, why = lineage.plan(self.ip, self._lost(), records)
        return {"cells": lineage.describe_plan(order, records), "rebuilt": rebuilt, "lost": why}

    def rebuild(self) -> dict[str, Any]:
        """Re-run recorded cells for the names the restore could not bring back (see
        kernel_ext.lineage). Call after `restore`, under the normal cell timeout."""
        if not self.path:
            return {"rebuilt": {}, "lost": {}, "cells": []}
        assert self.store is not None
        out = lineage.replay(self.ip, self._lost(), lineage.parse_records(self.store.cell_lines()))
        for name in out["rebuilt"]:
            self.pending.add(name)  # the next snapshot looks at them (most stay unpicklable)
        return out

    # ---- listing ---------------------------------------------------------------------
    def namespace(self) -> dict[str, Any]:
        """Every user name with its one-line `summary` (kernel_ext.describe), ordered
        largest and most recently used first; `shares` lists the names stored with it."""
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
            elif self.names.ids.get(name) != id(value):
                restorable, reason = True, "snapshot is older than the current value"
            else:
                restorable, reason = True, None
            row = {"name": name, "type": type(value).__name__, "bytes": estimate_size(value),
                   "restorable": restorable, "reason": reason, "summary": summary(value),
                   "last_used": self.last_used.get(name, 0)}
            mates = sorted(self._group_mates({name}) - {name})
            if mates:
                row["shares"] = mates
            out.append(row)
        return {"names": order_names(out)}


def _from_env(ip: Any) -> Snapshotter:
    path = os.environ.get(contract.SNAPSHOT_URL, "").strip() or None
    if path is None:
        local = os.environ.get(contract.SNAPSHOT_DIR, "").strip()
        path = os.path.abspath(local) if local else None
    return Snapshotter(ip, path,
                       _positive_int(os.environ.get(contract.SNAPSHOT_VAR_CAP), DEFAULT_VAR_CAP),
                       _positive_int(os.environ.get(contract.SNAPSHOT_TOTAL_CAP), DEFAULT_TOTAL_CAP))


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


def disable_here() -> None:
    """Write no snapshot from this process: a forked trial (kernel_ext.trial) shares the
    session's store with the real kernel, and what a candidate computed is not the
    session's state. Unsets the snapshot environment too, so a Snapshotter made later
    in this process has no path either."""
    os.environ.pop(contract.SNAPSHOT_DIR, None)
    os.environ.pop(contract.SNAPSHOT_URL, None)
    if _state is not None:
        _state.path, _state.store = None, None


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


def rebuild_json(ip: Any = None) -> str:
    """{"rebuilt": {name: [cell numbers]}, "lost": {name: reason}, "cells": [...]}: see
    Snapshotter.rebuild."""
    return json.dumps(_get(ip).rebuild())


def rebuild_plan_json(ip: Any = None) -> str:
    """What rebuild_json would re-run (nothing runs): see Snapshotter.rebuild_plan."""
    return json.dumps(_get(ip).rebuild_plan())


def namespace_json(ip: Any = None) -> str:
    return json.dumps(_get(ip).namespace())
