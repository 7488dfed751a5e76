"""In-process snapshot tests (fast): the touched-name rule, no-op snapshots, carry-over of
names that failed to restore, deletions, corrupt manifests, caps."""

from __future__ import annotations

import json
import os

from kernel_ext import snapshot
from kernel_ext.namespace import cell_names, referenced_globals
from tests.snapshot_shell import (  # the `shell` fixture comes from conftest
    manifest,
    new_kernel,
    run,
)


def test_cell_names_rule():
    c = cell_names("import numpy as np\nfrom os import path as p\ndf['x'] = y.z\ndel q\nlst.append(1)")
    assert {"np", "p", "df", "y", "lst", "q"} <= c.names and c.deleted == {"q"} and not c.full
    assert cell_names("exec('a=1')").full and cell_names("from m import *").full
    assert cell_names("get_ipython().run_line_magic('run', 'x.py')").full
    assert cell_names("def (").full


def test_referenced_globals_transitive():
    ns: dict = {"__name__": "__main__"}
    exec("L = []\nK = {}\ndef inner(): K['a'] = 1\ndef outer(v): L.append(v); inner()\n"
         "class C:\n    def m(self): return outer(1)\nobj = C()", ns)
    assert referenced_globals([ns["obj"]], ns) >= {"outer", "L", "inner", "K"}


def test_unchanged_namespace_writes_nothing(shell):
    run(shell, "import numpy as np\nx = np.arange(10)\ny = {'a': 1}")
    snapdir = snapshot._get(shell).path
    gen = manifest(shell)["generation"]
    def mtimes():  # cells.jsonl (kernel_ext.lineage) records cells that bind names, for replay
        return {n: os.stat(os.path.join(snapdir, n)).st_mtime_ns for n in os.listdir(snapdir)
                if n != "cells.jsonl"}

    before = mtimes()
    for code in ("1 + 1", "z_local = [i for i in range(3)]\ndel z_local", "print('hi')"):
        run(shell, code)
    assert manifest(shell)["generation"] == gen
    assert mtimes() == before
    stats = json.loads(snapshot.snapshot_now(shell))
    assert stats["saved"] == 0 and stats["bytes_written"] == 0


def test_mutation_through_function_and_alias_is_saved(shell):
    run(shell, "L = []\nalias = L\ndef add(v):\n    L.append(v)")
    run(shell, "add(3)")  # the cell names only `add`; L is its global
    report = new_kernel(shell)
    assert report["failed"] == []
    assert shell.user_ns["L"] == [3] and shell.user_ns["alias"] == [3]


def test_deleted_names_leave_manifest(shell):
    run(shell, "a = 1\nb = 2")
    run(shell, "del a")
    assert set(manifest(shell)["entries"]) == {"b"}


def test_failed_restore_is_carried_over(shell):
    run(shell, "class Gone:\n    pass\ne = Gone()\nkeep = [1, 2]")
    # make `e` unrestorable: its class's entry is removed from the manifest by hand
    snapdir = snapshot._get(shell).path
    m = manifest(shell)
    del m["entries"]["Gone"]
    with open(os.path.join(snapdir, "manifest.json"), "w") as fh:
        json.dump(m, fh)
    report = new_kernel(shell)
    assert report["restored"] == ["keep"]
    assert [f["name"] for f in report["failed"]] == ["e"]
    assert "Gone" in report["failed"][0]["reason"]
    run(shell, "keep.append(3)\nnew = 1")
    entries = manifest(shell)["entries"]
    assert set(entries) == {"e", "keep", "new"}  # e is still there for a later restore
    run(shell, "e = 'rebound'")
    assert manifest(shell)["entries"]["e"]["kind"] == "pickle"


def test_corrupt_manifest_is_reported_and_preserved(shell):
    run(shell, "a = 1")
    snapdir = snapshot._get(shell).path
    with open(os.path.join(snapdir, "manifest.json"), "w") as fh:
        fh.write("{not json")
    data_files = [n for n in os.listdir(snapdir) if n.endswith(".bin")]
    report = new_kernel(shell)
    assert report["snapshot_found"] is True and report["restored"] == []
    assert "corrupt manifest" in report["failed"][0]["reason"]
    run(shell, "b = 2")
    names = os.listdir(snapdir)
    assert any(n.startswith("manifest.corrupt-") for n in names)
    assert all(n in names for n in data_files)
    assert set(manifest(shell)["entries"]) == {"b"}


def test_missing_manifest(shell):
    assert json.loads(snapshot.restore_report_json(shell)) == {
        "restored": [], "failed": [], "skipped": [], "snapshot_found": False}


def test_caps_and_listing(shell, monkeypatch):
    monkeypatch.setenv("RLM_SNAPSHOT_VAR_CAP", str(1024 * 1024))
    monkeypatch.setenv("RLM_SNAPSHOT_TOTAL_CAP", str(3 * 1024 * 1024 // 2))
    snapshot.install(shell)
    run(shell, "import numpy as np\nbig = np.zeros(300_000)\nm1 = bytes(800_000)\nm2 = bytes(900_000)\n"
               "gen = (i for i in range(3))")
    entries = manifest(shell)["entries"]
    assert entries["big"]["reason"] == "over per-variable cap (2 MiB > 1 MiB)"
    assert entries["gen"]["reason"] == "TypeError: cannot pickle 'generator' object"
    assert entries["m1"]["kind"] == "pickle"
    assert entries["m2"]["reason"].startswith("over total snapshot cap")
    run(shell, "later = 1")
    shell.run_cell("fresh = 2\nraise ValueError")  # failed cell: no snapshot
    names = {e["name"]: e for e in json.loads(snapshot.namespace_json(shell))["names"]}
    assert names["fresh"]["reason"] == "not yet snapshotted" and not names["fresh"]["restorable"]
    assert names["later"]["restorable"] and names["big"]["restorable"] is False
    assert "In" not in names and "_" not in names and "np" in names
    run(shell, "pass")
    assert "fresh" in manifest(shell)["entries"]
