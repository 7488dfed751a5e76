"""Replay by allow-list (issue 26 item 2, issue 25's in-memory database): the pure planner
on recorded cells. Each bypass of the old deny-list — a destructive cell that also binds a
generator — is planned as NOT replayed, with the cell and the reason; cells known to stay
in the kernel (an in-memory sqlite3 database, a helper whose body is checked) are.

Records are built as the kernel builds them: IPython's transform (so `!cmd` becomes
`get_ipython().system(...)`), then `cell_record` with the namespace after the cell when a
test gives one; `kinds` are what the restored values are at replay time (`classify`)."""

from __future__ import annotations

import http.client
import os
import socket
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from IPython.core.inputtransformer2 import TransformerManager

from kernel_ext.lineage import cell_record, replay_plan
from kernel_ext.lineage_rules import classify

GEN = "\ngen = (i for i in range(3))"
_transform = TransformerManager().transform_cell


def user_fn() -> Any:
    """A function as a cell defines it (module __main__)."""
    ns: dict[str, Any] = {"__name__": "__main__"}
    exec("def f(*a):\n    return a", ns)
    return ns["f"]


def records(*cells: str, ns: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return [{**cell_record(_transform(c), ns), "code": c} for c in cells]


def plan(recs: list[dict[str, Any]], lost: list[str], held: dict[str, Any] | None = None):
    held = held or {}
    return replay_plan(lost, recs, set(held), kinds={k: classify(v) for k, v in held.items()})


def refused(recs: list[dict[str, Any]], held: dict[str, Any] | None = None, name: str = "gen") -> str:
    order, rebuilt, why = plan(recs, [name], held)
    assert order == [] and rebuilt == {}, (order, why)
    return why[name]


@pytest.mark.parametrize(("cell", "reason"), [
    ("import os\ngetattr(os, 'remove')('f')", "calls the result of an expression"),
    ("from os import remove as rm\nrm('f')", "imports os (not a pure data library)"),
    ("!rm -f f", "get_ipython() runs a shell command or magic"),
    ("%rm -f f", "get_ipython() runs a shell command or magic"),
    ("from pathlib import Path\nPath('p').open('w')", "imports pathlib"),
    ("mode = 'w'\nfh = open('p', mode)", "opens a file with a mode that is not a literal"),
    ("fh = open('p', 'r+')", "opens a file for writing (mode 'r+')"),
    ("fh = p.open('a')", "opens a file for writing (mode 'a')"),  # Path.open: the mode comes first
    ("import http.client\nc = http.client.HTTPConnection('localhost', 9)\nc.request('POST', '/')",
     "imports http.client"),
    ("import socket\ns = socket.create_connection(('localhost', 9))", "imports socket"),
    ("import subprocess\nsubprocess.run(['true'])", "imports subprocess"),
    ("__import__('os').remove('f')", "uses __import__"),
    ("import importlib\nimportlib.import_module('os').remove('f')", "imports importlib"),
    ("exec('import os')", "uses exec"),
    ("import os.path\nos.remove('f')", "imports os.path (not a pure data library)"),
    ("x = ().__class__.__base__.__subclasses__()", "uses the attribute __class__"),
    ("import numpy as np\nnp.save('a.npy', [1])", "uses np.save (leaves the kernel)"),
    ("import json\njson.dump({}, fh)", "uses json.dump"),
    ("import numpy as np\na = np.load('a.npy', allow_pickle=True)", "runs code a file holds"),
    ("print('x', file=fh)", "prints to a file"),
    ("import pandas as pd\npd.DataFrame().to_parquet('x.pq')", "to_parquet() acts outside the kernel"),
    ("import pandas as pd\ndf = pd.read_csv('https://example.com/x.csv')", "names a URL"),
    ("y = llm_query('hi')", "llm_query() calls a sub-model"),
    ("import sqlite3\ncon = sqlite3.connect('x.db')\ncon.execute('delete from t')",
     "connects to a database that is not sqlite3 ':memory:'"),
    ("for f in fs:\n    f('x')", "calls f, a value bound at run time"),
    ("d['rm']('x')", "calls the result of an expression"),
])
def test_a_destructive_cell_that_binds_a_generator_is_not_replayed(cell, reason):
    why = refused(records(cell + GEN))
    assert why.startswith("cell 0 not replayed: ") and reason in why, why


# Issue 40 item 5: a module being allowed is not enough. Calls into a module that reaches
# files are replayed only when they are known reads (IO_PARTS) with a reading mode
# (MODE_ARGS); modules that write or hold files are not allowed at all.
@pytest.mark.parametrize(("cell", "reason"), [
    ("import gzip\nwith gzip.GzipFile(p, 'wb'): pass", "calls gzip.GzipFile with mode='wb' (writes)"),
    ("import lzma\nf = lzma.LZMAFile(p, mode='a')", "calls lzma.LZMAFile with mode='a' (writes)"),
    ("import bz2\nf = bz2.BZ2File(p, 'w')", "calls bz2.BZ2File with mode='w' (writes)"),
    ("from gzip import GzipFile as G\nf = G(p, 'wb')", "calls gzip.GzipFile with mode='wb'"),
    ("import gzip\nm = 'wb'\nf = gzip.GzipFile(p, m)", "a mode that is not a literal"),
    ("import gzip\nf = gzip.GzipFile(*args)", "with * or ** arguments"),
    ("import pyarrow.parquet as pq\npq.write_table(t, p)",
     "calls pyarrow.parquet.write_table (not a known read-only call)"),
    ("import pyarrow.fs\npyarrow.fs.LocalFileSystem().delete_file(p)",
     "calls pyarrow.fs.LocalFileSystem (not a known read-only call)"),
    ("import pyarrow as pa\nf = pa.OSFile(p, 'wb')", "uses pa.OSFile (leaves the kernel)"),
    ("import pandas as pd\nh = pd.io.common.get_handle(p, 'w')",
     "calls pandas.io.common.get_handle (not a known read-only call)"),
    ("import numpy as np\nm = np.load(p, mmap_mode='r+')", "calls numpy.load with mmap_mode='r+'"),
    ("import numpy as np\nm = np.load(p, 'w+')", "calls numpy.load with mmap_mode='w+'"),
    ("import numpy as np\nm = np.lib.format.open_memmap(p, mode='w+')",
     "calls numpy.lib.format.open_memmap (not a known read-only call)"),
    ("import numpy as np\nnp.save(p, a)", "uses np.save (leaves the kernel)"),
    ("import zipfile\nz = zipfile.ZipFile(p, 'w')", "imports zipfile (not a pure data library)"),
    ("import tarfile\nt = tarfile.open(p, 'w')", "imports tarfile (not a pure data library)"),
    ("import shelve\ndb = shelve.open(p)", "imports shelve (not a pure data library)"),
    ("import dbm\ndb = dbm.open(p, 'c')", "imports dbm (not a pure data library)"),
    ("df.to_csv(p)", "to_csv() writes a file"),
    ("df.to_parquet(p)", "to_parquet() acts outside the kernel"),
])
def test_a_write_through_an_allowed_module_is_not_replayed(cell, reason):
    why = refused(records(cell + GEN))
    assert why.startswith("cell 0 not replayed: ") and reason in why, why


def test_the_same_writes_through_held_values_are_caught():
    """`G = gzip.GzipFile` (or `np.load`) held from an earlier cell, called with a writing
    mode in this one: the namespace says what G is, at record time."""
    import gzip

    import numpy as np

    for cell, ns, reason in (("f = G(p, 'wb')", {"G": gzip.GzipFile}, "gzip.GzipFile with mode='wb'"),
                             ("m = L(p, mmap_mode='r+')", {"L": np.load}, "mmap_mode='r+'")):
        assert reason in refused(records(cell + GEN, ns={**ns, "p": "x"})), cell


def test_reads_through_the_same_modules_stay_replayable():
    recs = records("import gzip, bz2, lzma, io\nimport numpy as np\nimport pandas as pd\n"
                   "import pyarrow.parquet as pq\n"
                   "a = gzip.GzipFile(p)\nb = gzip.GzipFile(p, 'rb')\nc = bz2.BZ2File(p, mode='r')\n"
                   "d = lzma.open(p)\ne = np.load(p)\nf = np.load(p, mmap_mode='r')\n"
                   "g = pd.read_csv(p)\nh = pq.read_table(p)\ni = io.BytesIO(b'x')\n"
                   "j = pd.io.parsers.read_csv(p)\nk = lzma.LZMAFile(p, 'rb')")
    assert recs[0]["effects"] == []


def test_a_record_made_under_older_rules_is_checked_again_at_replay():
    """A session recorded before this rule (its record says nothing of GzipFile's mode):
    at replay the code is checked again by today's rules, so the write is not re-run."""
    from kernel_ext.lineage import rechecked
    from kernel_ext.lineage_rules import RULES_VERSION

    (rec,) = records("import gzip\nwith gzip.GzipFile(p, 'wb'): pass" + GEN)
    old = {**rec, "effects": [], "rules": RULES_VERSION - 1}
    assert plan([old], ["gen"], {"p": "x"})[0] == [0]  # as the old record stands: re-run
    again = rechecked(old, _transform)
    assert "calls gzip.GzipFile with mode='wb' (writes)" in refused([again], {"p": "x"})
    today = {**rec, "rules": RULES_VERSION}  # as record_line writes it
    assert rechecked(today, _transform) is today  # taken as it is


def test_names_bound_to_outside_functions_are_caught_through_the_namespace():
    """`rm = os.remove` in an earlier cell, `rm(f)` later: the record-time namespace says
    what rm is, and so does the restored value at replay time."""
    rec = records("rm(p)" + GEN, ns={"rm": os.remove, "p": "f"})
    assert "uses rm (posix.remove)" in refused(rec) or "uses rm (nt.remove)" in refused(rec)
    rec = records("rm(p)" + GEN)  # recorded without a namespace: the restored value decides
    assert "it uses rm, restored from the snapshot as posix.remove" in refused(rec, {"rm": os.remove})


def test_a_helper_from_an_earlier_cell_is_checked_by_its_recorded_definition():
    recs = records("import os\ndef wipe(p):\n    os.remove(p)", "wipe('f')" + GEN)
    why = refused(recs, {"wipe": user_fn(), "os": os})
    assert why == "cell 0 not replayed: imports os (not a pure data library) (cell 1 needs wipe from it)"
    # the body reaches os through a name an earlier cell imported
    recs = records("import os", "def wipe(p):\n    os.remove(p)", "wipe('f')" + GEN)
    why = refused(recs, {"wipe": user_fn(), "os": os})
    assert why.startswith("cell 1 not replayed: it uses os, restored from the snapshot as module os")
    # a helper defined where no record shows it (a cell that failed) is never trusted
    why = refused(records("wipe('f')" + GEN), {"wipe": user_fn()})
    assert "it uses wipe, a function or class restored from the snapshot that no earlier " \
           "recorded cell defines" in why


def test_a_checked_helper_is_redefined_from_its_cell_then_used():
    recs = records("def double(v):\n    return v * 2", "n = 1", "gen = (double(v) for v in range(n))")
    order, rebuilt, why = plan(recs, ["gen"], {"double": user_fn(), "n": 1})
    assert order == [0, 2] and rebuilt == {"gen": [0, 2]} and why == {}


def test_restored_objects_whose_methods_leave_the_kernel_are_not_used():
    conn = http.client.HTTPConnection("localhost", 9)  # picklable: it comes back restored
    why = refused(records("conn.request('POST', '/', 'x')" + GEN), {"conn": conn})
    assert why == "cell 0 not replayed: it uses conn, restored from the snapshot as a " \
                  "http.client.HTTPConnection object"
    why = refused(records("p.unlink()" + GEN), {"p": Path("f")})
    assert "unlink() acts outside the kernel" in why
    why = refused(records("s2 = p.read_text()" + GEN), {"p": Path("f")})
    assert "restored from the snapshot as a pathlib." in why
    why = refused(records("funcs['x']('f')" + GEN), {"funcs": {"x": os.remove}})
    assert "calls the result of an expression" in why
    why = refused(records("ys = list(map(handlers['x'], [1]))" + GEN), {"handlers": {"x": os.remove}})
    assert "restored from the snapshot as holds posix.remove" in why


def test_socket_and_http_clients_held_at_record_time():
    with socket.socket() as s:
        rec = records("s.sendall(b'x')" + GEN, ns={"s": s})
    assert "sendall() acts outside the kernel" in refused(rec)
    rec = records("c.getresponse()" + GEN, ns={"c": http.client.HTTPConnection("localhost", 9)})
    assert "calls c.getresponse (a http.client.HTTPConnection object)" in refused(rec)


def test_an_in_memory_database_is_rebuilt_with_its_writes():
    """issue 25: `execute()` on sqlite3.connect(':memory:') never leaves the kernel."""
    mem = sqlite3.connect(":memory:")
    recs = records("import sqlite3\ncon = sqlite3.connect(':memory:')",
                   "con.execute('create table t (v int)')\ncon.executemany('insert into t values (?)', [(1,), (2,)])",
                   "cur = con.cursor()",
                   "cur.execute('update t set v = v + 1')\ncon.commit()",
                   "total = con.execute('select sum(v) from t').fetchone()[0]",
                   ns={"con": mem, "sqlite3": sqlite3})
    order, rebuilt, why = plan(recs, ["con", "cur"], {"sqlite3": sqlite3, "total": 5})
    assert why == {} and order == [0, 1, 2, 3, 4]  # cell 4 reads through con: it counts as a change
    assert rebuilt == {"con": [0, 1, 2, 3, 4], "cur": [0, 1, 2, 3]}


def test_sql_on_anything_but_an_in_memory_database_is_not_replayed():
    recs = records("import sqlite3\ncon = sqlite3.connect('data.db')", "con.execute('delete from t')" + GEN)
    assert refused(recs) == "cell 1 not replayed: it runs SQL on con, which is not an in-memory sqlite3 database"
    recs = records("import sqlite3\ncon = sqlite3.connect('data.db')\ngen = (r for r in con.execute('select 1'))")
    assert "connects to a database that is not sqlite3 ':memory:'" in refused(recs)
    recs = records("con.execute('delete from t')" + GEN)  # a connection no record shows
    assert "it runs SQL on con, which is not an in-memory sqlite3 database" in refused(recs)
    recs = records("import sqlite3\ncon = sqlite3.connect(':memory:')",
                   "con.execute(\"attach database 'x.db' as x\")" + GEN)
    assert "ATTACH" in refused(recs)
    recs = records("import sqlite3\ncon = sqlite3.connect(':memory:')", "con.execute(sql)" + GEN)
    assert "runs SQL that is not a literal" in refused(recs, {"sql": "delete from t"})


def test_pure_data_cells_stay_replayable():
    recs = records("import pandas as pd\nimport numpy as np\nimport re, json, math, collections, itertools\n"
                   "df = pd.DataFrame({'a': [1, 2]})\npat = re.compile('a+')\ntext = df.to_csv()\n"
                   "gen = (math.sqrt(v) for v in np.asarray(df['a']))\n"
                   "fh = open('notes.txt')\nfirst = fh.readline()\nfrom os.path import join\n"
                   "import os.path as osp\nwhere = join(osp.dirname('a/b'), 'c')")
    assert recs[0]["effects"] == []


def test_the_users_announcement_escapes_what_the_kernel_sent():
    """The line printed before a replay quotes cell code (the model's): escapes and bidi
    overrides reach the terminal escaped."""
    from rlm.kernel.state import replay_announcement

    line = replay_announcement({"cells": [{"cell": 0, "code": "x = 1  # \x1b]52;c;YQ==\x07 \u202e"}],
                                "rebuilt": {"gen\x1b[2J": [0]}}, True)
    assert line is not None and "\x1b" not in line and "\u202e" not in line and "\x07" not in line
    assert "[0] x = 1  # \\x1b]52;c;YQ==\\x07 \\u202e" in line and "gen\\x1b[2J" in line
    assert replay_announcement({"cells": [], "rebuilt": {}}, True) is None


def test_an_instance_of_a_class_a_cell_defined_is_not_used_as_restored():
    """Its methods came back from the snapshot (by value): unchecked, never run by replay."""
    ns: dict[str, Any] = {"__name__": "__main__"}
    exec("class Wiper:\n    def go(self):\n        return 1\nw = Wiper()", ns)
    why = refused(records("n = w.go()" + GEN), {"w": ns["w"]})
    assert "it uses w, restored from the snapshot as a Wiper object of a class defined in a cell" in why


FIXTURE = Path(__file__).parent / "fixtures" / "replay" / "session_cells.jsonl"


def test_a_recorded_session_with_every_bypass_plans_only_its_pure_cells():
    """tests/fixtures/replay/session_cells.jsonl: the cells.jsonl an IPython shell with
    kernel_ext's snapshots wrote for the bypasses of issue 26 (getattr, an alias, `!rm`, a
    helper from an earlier cell, Path.open('w'), a mode in a variable, an HTTP client
    restored from the snapshot), an in-memory database and a pure helper. After a restart
    the kernel holds what the snapshot restored (the picklable names)."""
    from kernel_ext.lineage import parse_records

    recs = parse_records(FIXTURE.read_text().splitlines())
    held = {"os": os, "rm": os.remove, "_os": os, "wipe": user_fn(), "Path": Path, "mode": "a",
            "conn": http.client.HTTPConnection("127.0.0.1", 9), "sqlite3": sqlite3,
            "double": user_fn()}
    lost = [f"g{n}" for n in range(1, 9)] + ["db", "rows"]
    order, rebuilt, why = plan(recs, lost, held)
    assert rebuilt == {"db": [9, 10], "rows": [9, 10], "g8": [11, 12]} and order == [9, 10, 11, 12]
    assert why == {
        "g1": "cell 0 not replayed: calls the result of an expression (e.g. getattr(...)(...), d[k](...)); "
              "imports os (not a pure data library); uses getattr (attribute-obfuscated access or code "
              "from a string); uses os (module os)",
        "g2": "cell 1 not replayed: imports os (not a pure data library); uses rm (posix.remove)",
        "g3": "cell 2 not replayed: get_ipython() runs a shell command or magic; system() acts outside "
              "the kernel (writes, runs or sends)",
        "g4": "cell 3 not replayed: imports os (not a pure data library); uses _os (module os); uses "
              "_os.remove (posix.remove) (cell 4 needs wipe from it)",
        "g5": "cell 5 not replayed: imports pathlib (not a pure data library); opens a file for writing "
              "(mode 'w'); uses Path (pathlib.Path); write() acts outside the kernel (writes, runs or sends)",
        "g6": "cell 6 not replayed: opens a file with a mode that is not a literal (counts as writing); "
              "write() acts outside the kernel (writes, runs or sends)",
        "g7": "cell 8 not replayed: calls conn.request (a http.client.HTTPConnection object)",
    }
