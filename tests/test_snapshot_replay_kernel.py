"""Rebuild by replay through the host's restart path: after a kernel death, names the
snapshot could not hold are rebuilt by re-running their recorded cells, and the model's
notice says which came back how; a cell that wrote a file outside the session is not
re-run and is named."""

from __future__ import annotations

import sqlite3

import pytest

from rlm.agent.notices import cell_content
from rlm.config import load_config
from rlm.kernel.kernel import Kernel

pytestmark = pytest.mark.timeout(180)


def test_crash_rebuilds_generator_connection_and_derived_value(tmp_path):
    db, out = tmp_path / "data.db", tmp_path / "outside.txt"
    setup = sqlite3.connect(db)
    setup.execute("create table t (v int)")
    setup.executemany("insert into t values (?)", [(1,), (2,), (3,)])
    setup.commit()
    setup.close()
    with Kernel(tmp_path / "session", load_config()) as k:
        assert k.execute(f"import sqlite3\ncon = sqlite3.connect({str(db)!r})").status == "ok"
        assert k.execute("rows = [r[0] for r in con.execute('select v from t')]\n"
                         "gen = (v * 10 for v in rows)\nfirst = next(gen)\npair = (gen, con)").status == "ok"
        assert k.execute(f"with open({str(out)!r}, 'w') as fh:\n    fh.write('once')\n"
                         "stamp = (i for i in range(3))").status == "ok"
        died = k.execute("import os; os._exit(1)")
        rep = died.restart
        assert died.status == "died" and rep is not None
        assert rep.rebuilt == {"con": [0, 1], "gen": [0, 1], "pair": [0, 1]}, rep
        lost = {d["name"]: d["reason"] for d in rep.failed + rep.skipped}
        assert "not rebuilt: cell 2 not replayed: opens a file for writing (mode 'w')" in lost["stamp"]
        notice = cell_content(died)
        assert "Rebuilt by re-running recorded cells (they could not be snapshotted): con (cells 0, 1), " \
               "gen (cells 0, 1), pair (cells 0, 1)." in notice
        res = k.execute("print(next(gen), pair[0] is gen, pair[1] is con, first, "
                        "con.execute('select count(*) from t').fetchone()[0])")
        assert res.shaped.strip() == "20 True True 10 3", res.shaped
    assert out.read_text() == "once"
