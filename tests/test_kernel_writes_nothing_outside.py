"""A kernel start (and a few cells) writes nothing under HOME, TMPDIR or the XDG dirs:
IPython's profile dir (it makes ~/.ipython/profile_default at start) lives in the
session's private runtime dir (issue 15, the soak's "nothing outside $RLM_HOME")."""

from __future__ import annotations

import os

import pytest

from rlm.config import Config
from rlm.kernel import Kernel

pytestmark = pytest.mark.timeout(120)


def _tree(root):
    return sorted(os.path.relpath(os.path.join(d, n), root)
                  for d, dirs, files in os.walk(root) for n in dirs + files)


def test_kernel_start_writes_nothing_under_home(tmp_path, monkeypatch):
    outside = tmp_path / "outside"
    env = {"HOME": outside / "home", "TMPDIR": outside / "tmp",
           "XDG_CONFIG_HOME": outside / "config", "XDG_CACHE_HOME": outside / "cache",
           "XDG_DATA_HOME": outside / "data", "XDG_STATE_HOME": outside / "state"}
    for name, path in env.items():
        path.mkdir(parents=True)
        monkeypatch.setenv(name, str(path))
    monkeypatch.delenv("IPYTHONDIR", raising=False)
    monkeypatch.delenv("MPLCONFIGDIR", raising=False)
    monkeypatch.chdir(outside)
    session = tmp_path / "rlm" / "sessions" / "s1"
    session.mkdir(parents=True)
    k = Kernel(session, Config(home=tmp_path / "rlm"))
    k.start()
    try:
        res = k.execute("import os, IPython\nprint(IPython.paths.get_ipython_dir())\n"
                        "import numpy, pandas\nx = list(range(10))")
        assert res.status == "ok", res.shaped
        ipdir = res.shaped.strip().splitlines()[0]
        assert ipdir.startswith(str(session / "runtime")), ipdir
        assert (session / "runtime" / "ipython").stat().st_mode & 0o777 == 0o700
    finally:
        k.stop()
    assert _tree(outside) == sorted(os.path.relpath(p, outside) for p in env.values())
