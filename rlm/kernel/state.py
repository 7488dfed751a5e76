"""`rlm state`: what a session's kernel holds, from the live kernel if it runs, else the
snapshot manifest. The answer always says which (`source`: "live" | "snapshot" | "none").

A live kernel is found through the connection file the host wrote under
`<session_dir>/runtime/`; a second client attaches to it (Jupyter kernels accept several)
and asks for the namespace listing on a kernel subshell of its own, which answers while a
cell runs (rlm/kernel/subshell.py). A kernel without subshells is asked on its main shell
with a short timeout; when it is busy the snapshot answers, with the reason and its time.
"""

from __future__ import annotations

import ast
import json
import time
from pathlib import Path
from typing import Any

from kernel_ext.describe import order_names
from kernel_ext.wire import MANIFEST_NAME
from rlm.errors import SessionError

LISTING_EXPR = "__import__('kernel_ext.snapshot', fromlist=['x']).namespace_json()"


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


def _live_kernel(runtime: Path) -> Path | None:
    """The connection file of the session's running kernel, from runtime/kernel.pid."""
    import os

    try:
        pid_text, conn = (runtime / "kernel.pid").read_text().split("\n")[:2]
        os.kill(int(pid_text), 0)
    except (OSError, ValueError):
        return None
    path = Path(conn)
    return path if path.is_file() else None


def snapshot_names(session_dir: Path) -> list[dict[str, Any]] | None:
    path = session_dir / "snapshot" / MANIFEST_NAME
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text())
        groups = manifest.get("groups") or {}
        entries = manifest.get("names") or manifest.get("entries") or {}
        if not isinstance(entries, dict) or not isinstance(groups, dict):
            raise ValueError("its entries are not an object")
    except (OSError, ValueError, AttributeError) as exc:
        raise SessionError(
            f"{path}: unreadable snapshot manifest ({str(exc).splitlines()[0][:120]}); "
            "`rlm resume` the session to see what restores, or move the file aside"
        ) from None
    names = []
    for name, e in sorted(entries.items()):
        if not isinstance(e, dict):
            e = {"kind": "skipped", "reason": "malformed manifest entry"}
        restorable = e.get("kind") != "skipped"
        row = {"name": name, "type": e.get("type", ""), "bytes": e.get("bytes"),
               "restorable": restorable, "reason": e.get("reason"), "summary": e.get("summary")}
        g = groups.get(e.get("group")) or {}
        mates = [m for m in g.get("members", []) if m != name and
                 (entries.get(m) or {}).get("group") == e.get("group")]
        if mates:
            row["shares"] = mates
        names.append(row)
    return order_names(names)


REBUILD_EXPR = "__import__('kernel_ext.snapshot', fromlist=['x']).rebuild_json()"


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
    for bucket in (report.failed, report.skipped):
        keep = []
        for d in bucket:
            name = d.get("name")
            if name in rebuilt:
                continue
            extra = why.get(name) or (error if name not in ("*", MANIFEST_NAME) else None)
            keep.append({**d, "reason": f"{d.get('reason')}; not rebuilt: {extra}"} if extra else d)
        bucket[:] = keep


def session_state(session_dir: Path, timeout: float = 3.0) -> dict[str, Any]:
    """A running kernel is asked on a subshell (answers while a cell runs); one without
    subshells is asked on its main shell (answers when idle); else the last snapshot."""
    from rlm.kernel.subshell import (
        SubshellsUnsupported,
        SubshellUnavailable,
        busy_reason,
        list_from_connection_file,
    )

    conn = _live_kernel(session_dir / "runtime")
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
    fallback = snapshot_fallback(session_dir, why)
    if fallback is not None:
        return {"source": "snapshot", "detail": fallback["note"], "names": fallback["names"],
                "snapshot_created": fallback["created"]}
    return {"source": "none", "detail": f"{why}, and no snapshot exists", "names": []}


def snapshot_fallback(session_dir: Path, why: str) -> dict[str, Any] | None:
    """The last snapshot's names for a kernel that cannot list now, with a `note` saying
    so and when the snapshot was taken; None when there is no snapshot."""
    names = snapshot_names(session_dir)
    if names is None:
        return None
    try:
        created = json.loads((session_dir / "snapshot" / MANIFEST_NAME).read_text()).get("created")
    except (OSError, ValueError, AttributeError):
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
