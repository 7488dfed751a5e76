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


def _run_in_kernel(tmp_path, code):
    """Start a kernel for a session under tmp_path/rlm, run `code`, stop it: (session, result)."""
    session = tmp_path / "rlm" / "sessions" / "s1"
    session.mkdir(parents=True)
    k = Kernel(session, Config(home=tmp_path / "rlm"))
    k.start()
    try:
        res = k.execute(code)
    finally:
        k.stop()
    assert res.status == "ok", res.shaped
    return session, res


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
    session, res = _run_in_kernel(
        tmp_path, "import os, IPython\nprint(IPython.paths.get_ipython_dir())\n"
        "import numpy, pandas\nx = list(range(10))\n"
        "import matplotlib, matplotlib.pyplot as plt\nplt.plot([1, 3])\n"
        "plt.show()\nprint(matplotlib.get_cachedir())")
    lines = res.shaped.strip().splitlines()
    ipdir, mpl = lines[0], lines[-1]
    assert any(line.startswith("[image: ") for line in lines), res.shaped
    assert ipdir.startswith(str(session / "runtime")), ipdir
    assert (session / "runtime" / "ipython").stat().st_mode & 0o777 == 0o700
    # matplotlib's font cache: in $RLM_HOME (the user has no matplotlib config to hide)
    assert mpl == str(tmp_path / "rlm" / "cache" / "matplotlib"), mpl
    assert any((tmp_path / "rlm" / "cache" / "matplotlib").glob("fontlist-*.json"))
    assert _tree(outside) == sorted(os.path.relpath(p, outside) for p in env.values())


def test_a_users_own_matplotlib_config_is_still_read(tmp_path, monkeypatch):
    """With a matplotlib config dir of the user's own, the kernel leaves MPLCONFIGDIR
    unset, so their matplotlibrc still applies."""
    config = tmp_path / "config"
    (config / "matplotlib").mkdir(parents=True)
    (config / "matplotlib" / "matplotlibrc").write_text("lines.linewidth: 7.25\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    monkeypatch.delenv("MPLCONFIGDIR", raising=False)
    _, res = _run_in_kernel(tmp_path, "import matplotlib\nprint(matplotlib.rcParams["
                            "'lines.linewidth'], matplotlib.get_configdir())")
    assert res.shaped.split() == ["7.25", str(config / "matplotlib")], res.shaped
    assert not (tmp_path / "rlm" / "cache").exists()


def test_a_dead_hosts_socket_dir_outside_the_session_is_removed(tmp_path):
    """A session dir too deep for AF_UNIX puts the sockets in a fallback dir under
    $XDG_RUNTIME_DIR or TMPDIR; a host SIGKILLed never removes it: the next start does
    (its owner is dead), a live owner's stays."""
    import subprocess
    import sys

    from rlm.kernel.runtime import IPC_OWNER, drop_stale_ipc_dirs

    runtime, base = tmp_path / "runtime", tmp_path / "xdg"
    runtime.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    dirs = {}
    for who, pid in (("dead", dead.pid), ("live", os.getppid())):
        d = base / f"rlm-{who}"
        (d / "k-1").mkdir(parents=True)
        (runtime / f"k{who}{IPC_OWNER}").write_text(f"{pid}\n{d}\n")
        dirs[who] = d
    drop_stale_ipc_dirs(runtime)
    assert not dirs["dead"].exists() and not (runtime / f"kdead{IPC_OWNER}").exists()
    assert dirs["live"].exists() and (runtime / f"klive{IPC_OWNER}").exists()


def test_a_deep_session_leaves_no_socket_dir_behind(tmp_path, monkeypatch):
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    session = tmp_path.joinpath(*["d" * 20] * 5)
    session.mkdir(parents=True)
    k = Kernel(session, Config(home=tmp_path))
    k.start()
    try:
        assert k.execute("1").status == "ok"
        assert [p.name[:4] for p in xdg.iterdir()] == ["rlm-"]
    finally:
        k.stop()
    assert list(xdg.iterdir()) == []
    assert not list((session / "runtime").glob("*.ipc-owner"))
