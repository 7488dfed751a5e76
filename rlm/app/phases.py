"""What the terminal says during the slow phases of a run's start (issue 31): starting or
restoring the kernel (with the snapshot's size), and after a restore, what came back and
what did not. Pure lines from what is on disk or in a RestoreReport; the CLI prints them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlm.config import Config


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def snapshot_bytes(session_dir: Path | None) -> int | None:
    """Bytes of the session's local snapshot; None when it has none."""
    snap = session_dir / "snapshot" if session_dir is not None else None
    if snap is None or not snap.is_dir():
        return None
    total = 0
    for p in snap.rglob("*"):
        try:
            total += p.stat().st_size if p.is_file() else 0
        except OSError:
            continue
    return total or None


def kernel_phase(session_dir: Path | None, config: Config) -> str:
    """`starting the kernel` or `restoring the kernel from its snapshot (48.1 MB)`."""
    where = "" if not config.kernel or config.kernel == "local" else f" ({config.kernel})"
    if config.snapshot_url:
        return f"starting the kernel{where}; its snapshot, if any, comes from {config.snapshot_url}"
    size = snapshot_bytes(session_dir)
    if size is None:
        return f"starting the kernel{where}"
    return f"starting the kernel{where} and restoring its snapshot ({_size(size)})"


def restored_line(report: Any, most: int = 8) -> str | None:
    """`restored: a, b; rebuilt: c; not restored: d (why)` after a snapshot was found;
    None when there was no snapshot to restore."""
    if report is None or not getattr(report, "snapshot_found", False):
        return None

    def names(items: list[str]) -> str:
        more = f" +{len(items) - most} more" if len(items) > most else ""
        return ", ".join(items[:most]) + more

    parts = [f"restored: {names(list(report.restored)) or 'nothing'}"]
    if report.rebuilt:
        parts.append(f"rebuilt by re-running cells: {names(sorted(report.rebuilt))}")
    lost = [d for d in list(report.failed) + list(report.skipped)
            if d.get("name") not in ("*", "manifest.json") and d.get("name") not in report.rebuilt]
    if lost:
        parts.append("not restored: " + names([f"{d.get('name')} ({d.get('reason')})"
                                                 for d in lost]))
    return "; ".join(parts)
