"""Fidelity suite: 147 kinds of values (tests/fidelity_kinds.py) through a real kernel
snapshot -> os._exit -> restore in a NEW kernel process, then rebuild by replay
(kernel_ext.lineage) of what the snapshot could not hold; one status per kind:
restored equal | restored, differs | rebuilt by replay | rebuilt, differs | lost (why) |
not run (package missing).

The count of kinds restored equal is held by a floor so it cannot drop. The table in
bench/RESULTS.md comes from `python tests/test_snapshot_fidelity.py` (or set
RLM_FIDELITY_TABLE=PATH when running the test)."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fidelity_kinds import KINDS  # noqa: E402
from test_snapshot_kernel import RESTORE, BareKernel  # noqa: E402

pytestmark = pytest.mark.timeout(600)

# measured at this commit: 137 of 147 with scikit-learn installed, 134 without (its 3 kinds
# are then "not run"); before co-variable groups: see bench/RESULTS.md
# CI's clean venv has neither scikit-learn nor scipy (4 kinds not run): 133 there
RESTORED_EQUAL_FLOOR = 133
# replay by allow-list (issue 26): 3 kinds whose cells are not known to stay in the kernel
# (a socket, a threading.Thread, a file-backed sqlite3 connection) are no longer re-run
REBUILT_FLOOR = 6
EQUAL, DIFFERS, LOST, NOT_RUN = "restored equal", "restored, differs", "lost", "not run"
REBUILT, REBUILT_DIFFERS = "rebuilt by replay", "rebuilt, differs"
REBUILD = "__import__('kernel_ext.snapshot').snapshot.rebuild_json()"

HELPERS = '''
def _eq(a, b):
    import numpy as np
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.shape == b.shape and a.dtype == b.dtype and bool(
            np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    return bool(a == b)

def _set(a, i, v):
    a[i] = v
    return True
'''

CHECKS = '''
import json as _json
_fid_out = {}
for _fid_name, _fid_check in _fid_checks.items():
    try:
        _fid_out[_fid_name] = "ok" if eval(_fid_check) else "false"
    except Exception as _fid_exc:
        _fid_out[_fid_name] = f"{type(_fid_exc).__name__}: {_fid_exc}"[:120]
print("FID" + _json.dumps(_fid_out))
'''


def _name(i: int) -> str:
    return f"fid{i:03d}"


def _sub(code: str, name: str) -> str:
    return re.sub(r"\bX(?=\b|_)", name, code)


def _run_cell(k: BareKernel, code: str) -> str | None:
    """None when the cell ran, else the error."""
    err: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "error":
            err.append(f"{msg['content']['ename']}: {msg['content']['evalue']}"[:160])

    reply = k.kc.execute_interactive(code, timeout=120, output_hook=hook)
    if reply["content"]["status"] == "ok":
        return None
    return err[0] if err else reply["content"].get("ename", "error")


def run_fidelity(snap: Path) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    k = BareKernel(snap)
    try:
        for i, (label, make, _check) in enumerate(KINDS):
            err = _run_cell(k, _sub(make, _name(i)))
            rows.append({"kind": label, "name": _name(i), "status": NOT_RUN if err else "", "why": err or ""})
    finally:
        k.kill_from_inside()
    k2 = BareKernel(snap)
    try:
        report = json.loads(k2.expr(RESTORE))
        lost = {f["name"]: f["reason"] for f in report["failed"] + report["skipped"]}
        restored = set(report["restored"])
        rebuild = json.loads(k2.expr(REBUILD, timeout=120))
        rebuilt = {k for k in rebuild["rebuilt"] if k.startswith("fid")}
        lost.update({k: f"{lost.get(k, '')}; replay: {why}" for k, why in rebuild["lost"].items()})
        checks = {r["name"]: _sub(KINDS[i][2], r["name"]) for i, r in enumerate(rows)
                  if not r["status"] and (r["name"] in restored or r["name"] in rebuilt)}
        k2.run(HELPERS + f"\n_fid_checks = {checks!r}\n")
        out = k2.run(CHECKS)["stdout"]
        results = json.loads(out[out.index("FID") + 3:].splitlines()[0])
    finally:
        k2.close()
    for r in rows:
        if r["status"]:
            continue
        if r["name"] in results:
            res = results[r["name"]]
            ok, bad = (EQUAL, DIFFERS) if r["name"] in restored else (REBUILT, REBUILT_DIFFERS)
            why = "" if r["name"] in restored else f"was: {lost.get(r['name'], '?').split(';')[0]}"
            r["status"], r["why"] = (ok, why) if res == "ok" else (bad, res)
        else:
            r["status"], r["why"] = LOST, lost.get(r["name"], "not in the restore report")
    return rows


def table(rows: list[dict[str, str]]) -> str:
    counts = {s: sum(r["status"] == s for r in rows)
              for s in (EQUAL, DIFFERS, REBUILT, REBUILT_DIFFERS, LOST, NOT_RUN)}
    lines = [f"{len(rows)} kinds: " + ", ".join(f"{n} {s}" for s, n in counts.items()), "",
             "| # | kind | result | why |", "|---:|---|---|---|"]
    for i, r in enumerate(rows):
        why = r["why"].replace("|", "/").replace("\n", " ")
        lines.append(f"| {i} | {r['kind']} | {r['status']} | {why} |")
    return "\n".join(lines) + "\n"


def test_fidelity_floor(tmp_path):
    rows = run_fidelity(tmp_path / "snap")
    text = table(rows)
    if os.environ.get("RLM_FIDELITY_TABLE"):
        Path(os.environ["RLM_FIDELITY_TABLE"]).write_text(text)
    equal = [r["kind"] for r in rows if r["status"] == EQUAL]
    assert len(rows) >= 100
    assert len(equal) >= RESTORED_EQUAL_FLOOR, text
    assert sum(r["status"] == REBUILT for r in rows) >= REBUILT_FLOOR, text
    by_kind = {r["kind"]: r for r in rows}
    # identity kinds are part of the floor's meaning: name them so a regression says which
    for kind in ("aliases a = b, c = {'x': a}", "ndarray + slice view (shared)",
                 "DataFrame held in a dict", "object graph with a cycle (kernel class)",
                 "nested containers sharing members"):
        assert by_kind[kind]["status"] == EQUAL, by_kind[kind]
    assert by_kind["generator object"]["status"] == REBUILT
    assert "cannot pickle 'generator'" in by_kind["generator object"]["why"]


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        print(table(run_fidelity(Path(d) / "snap")))
