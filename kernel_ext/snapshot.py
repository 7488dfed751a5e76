"""Per-variable snapshots of the kernel namespace (first version: stub API, filled in next)."""

from __future__ import annotations

import json
from typing import Any


def install(ip: Any) -> None:
    pass


def uninstall(ip: Any) -> None:
    pass


def snapshot_now(ip: Any = None) -> str:
    return json.dumps({"saved": 0, "skipped": 0, "bytes_written": 0, "seconds": 0.0})


def restore_report_json(ip: Any = None) -> str:
    return json.dumps({"restored": [], "failed": [], "skipped": [], "snapshot_found": False})


def namespace_json(ip: Any = None) -> str:
    return json.dumps({"names": []})
