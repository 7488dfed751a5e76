"""kernel_ext.fileops: files read and written by user code, recorded by an audit hook."""

from __future__ import annotations

import json
import os

import pytest
from test_snapshot_kernel import BareKernel

from kernel_ext import fileops


@pytest.mark.timeout(60)
def test_pandas_csv_round_trip_is_recorded(tmp_path):
    k = BareKernel(tmp_path / "snap")
    try:
        out = tmp_path / "data" / "out.csv"
        k.run(f"import os, pandas as pd\nos.makedirs({str(out.parent)!r}, exist_ok=True)\n"
              f"pd.DataFrame({{'a': [1, 2]}}).to_csv({str(out)!r}, index=False)\n"
              f"back = pd.read_csv({str(out)!r})\nassert list(back['a']) == [1, 2]")
        ops = json.loads(k.expr("__import__('kernel_ext.fileops').fileops.file_ops_json()"))
        assert str(out) in ops["modified"] and str(out) in ops["read"]
        assert not [p for p in ops["read"] + ops["modified"] if "site-packages" in p or "/snap/" in p]
        k.expr("__import__('kernel_ext.fileops').fileops.reset_file_ops()")
        assert json.loads(k.expr("__import__('kernel_ext.fileops').fileops.file_ops_json()")) == {
            "read": [], "modified": []}
    finally:
        k.close()


def test_hook_rules(tmp_path, monkeypatch):
    monkeypatch.setattr(fileops, "_read", set())
    monkeypatch.setattr(fileops, "_modified", set())
    monkeypatch.setattr(fileops, "_enabled", True)
    monkeypatch.setattr(fileops, "_in_cell", True)
    monkeypatch.setattr(fileops, "_ignored_prefixes", ("/proc/", "/usr/lib/"))
    fileops._hook("open", ("/x/a.txt", "r", 0))
    fileops._hook("open", ("/x/b.txt", "a+", 0))
    fileops._hook("open", ("/x/c.txt", None, os.O_WRONLY | os.O_CREAT))
    fileops._hook("open", ("/proc/self/status", "r", 0))
    fileops._hook("open", ("/usr/lib/python3/x.py", "rb", 0))
    fileops._hook("open", (3, "r", 0))  # a file descriptor: not a path
    fileops._hook("os.rename", ("/x/c.txt", "/x/d.txt", None, None))
    fileops._hook("shutil.copyfile", ("/x/a.txt", "/x/e.txt"))
    assert fileops.file_ops() == {"read": ["/x/a.txt"],
                                  "modified": ["/x/b.txt", "/x/c.txt", "/x/d.txt", "/x/e.txt"]}
    monkeypatch.setattr(fileops, "_enabled", False)  # uninstalled: the hook does nothing
    fileops._hook("open", ("/x/z.txt", "r", 0))
    assert "/x/z.txt" not in fileops.file_ops()["read"]
    monkeypatch.setattr(fileops, "MAX_PATHS", 5)
    monkeypatch.setattr(fileops, "_enabled", True)
    for i in range(10):
        fileops._hook("open", (f"/x/many{i}", "w", 0))
    assert len(fileops.file_ops()["modified"]) == 5
    # outside a user cell (kernel start-up, host requests) nothing is recorded
    monkeypatch.setattr(fileops, "_in_cell", False)
    fileops.reset_file_ops()
    fileops._hook("open", ("/x/outside.txt", "w", 0))
    assert fileops.file_ops() == {"read": [], "modified": []}
    # anonymous temp files are scratch, named ones are not
    monkeypatch.setattr(fileops, "_in_cell", True)
    fileops._hook("open", (fileops._TMP + "ab12cd_9", "w", 0))
    fileops._hook("open", (fileops._TMP + "report.csv", "w", 0))
    assert fileops.file_ops()["modified"] == [fileops._TMP + "report.csv"]
