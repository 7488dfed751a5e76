"""A kernel start (and a few cells) writes nothing under HOME, TMPDIR or the XDG dirs:
IPython's profile dir (it makes ~/.ipython/profile_default at start) lives in the
session's private runtime dir (issue 15, the soak's "nothing outside $RLM_HOME")."""

from __future__ import annotations

import os

import pytest

from rlm.config import Config
from rlm.kernel import Kernel, runtime

pytestmark = pytest.mark.timeout(120)


def _tree(root):
    return sorted(os.path.relpath(os.path.join(d, n), root)
                  for d, dirs, files in os.walk(root) for n in dirs + files)


def _run_in_kernel(tmp_path, code, sandbox=None):
    """Start a kernel for a session under tmp_path/rlm, run `code`, stop it: (session, result)."""
    session = tmp_path / "rlm" / "sessions" / "s1"
    session.mkdir(parents=True)
    k = Kernel(session, Config(home=tmp_path / "rlm", sandbox=sandbox))
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
    made = [os.path.relpath(p, outside) for p in env.values()]
    if runtime.sandboxed(Config()):  # the user's rlm config dir, made (empty) by the host
        made.append("config/rlm")  # so a sandboxed cell cannot create it (rlm.trust)
    assert _tree(outside) == sorted(made)


@pytest.mark.parametrize("sandbox", [False, True])
def test_a_users_own_matplotlib_config_is_still_read(tmp_path, monkeypatch, sandbox):
    """With a matplotlib config dir of the user's own, an unsandboxed kernel leaves
    MPLCONFIGDIR unset, so their matplotlibrc still applies. The sandbox shows no HOME:
    the kernel's matplotlib dir is rlm's cache and the user's matplotlibrc is shown
    read-only (MATPLOTLIBRC), so it applies there too."""
    if sandbox and not runtime.sandboxed(Config(sandbox=None)):
        pytest.skip("no user namespaces here")
    config = tmp_path / "config"
    (config / "matplotlib").mkdir(parents=True)
    (config / "matplotlib" / "matplotlibrc").write_text("lines.linewidth: 7.25\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    monkeypatch.delenv("MPLCONFIGDIR", raising=False)
    _, res = _run_in_kernel(tmp_path, "import matplotlib\nprint(matplotlib.rcParams["
                            "'lines.linewidth'], matplotlib.get_configdir())",
                            sandbox=sandbox)
    cache = tmp_path / "rlm" / "cache" / "matplotlib"
    assert res.shaped.split() == ["7.25", str(cache if sandbox else config / "matplotlib")], \
        res.shaped
    assert sorted(os.listdir(config / "matplotlib")) == ["matplotlibrc"]
    if not sandbox:
        assert not (tmp_path / "rlm" / "cache").exists()


def test_a_dead_hosts_socket_dir_outside_the_session_is_removed(tmp_path):
    """A session dir too deep for AF_UNIX puts the sockets in a fallback dir under
    $XDG_RUNTIME_DIR or TMPDIR; a host SIGKILLed never removes it: the next start does
    (its owner is dead), a live owner's stays."""
    import subprocess
    import sys

    from rlm.kernel.runtime import IPC_OWNER, drop_stale_ipc_dirs

    runtime, base = tmp_path / "host", tmp_path / "xdg"
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


def test_a_socket_dir_whose_session_never_starts_again_is_removed_by_any_start(tmp_path):
    """A child session's host killed with its parent never starts again: its fallback dir
    names its owner inside, and the next kernel start of any session sweeps it; a live
    owner's, one without an owner file, and another name's stay."""
    import subprocess
    import sys

    from rlm.kernel.runtime import IPC_OWNER, sweep_orphan_ipc_dirs

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    dirs = {name: tmp_path / name for name in ("rlm-dead", "rlm-live", "rlm-bare", "other")}
    for d in dirs.values():
        d.mkdir()
    (dirs["rlm-dead"] / IPC_OWNER).write_text(f"{dead.pid}\n{dirs['rlm-dead']}\n")
    (dirs["rlm-live"] / IPC_OWNER).write_text(f"{os.getppid()}\n{dirs['rlm-live']}\n")
    (dirs["other"] / IPC_OWNER).write_text(f"{dead.pid}\n")
    sweep_orphan_ipc_dirs(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other", "rlm-bare", "rlm-live"]

def test_a_deep_session_leaves_no_socket_dir_behind(tmp_path, monkeypatch):
    # not tmp_path/xdg, where the other XDG dirs of conftest live; under $RLM_HOME here
    # (home=tmp_path), so a sandboxed kernel sees it only through its own bind
    xdg = tmp_path / "run-user"
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
    assert not list((session / "host").glob("*.ipc-owner"))
    assert not list((session / "runtime").glob("*.ipc-owner"))


def test_a_runtime_dir_too_deep_for_sockets_falls_back_to_a_short_one(tmp_path, monkeypatch):
    """$XDG_RUNTIME_DIR itself too deep for AF_UNIX (a deep test or CI dir): the sockets go
    under the temp dir instead; with no short dir at all, one clear error names the fix."""
    import tempfile

    from rlm.errors import KernelError

    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(deep))
    assert str(runtime.socket_base()) == tempfile.gettempdir()
    monkeypatch.setattr(runtime, "AF_UNIX_PATH_MAX", 10)
    with pytest.raises(KernelError, match="too deep for the kernel's unix sockets"):
        runtime.socket_base()
