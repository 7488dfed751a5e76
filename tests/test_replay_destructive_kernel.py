"""Issue 26 item 2 end to end: cells that delete or rewrite files, or connect out, by
every route the old deny-list missed, each also binding a generator (which no snapshot
holds). After a kernel death and after a resume (a new Kernel on the session), none of
them is re-run: the files the test put back are untouched, the local listener gets no
second connection, and the report names each skipped cell and why."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from as_nobody import rerun_as_nobody

from rlm.agent.notices import restored_on_start
from rlm.config import load_config
from rlm.kernel.kernel import Kernel

pytestmark = pytest.mark.timeout(240)


def _cells(d, port):
    f = {n: str(d / f"{n}.txt") for n in ("a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k")}
    npy = str(d / "m.npy")
    return f, [
        ("g1", f"import os\ngetattr(os, 'remove')({f['a']!r})\ng1 = (i for i in range(3))",
         "calls the result of an expression"),
        ("g2", f"from os import remove as rm\nrm({f['b']!r})\ng2 = (i for i in range(3))",
         "imports os (not a pure data library)"),
        ("g3", f"!rm -f {f['c']}\ng3 = (i for i in range(3))", "get_ipython() runs a shell command or magic"),
        ("wipe", "import os as _os\ndef wipe(p):\n    _os.remove(p)", None),
        ("g4", f"wipe({f['d']!r})\ng4 = (i for i in range(3))", "(cell 4 needs wipe from it)"),
        ("g5", f"from pathlib import Path\nPath({f['e']!r}).open('w').write('again')\ng5 = (i for i in range(3))",
         "imports pathlib"),
        ("g6", f"mode = 'a'\nwith open({f['f']!r}, mode) as fh:\n    fh.write('again')\ng6 = (i for i in range(3))",
         "opens a file with a mode that is not a literal (counts as writing)"),
        ("g7", f"import socket as _s\n_c = _s.create_connection(('127.0.0.1', {port}))\n_c.close()\n"
               "g7 = (i for i in range(3))", "imports socket"),
        # issue 40 item 5: writes through modules the allow-list allows
        ("g8", f"import gzip\nwith gzip.GzipFile({f['h']!r}, 'wb'): pass\ng8 = (i for i in range(3))",
         "calls gzip.GzipFile with mode='wb' (writes)"),
        ("g9", f"import lzma\nwith lzma.LZMAFile({f['i']!r}, mode='a') as z:\n    z.write(b'again')\n"
               "g9 = (i for i in range(3))", "calls lzma.LZMAFile with mode='a' (writes)"),
        ("g10", f"import bz2\nbz2.BZ2File({f['j']!r}, 'w').close()\ng10 = (i for i in range(3))",
         "calls bz2.BZ2File with mode='w' (writes)"),
        ("g11", f"import pandas as pd\nh = pd.io.common.get_handle({f['k']!r}, 'w')\nh.close()\n"
                "g11 = (i for i in range(3))", "pandas.io.common.get_handle"),
        ("g12", f"import numpy as np\nm = np.load({npy!r}, mmap_mode='r+')\nm[0] = 99\nm.flush()\n"
                "del m\ng12 = (i for i in range(3))", "calls numpy.load with mmap_mode='r+' (writes)"),
    ]


def _put_back(files):
    for p in files.values():
        with open(p, "w") as fh:
            fh.write("original")
    npy = Path(next(iter(files.values()))).parent / "m.npy"
    npy.write_bytes(NPY)


def _npy() -> bytes:
    import io

    import numpy as np

    buf = io.BytesIO()
    np.save(buf, np.arange(4))
    return buf.getvalue()


NPY = _npy()


def _check(rep, files, listener, cells):
    for name, _, reason in cells:
        if reason is None:
            continue
        assert name not in rep.rebuilt, rep
        assert reason in rep.not_replayed[name], (name, rep.not_replayed.get(name))
        assert rep.not_replayed[name].startswith("cell "), rep.not_replayed[name]
    for p in files.values():
        with open(p) as fh:
            assert fh.read() == "original", p  # not deleted, truncated or appended to
    npy = Path(next(iter(files.values()))).parent / "m.npy"
    assert npy.read_bytes() == NPY  # not written through a memory map
    with pytest.raises(BlockingIOError):
        listener.accept()  # no second connection


def test_destructive_cells_binding_generators_are_not_replayed(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    files, cells = _cells(d, listener.getsockname()[1])
    _put_back(files)
    told: list[str] = []
    # sandbox=False: g7 must reach this listener once to show it is not reached again (a
    # sandboxed kernel has no network, so the first run could not connect at all)
    with Kernel(tmp_path / "session", load_config().with_overrides(sandbox=False)) as k:
        k.replay_notice = told.append
        for _, code, _ in cells:
            res = k.execute(code)
            assert res.status == "ok", res.shaped
        listener.setblocking(True)
        listener.accept()[0].close()  # the one connection the cell made
        listener.setblocking(False)
        _put_back(files)
        died = k.execute("import os; os._exit(1)")
        assert died.status == "died" and died.restart is not None
        _check(died.restart, files, listener, cells)
        assert told == []  # nothing was re-run, so nothing was announced
    # `rlm resume`: a new kernel on the session
    k = Kernel(tmp_path / "session", load_config().with_overrides(sandbox=False))
    k.replay_notice = told.append
    try:
        rep = k.start()
        _check(rep, files, listener, cells)
        notice = restored_on_start(rep)
    finally:
        k.stop()
    assert "Not rebuilt by replay" in notice and "g4: cell 3 not replayed: " in notice
    listener.close()



def test_the_same_as_an_unprivileged_user():
    """Issue 26 'Tests must show': the repro above as an unprivileged user too."""
    rerun_as_nobody("test_replay_destructive_kernel.py::"
                    "test_destructive_cells_binding_generators_are_not_replayed")
