"""`rlm state`: what a session's kernel holds, from the live kernel if it runs, else the
snapshot manifest. The answer always says which (`source`: "live" | "snapshot" | "none").

A live kernel is found through the connection file the host wrote under
`<session_dir>/host/`; a second client attaches to it (Jupyter kernels accept several)
and asks for the namespace listing on a kernel subshell of its own, which answers while a
cell runs (rlm/kernel/subshell.py). A kernel without subshells is asked on its main shell
with a short timeout; when it is busy the snapshot answers, with the reason and its time.

Where the snapshot is: `snapshot_location` (`<session_dir>/snapshot`, or
`<snapshot_url>/<session id>` when the session runs with `--snapshot-url`); a URL's
manifest is read through kernel_ext.stores, with this process's credentials.
"""

from __future__ import annotations

import ast
import json
import re
import time
from pathlib import Path
from typing import Any

from kernel_ext import contract, object_store, snapshot_log, store_protocol, stores
from kernel_ext.describe import order_names
from kernel_ext.wire import MANIFEST_NAME
from rlm import safeio
from rlm.errors import ConfigError, SessionError
from rlm.paths import HOST_DIR, write_private_atomic
from rlm.secrets import SCRUB_SLACK_NS, known_secrets, mask_buffer, scrub_tree

LISTING_EXPR = contract.SNAPSHOT_NAMESPACE.expression()
# the most of a snapshot manifest the host reads (the kernel writes it: a bound, not a trust)
MANIFEST_READ_LIMIT = 256 << 20
SNAPSHOT_LOG_READ_LIMIT = 256 << 20  # its journal: past this it reads as torn there


def _local_manifest(session_dir: Path) -> Any:
    """The snapshot manifest the kernel wrote, read without following a link (rlm.safeio)."""
    return json.loads(safeio.read_bytes(session_dir, Path("snapshot", MANIFEST_NAME),
                                        MANIFEST_READ_LIMIT))


def _live_listing(conn_file: Path, timeout: float) -> list[dict[str, Any]] | None:
    from jupyter_client import BlockingKernelClient


    kc = BlockingKernelClient(connection_file=str(conn_file))
    kc.load_connection_file()
    kc.start_channels()
    try:  # liveness was checked through the pid; no heartbeat channel needed
        msg_id = kc.execute("", silent=True, store_history=False,
                            user_expressions={"ns": LISTING_EXPR})
        reply = kc.get_shell_msg(timeout=timeout)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = kc.get_shell_msg(timeout=timeout)
        data = json.loads(expression_value(reply, LISTING_EXPR, key="ns"))
        return list(data.get("names", []))
    except Exception:  # noqa: BLE001 - any failure means "not live"; we fall back
        return None
    finally:
        kc.stop_channels()


def _live_kernel(session_dir: Path) -> Path | None:
    """The connection file of the session's running kernel, from host/kernel.pid."""
    import os

    try:
        pid_text, conn = safeio.read_text(session_dir, Path(HOST_DIR, "kernel.pid"),
                                          4096).split("\n")[:2]
        os.kill(int(pid_text), 0)
    except (OSError, ValueError):
        return None
    path = Path(conn)
    return path if path.is_file() else None


def snapshot_location(session_dir: Path, snapshot_url: str | None = None) -> str:
    """Where the kernel of the session in `session_dir` keeps its snapshots."""
    if snapshot_url:
        return f"{snapshot_url.rstrip('/')}/{session_dir.name}"
    return str(session_dir / "snapshot")


_checked_urls: set[str] = set()


def check_snapshot_url(url: str) -> None:
    """ConfigError (one line: what to install or set) unless the URL's fsspec backend is
    installed, credentials are found and the bucket exists. Once per URL per process."""
    if url in _checked_urls or not store_protocol.is_url(url):
        return
    store = stores.open_store(url)
    try:
        if isinstance(store, object_store.ObjectStore):
            store.check()
        elif not Path(store.path).is_dir():
            raise store_protocol.StoreError(
                f"snapshot URL {url}: {store.path} is not a directory: create it first")
    except store_protocol.StoreError as exc:
        raise ConfigError(str(exc)) from None
    _checked_urls.add(url)


def _url_manifest(location: str) -> dict[str, Any] | None:
    store = stores.open_store(location)
    try:
        manifest, err = store.read_manifest()
    except store_protocol.StoreError as exc:
        raise SessionError(f"cannot read the snapshot: {exc}") from None
    if err:
        raise SessionError(f"{store_protocol.public_url(location)}: unreadable snapshot manifest "
                           f"({err}); `rlm resume` the session to see what restores")
    return manifest


SCRUBBED_OBJECTS = ".scrubbed-objects"  # session dir: {"generation", "cell"} scrubbed at the URL


def scrub_snapshot_url(session_dir: Path, snapshot_url: str | None) -> list[str]:
    """After a cell: no known secret stays in what the kernel wrote to a snapshot URL. The
    objects written since the last scrub (new generations, new cell records) are read
    back, masked in place (same length: pickles stay loadable) and written again; a
    file:// URL gets the local scrub. Returns the names that held one. Nothing to do
    without a URL or without secrets; StoreError when the store cannot be reached."""
    secrets = known_secrets()
    if not snapshot_url or not secrets:
        return []
    store = stores.open_store(snapshot_location(session_dir, snapshot_url))
    mark = session_dir / SCRUBBED_OBJECTS
    if not isinstance(store, object_store.ObjectStore):
        since = mark.stat().st_mtime_ns - SCRUB_SLACK_NS if mark.exists() else 0
        write_private_atomic(mark, b"{}")
        return [str(p) for p in scrub_tree(Path(store.path), secrets, max(0, since))]
    try:
        done = json.loads(safeio.read_text(session_dir, mark, 4096))
        gen, cell = int(done["generation"]), int(done["cell"])
    except (OSError, ValueError, KeyError, TypeError):
        gen, cell = 0, 0
    names, top_gen, top_cell = store.written_since(gen, cell)
    hit = []
    for name in names:
        data = bytearray(store.read_object(name))
        if mask_buffer(data, secrets):
            store.replace_object(name, bytes(data))
            hit.append(name)
    write_private_atomic(mark, json.dumps({"generation": top_gen, "cell": top_cell}).encode())
    return hit


def snapshot_size(session_dir: Path, snapshot_url: str | None = None) -> int | None:
    """Bytes of a URL snapshot's data (its manifest's groups), None for a local one (the
    caller measures the dir) or when it cannot be read."""
    if not snapshot_url:
        return None
    try:
        manifest = _url_manifest(snapshot_location(session_dir, snapshot_url))
    except SessionError:
        return None
    groups = (manifest or {}).get("groups") or {}
    return sum(int(g.get("bytes") or 0) for g in groups.values() if isinstance(g, dict))


def snapshot_names(session_dir: Path, snapshot_url: str | None = None) -> list[dict[str, Any]] | None:
    if snapshot_url:
        manifest = _url_manifest(snapshot_location(session_dir, snapshot_url))
        if manifest is None:
            return None
        return _rows(manifest["entries"], manifest["groups"])
    path = session_dir / "snapshot" / MANIFEST_NAME
    if not path.is_file():
        return None
    try:
        manifest = _local_manifest(session_dir)
        groups = manifest.get("groups") or {}
        entries = manifest.get("names") or manifest.get("entries") or {}
        if not isinstance(entries, dict) or not isinstance(groups, dict):
            raise ValueError("its entries are not an object")
        if isinstance(manifest.get("generation"), int):  # the generations in its journal
            manifest, _ = snapshot_log.replay(
                str(path.parent), {**manifest, "entries": entries, "groups": groups},
                read=lambda name: safeio.read_bytes(session_dir, Path("snapshot", name),
                                                    SNAPSHOT_LOG_READ_LIMIT))
            entries, groups = manifest["entries"], manifest["groups"]
    except (OSError, ValueError, AttributeError) as exc:
        raise SessionError(
            f"{path}: unreadable snapshot manifest ({str(exc).splitlines()[0][:120]}); "
            "`rlm resume` the session to see what restores, or move the file aside"
        ) from None
    return _rows(entries, groups)


def _rows(entries: dict[str, Any], groups: dict[str, Any]) -> list[dict[str, Any]]:
    names = []
    for name, e in sorted(entries.items()):
        if not isinstance(e, dict):
            e = {"kind": "skipped", "reason": "malformed manifest entry"}
        restorable = e.get("kind") != "skipped"
        row = {"name": name, "type": e.get("type", ""), "bytes": e.get("bytes"),
               "restorable": restorable, "reason": e.get("reason"), "summary": e.get("summary")}
        g = groups.get(str(e.get("group"))) or {}
        mates = [m for m in g.get("members", []) if m != name and
                 (entries.get(m) or {}).get("group") == e.get("group")]
        if mates:
            row["shares"] = mates
        names.append(row)
    return order_names(names)


REPLAY_OFF = "replay is off for this run (--no-replay)"


def needs_rebuild(report: Any) -> bool:
    """A RestoreReport with names the snapshot could not bring back (replay may)."""
    return any(d.get("name") not in ("*", MANIFEST_NAME) for d in report.failed + report.skipped)


def merge_rebuild(report: Any, rebuild: dict[str, Any] | None, error: str | None = None) -> None:
    """Fold kernel_ext's rebuild answer ({"rebuilt": {name: [cells]}, "lost": {name: why}})
    into a RestoreReport: rebuilt names leave failed/skipped; the reason a replay could not
    help is appended to each lost name's reason (or `error` when the replay itself failed)."""
    rebuilt = dict((rebuild or {}).get("rebuilt") or {})
    why = dict((rebuild or {}).get("lost") or {})
    report.rebuilt = rebuilt
    report.replayed = list((rebuild or {}).get("cells") or []) if rebuilt else []
    report.not_replayed = {k: v for k, v in why.items() if k not in rebuilt}
    for bucket in (report.failed, report.skipped):
        keep = []
        for d in bucket:
            name = d.get("name")
            if name in rebuilt:
                continue
            extra = why.get(name) or (error if name not in ("*", MANIFEST_NAME) else None)
            keep.append({**d, "reason": f"{d.get('reason')}; not rebuilt: {extra}"} if extra else d)
        bucket[:] = keep


def replay_off(plan: dict[str, Any], reason: str = REPLAY_OFF) -> dict[str, Any]:
    """A rebuild answer for a replay that does not run (--no-replay; no read-only
    filesystem to run it under): the plan's names stay lost, said why."""
    lost = {**dict(plan.get("lost") or {}), **dict.fromkeys(plan.get("rebuilt") or {}, reason)}
    return {"rebuilt": {}, "lost": lost, "cells": []}


_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _printable(text: Any) -> str:
    """Cell code and names from the kernel, safe for a terminal: control characters and
    bidi overrides shown escaped (\\x1b, \\u202e)."""
    return _UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode(), str(text))[:200]


def replay_announcement(plan: dict[str, Any], enabled: bool,
                        refused: str | None = None) -> str | None:
    """The line the user reads before a restore re-runs recorded cells (None: nothing to
    re-run, nothing to say); `refused`: why they are not re-run after all. Everything in
    it came from the kernel: made printable."""
    cells = [c for c in list(plan.get("cells") or []) if isinstance(c, dict)]
    if not cells:
        return None
    names = _printable(", ".join(sorted(map(str, plan.get("rebuilt") or {}))))
    listed = "; ".join(f"[{_printable(c.get('cell'))}] {_printable(c.get('code'))}" for c in cells[:10])
    more = f"; +{len(cells) - 10} more" if len(cells) > 10 else ""
    if not enabled:
        return (f"replay is off (--no-replay): not re-running {len(cells)} recorded cell(s) "
                f"that would rebuild {names}: {listed}{more}")
    if refused:
        return (f"not re-running {len(cells)} recorded cell(s) that would rebuild {names}: "
                f"{refused}: {listed}{more}")
    return (f"rebuilding {names} by re-running {len(cells)} recorded cell(s) (only cells known to "
            f"stay in the kernel, under a read-only filesystem; --no-replay turns this off): "
            f"{listed}{more}")


def session_state(session_dir: Path, timeout: float = 3.0,
                  snapshot_url: str | None = None) -> dict[str, Any]:
    """A running kernel is asked on a subshell (answers while a cell runs); one without
    subshells is asked on its main shell (answers when idle); else the last snapshot (at
    `snapshot_url` when the session keeps it there)."""
    from rlm.kernel.subshell import (
        SubshellsUnsupported,
        SubshellUnavailable,
        busy_reason,
        list_from_connection_file,
    )

    conn = _live_kernel(session_dir)
    why = "no kernel is running for this session"
    if conn is not None:
        try:
            names = list(list_from_connection_file(conn, timeout).get("names", []))
            return {"source": "live", "detail": "asked the running kernel", "names": names}
        except SubshellsUnsupported as e:
            live, why = _live_listing(conn, timeout), busy_reason(e)
            if live is not None:
                return {"source": "live", "detail": "asked the running kernel", "names": live}
        except SubshellUnavailable as e:
            why = busy_reason(e)
    fallback = snapshot_fallback(session_dir, why, snapshot_url)
    if fallback is not None:
        return {"source": "snapshot", "detail": fallback["note"], "names": fallback["names"],
                "snapshot_created": fallback["created"]}
    return {"source": "none", "detail": f"{why}, and no snapshot exists", "names": []}


def snapshot_fallback(session_dir: Path, why: str,
                      snapshot_url: str | None = None) -> dict[str, Any] | None:
    """The last snapshot's names for a kernel that cannot list now, with a `note` saying
    so, when the snapshot was taken and (for a URL) where; None when there is none."""
    names = snapshot_names(session_dir, snapshot_url)
    if names is None:
        return None
    try:
        if snapshot_url:
            manifest = _url_manifest(snapshot_location(session_dir, snapshot_url)) or {}
            why += f" (snapshot in {store_protocol.public_url(snapshot_location(session_dir, snapshot_url))})"
        else:
            manifest = _local_manifest(session_dir)
        created = manifest.get("created")
    except (OSError, ValueError, AttributeError, SessionError):
        created = None
    when = (time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(created))
            if isinstance(created, (int, float)) else "an unknown time")
    return {"names": names, "created": created,
            "note": f"{why}; the listing is from the snapshot taken at {when}"}


def expression_value(reply: dict[str, Any], expr: str, key: str = "r") -> str:
    """The string value of user_expressions[key] in an execute_reply (IPython gives a repr)."""
    result = reply.get("content", {}).get("user_expressions", {}).get(key)
    if not isinstance(result, dict):
        raise RuntimeError(f"no value for {expr}")
    if result.get("status") != "ok":
        raise RuntimeError(f"{result.get('ename')}: {result.get('evalue')}")
    text = result.get("data", {}).get("text/plain", "")
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = ast.literal_eval(f"({text})")  # IPython splits long strings over lines
    if not isinstance(value, str):
        raise RuntimeError(f"{expr} did not return a string")
    return value
