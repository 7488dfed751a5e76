"""Drive a kernel the way JupyterLab does (shared by the notebook tests)."""

from __future__ import annotations


def run(kc, code: str, timeout: float = 60) -> list[tuple[str, dict]]:
    """Execute like a frontend: every IOPub message of this request, until idle."""
    msg_id = kc.execute(code)
    msgs = []
    while True:
        msg = kc.get_iopub_msg(timeout=timeout)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
        msgs.append((msg["msg_type"], msg["content"]))
    kc.get_shell_msg(timeout=timeout)
    return msgs
