"""Rebuild by replay through the host's restart path: after a kernel death, names the
snapshot could not hold are rebuilt by re-running their recorded cells, and the model's
notice says which came back how; a cell that wrote a file outside the session is not
re-run and is named. An in-memory sqlite3 database (issue 25) is rebuilt with its writes;
a file-backed one is not re-run."""

from __future__ import annotations

import sqlite3

import pytest

from rlm.agent.notices import cell_content
from rlm.config import load_config
from rlm.kernel.kernel import Kernel

pytestmark = pytest.mark.timeout(180)


def test_crash_rebuilds_generator_in_memory_database_and_derived_value(tmp_path):
    out = tmp_path / "outside.txt"
    told: list[str] = []
    with Kernel(tmp_path / "session", load_config()) as k:
        k.replay_notice = told.append
        assert k.execute("import sqlite3\ncon = sqlite3.connect(':memory:')\n"
                         "con.execute('create table t (v int)')\n"
                         "con.executemany('insert into t values (?)', [(1,), (2,), (3,)])").status == "ok"
        assert k.execute("rows = [r[0] for r in con.execute('select v from t')]\n"
                         "gen = (v * 10 for v in rows)\nfirst = next(gen)\npair = (gen, con)").status == "ok"
        assert k.execute(f"with open({str(out)!r}, 'w') as fh:\n    fh.write('once')\n"
                         "stamp = (i for i in range(3))").status == "ok"
        died = k.execute("import os; os._exit(1)")
        rep = died.restart
        assert died.status == "died" and rep is not None
        assert rep.rebuilt == {"con": [0, 1], "gen": [0, 1], "pair": [0, 1]}, rep
        assert [c["cell"] for c in rep.replayed] == [0, 1]
        assert rep.not_replayed["stamp"].startswith("cell 2 not replayed: opens a file for writing (mode 'w')")
        assert len(told) == 1 and told[0].startswith("rebuilding con, gen, pair by re-running 2 recorded cell(s)")
        assert "[0] import sqlite3 …; [1] rows = [r[0] for r in con.execute('select v from t')] …" in told[0]
        notice = cell_content(died)
        assert "Rebuilt by re-running recorded cells (they could not be snapshotted): con (cells 0, 1), " \
               "gen (cells 0, 1), pair (cells 0, 1)." in notice
        assert "Not rebuilt by replay (only cells known to stay in the kernel are re-run; " in notice
        assert "stamp: cell 2 not replayed: opens a file for writing (mode 'w')" in notice
        res = k.execute("print(next(gen), pair[0] is gen, pair[1] is con, first, "
                        "con.execute('select count(*) from t').fetchone()[0])")
        assert res.shaped.strip() == "20 True True 10 3", res.shaped
    assert out.read_text() == "once"


def test_a_file_backed_database_is_not_reconnected_by_replay(tmp_path):
    db = tmp_path / "data.db"
    setup = sqlite3.connect(db)
    setup.execute("create table t (v int)")
    setup.executemany("insert into t values (?)", [(1,), (2,)])
    setup.commit()
    setup.close()
    with Kernel(tmp_path / "session", load_config()) as k:
        k.replay_notice = lambda line: None
        assert k.execute(f"import sqlite3\ncon = sqlite3.connect({str(db)!r})\n"
                         "con.execute('delete from t')\ncon.commit()").status == "ok"
        again = sqlite3.connect(db)
        again.execute("insert into t values (7)")
        again.commit()
        again.close()
        rep = k.restart("test")
        assert "con" not in rep.rebuilt
        assert "connects to a database that is not sqlite3 ':memory:'" in rep.not_replayed["con"]
    assert sqlite3.connect(db).execute("select v from t").fetchall() == [(7,)]  # not deleted again
