"""Wire format shared by the host (rlm) and the kernel side (kernel_ext). Defined once.

Bridge (kernel -> host request, host -> kernel reply), over Jupyter comms:
  * the kernel opens one comm with target BRIDGE_TARGET and sends requests as comm_msg
    data {"v": 1, "kind": "request", "id": str, "method": str, "params": {...}} on IOPub;
  * the host answers with a comm_msg on the CONTROL channel, data
    {"v": 1, "kind": "reply", "id": str, "ok": bool, "result": ..., "error": str|None}.
The host validates every request with `parse_request` (untrusted input).

Snapshot manifest: MANIFEST_NAME inside the snapshot dir; see kernel_ext.snapshot.
"""

from __future__ import annotations

import json
import re
from typing import Any

from kernel_ext import contract

BRIDGE_TARGET = "rlm.bridge"
WIRE_VERSION = 1
MAX_METHOD_LEN = 64
MAX_ID_LEN = 64
MAX_REQUEST_BYTES = 16 * 1024 * 1024
# A child's `context=` crosses as the object's snapshot encoding, base64 in the request
# (kernel_ext.child_context): at most this many bytes before base64, so a request holding
# it stays under MAX_REQUEST_BYTES. The user's bound (Config.child_context_max_bytes) is
# at most this.
MAX_CONTEXT_BYTES = 11 * 1024 * 1024

# Namespace listing while a cell runs (kernel_ext.subshell): a shell message sent to a
# kernel subshell; reply content {"status": "ok", "listing": <namespace_json text>} or
# {"status": "error", "ename", "evalue"}.
NAMESPACE_REQUEST = "rlm_namespace_request"
NAMESPACE_REPLY = "rlm_namespace_reply"

# The files a cell read (kernel_ext.fileops), in its execute_reply's metadata: a list of
# paths (so a re-read of the same file can supersede an older result: rlm.compaction.tiers).
CELL_READS = "rlm_reads"
# Which lines of a cell read a file and what each line said (kernel_ext.provenance), in its
# execute_reply's metadata: {"read": [line], "said": {line: [token]}, "partial": [line]}.
CELL_PROVENANCE = "rlm_provenance"

MANIFEST_NAME = "manifest.json"
# files of the snapshot dir kernel_ext only appends to: the manifest's journal (never
# written over, even after a torn record: kernel_ext.snapshot_log) and the cell records
# (kernel_ext.lineage). The host's secret scrub reads only what they gained since its
# last scan of them.
APPEND_ONLY_FILES = re.compile(r"(?:cells\.jsonl|g\d+-log\.bin)\Z")
MANIFEST_VERSION = 2  # 2: co-variable groups (kernel_ext.snapshot_store)

# Methods the host understands: the contract's (kernel_ext.contract.METHODS). Params are
# checked against the method's declared names here, their values by each handler.
METHODS = frozenset(contract.BY_NAME)


class WireError(ValueError):
    """A bridge message that does not follow the wire format."""


def make_request(req_id: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"v": WIRE_VERSION, "kind": "request", "id": req_id, "method": method, "params": params}


def make_reply(req_id: str, ok: bool, result: Any = None, error: str | None = None) -> dict[str, Any]:
    return {"v": WIRE_VERSION, "kind": "reply", "id": req_id, "ok": ok, "result": result, "error": error}


def parse_request(data: Any) -> tuple[str, str, dict[str, Any]]:
    """Validate a request from the kernel. Returns (id, method, params) or raises WireError."""
    if not isinstance(data, dict):
        raise WireError("request is not an object")
    version = data.get("v")
    if type(version) is not int or version != WIRE_VERSION or data.get("kind") != "request":
        raise WireError("not a version-1 request")
    req_id, method, params = data.get("id"), data.get("method"), data.get("params", {})
    if not isinstance(req_id, str) or not 0 < len(req_id) <= MAX_ID_LEN:
        raise WireError("bad request id")
    if not isinstance(method, str):
        raise WireError(f"method is a {type(method).__name__}, not a string")
    if len(method) > MAX_METHOD_LEN or method not in METHODS:
        raise WireError(f"unknown method {method[:MAX_METHOD_LEN]!r}")
    if not isinstance(params, dict):
        raise WireError("params is not an object")
    extra = [k for k in params if k not in contract.BY_NAME[method].params]
    if extra:
        raise WireError(f"{method} takes no parameter {str(extra[0])[:MAX_METHOD_LEN]!r}")
    if _encoded_size(params) > MAX_REQUEST_BYTES:
        raise WireError(f"params larger than {MAX_REQUEST_BYTES} bytes")
    return req_id, method, params


def _encoded_size(value: Any) -> int:
    """Bytes of `value` as compact JSON; anything that is not JSON counts as too large."""
    try:
        return len(json.dumps(value, separators=(",", ":")).encode())
    except (TypeError, ValueError, RecursionError):
        return MAX_REQUEST_BYTES + 1


def parse_reply(data: Any) -> tuple[str, bool, Any, str | None]:
    """Validate a reply from the host (kernel side). Returns (id, ok, result, error)."""
    if not isinstance(data, dict) or data.get("v") != WIRE_VERSION or data.get("kind") != "reply":
        raise WireError("not a version-1 reply")
    req_id = data.get("id")
    if not isinstance(req_id, str) or not 0 < len(req_id) <= MAX_ID_LEN:
        raise WireError("bad reply id")
    err = data.get("error")
    return req_id, bool(data.get("ok")), data.get("result"), err if isinstance(err, str) else None
