"""A cell's result as its session entry holds it (rlm.kernel.types.CellResult.to_dict):
what dataclasses.asdict gives, as copies the entry owns."""

from __future__ import annotations

from dataclasses import asdict

from rlm.kernel.types import CellResult, Output, RestoreReport


def test_to_dict_is_asdict_and_owns_its_containers():
    r = CellResult(
        status="died", execution_count=5, duration_s=0.004, shaped="10\n", chars_total=3,
        outputs=[Output(kind="stream", name="stdout", text="10\n"),
                 Output(kind="display_data", data={"text/plain": "x", "application/json": {"a": [1]}},
                        metadata={"isolated": True}, refs={"image/png": "artifacts/a.png"}),
                 Output(kind="error", ename="E", evalue="v", traceback=["t1", "t2"])],
        files_read=["a.csv"], died_cause="signal SIGKILL",
        restart=RestoreReport(restored=["a"], summaries={"a": "int"}, failed=[{"name": "g", "reason": "r"}]))
    d = r.to_dict()
    assert d == asdict(r) and CellResult.from_dict(d) == r
    d["outputs"][2]["traceback"].append("t3")
    d["files_read"].append("b.csv")
    d["restart"]["restored"].append("b")
    assert r.outputs[2].traceback == ["t1", "t2"] and r.files_read == ["a.csv"]
    assert r.restart is not None and r.restart.restored == ["a"]
    assert CellResult(status="ok").to_dict() == asdict(CellResult(status="ok"))
