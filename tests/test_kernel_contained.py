"""Issue 26 item 1: a sandboxed kernel cannot write what steers the host (the session
log, `$RLM_HOME` with its config and locks, the user's rlm config dir), and no process a
cell starts outlives the run, `setsid` double-forks included (rlm/kernel/sandbox_exec.py,
rlm/kernel/reaper.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import psutil
import pytest
from as_nobody import as_nobody

from rlm import trust
from rlm.config import Config
from rlm.errors import KernelError
from rlm.kernel import Kernel, runtime
from tests.rlmcli import ANSWERED, call

WRITES = """
import errno, os
results = []
for p in {targets!r}:
    try:
        with open(p, "a") as f:
            f.write("forged\\n")
        results.append("wrote")
    except OSError as e:
        results.append(errno.errorcode[e.errno])
print(" ".join(results))
"""


def sandbox_available() -> bool:
    try:
        runtime.check_sandbox()
        return True
    except KernelError:
        return False


needs_sandbox = pytest.mark.skipif(not sandbox_available(), reason="no user namespaces here")


def targets(home: Path, session: Path) -> list[str]:
    (home / "config.toml").write_text("")
    return [str(session / "session.jsonl"), str(home / "config.toml"),
            str(session / "worker.lock"), str(trust.config_dir() / "trusted-files.json"),
            str(home / "new-file"), str(session / "worker-inbox-forged")]


@needs_sandbox
def test_a_sandboxed_cell_cannot_write_the_log_the_config_or_the_lock(tmp_path, _isolated_home):
    session = _isolated_home / "sessions" / "s1"
    session.mkdir(parents=True)
    (session / "session.jsonl").write_text("{}\n")
    (session / "worker.lock").write_text("")
    paths = targets(_isolated_home, session)
    with Kernel(session, Config(home=_isolated_home, cell_timeout=60, sandbox=True)) as k:
        shown = k.execute(WRITES.format(targets=paths)).shaped.strip()
        # what it needs still works: a name survives a restart through its snapshot
        k.execute("kept = 41 + 1")
        k.restart("test")
        assert k.execute("print(kept)").shaped.strip() == "42"
    assert shown == " ".join(["EROFS"] * len(paths))
    assert (session / "session.jsonl").read_text() == "{}\n"
    assert not (_isolated_home / "new-file").exists()


@needs_sandbox
def test_jupyters_runtime_dir_is_hidden_where_the_working_directory_shows_it(
        tmp_path, _isolated_home, monkeypatch):
    """Working in the home dir shows ~/.local/share/jupyter/runtime: a cell must neither
    read a running server's token there nor plant a server `rlm run --live` would join."""
    work = tmp_path / "home"
    runtime_dir = work / ".local" / "share" / "jupyter" / "runtime"
    runtime_dir.mkdir(parents=True)
    (runtime_dir / "jpserver-1.json").write_text('{"token": "tok-0123456789abcdef"}')
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime_dir))
    config = Config(home=_isolated_home, cell_timeout=60, sandbox=True, kernel_cwd=str(work))
    with Kernel(tmp_path / "s1", config) as k:
        seen = k.execute("import os\nprint(os.listdir('.local/share/jupyter/runtime'))").shaped
        planted = k.execute(WRITES.format(
            targets=[str(runtime_dir / "jpserver-2.json")])).shaped.strip()
        other = k.execute(WRITES.format(targets=[str(work / "notes.txt")])).shaped.strip()
    assert "jpserver" not in seen and "tok-" not in seen
    assert planted != "wrote" and not (runtime_dir / "jpserver-2.json").exists()
    assert other == "wrote"  # the working directory itself stays writable


@needs_sandbox
def test_a_session_outside_rlm_home_is_read_only_too(tmp_path, _isolated_home):
    session = tmp_path / "elsewhere" / "s1"  # `rlm resume ./elsewhere/s1`
    session.mkdir(parents=True)
    (session / "session.jsonl").write_text("{}\n")
    paths = [str(session / "session.jsonl"), str(session / "worker.lock")]
    with Kernel(session, Config(home=_isolated_home, cell_timeout=60, sandbox=True)) as k:
        assert k.execute(WRITES.format(targets=paths)).shaped.strip() == "EROFS EROFS"
        k.execute("kept = 1")  # its snapshot still works
    assert (session / "session.jsonl").read_text() == "{}\n"
    assert any((session / "snapshot").iterdir())


@needs_sandbox
def test_the_control_an_unsandboxed_cell_can(tmp_path, _isolated_home):
    session = _isolated_home / "sessions" / "s1"
    session.mkdir(parents=True)
    (session / "session.jsonl").write_text("{}\n")
    paths = targets(_isolated_home, session)[:2]
    # the control opts out of the default sandbox: it shows what the sandbox prevents
    with Kernel(session, Config(home=_isolated_home, cell_timeout=60, sandbox=False)) as k:
        assert k.execute(WRITES.format(targets=paths)).shaped.strip() == "wrote wrote"


UNPRIVILEGED = """
import os, sys
from pathlib import Path
from rlm.config import Config
from rlm.kernel import Kernel
home = Path(sys.argv[1])
session = home / "sessions" / "s1"
session.mkdir(parents=True)
(session / "session.jsonl").write_text("{}\\n")
(home / "config.toml").write_text("")
code = sys.argv[2]
with Kernel(session, Config(home=home, cell_timeout=60, sandbox=True)) as k:
    print(k.execute(code).shaped.strip())
"""


@needs_sandbox
def test_the_same_holds_for_an_unprivileged_user(tmp_path):
    base = Path(tempfile.mkdtemp(prefix="rlm-unpriv-"))
    try:
        os.chmod(base, 0o777)
        home = base / "home"
        cfg = base / "xdg"
        paths = [str(home / "sessions" / "s1" / "session.jsonl"), str(home / "config.toml"),
                 str(cfg / "rlm" / "trusted-files.json")]
        env = {**os.environ, "RLM_HOME": str(home), "XDG_CONFIG_HOME": str(cfg),
               "HOME": str(base)}
        argv = as_nobody([sys.executable, "-c", UNPRIVILEGED, str(home),
                          WRITES.format(targets=paths)], env)
        proc = subprocess.run(argv, env=env, cwd=base, capture_output=True, text=True,
                              timeout=180)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert proc.stdout.strip().splitlines()[-1] == "EROFS EROFS EROFS"
    finally:
        shutil.rmtree(base, ignore_errors=True)


# ------------------------------------------------------------ processes end with the run
# the grandchild: setsid, then exec with an EMPTY environment (no mark for the reaper to
# find), named by a token in its argv (in a PID namespace its own pid means nothing to the
# host). The exec'd program writes the pidfile itself, so the cell, which waits for that
# file, ends only once the exec is done; then it lingers until something kills it.
LINGER = "import sys, time\nopen(sys.argv[2], 'w').close()\ntime.sleep(600)"
DOUBLE_FORK = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execve(sys.executable, [sys.executable, "-c", {linger!r}, {token!r}, {pidfile!r}], {{}})
    os._exit(0)
os.wait()
while not os.path.exists({pidfile!r}):
    time.sleep(0.01)
print("forked")
"""


def _as_nobody(argv: list[str], env: dict[str, str], base: Path) -> list[str]:
    """argv as nobody (tests/as_nobody.py), at home in `base`, made world-writable."""
    for path in (base, *base.rglob("*")):
        os.chmod(path, 0o777 if path.is_dir() else 0o666)
    env.update(HOME=str(base), RLM_HOME=str(base / "home"), XDG_CONFIG_HOME=str(base / "xdg"),
               XDG_CACHE_HOME=str(base / "cache"), RLM_MODEL_CACHE=str(base / "models"))
    return as_nobody(argv, env)


@pytest.mark.parametrize("sandbox, user", [(False, "me"), (True, "me"), (False, "nobody"),
                                           (True, "nobody"), (None, "nobody")])
def test_a_setsid_child_does_not_outlive_the_run(tmp_path, sandbox, user):
    if sandbox and not sandbox_available():
        pytest.skip("no user namespaces here")
    base = Path(tempfile.mkdtemp(prefix="rlm-setsid-")) if user == "nobody" else tmp_path
    try:
        _setsid_case(base, sandbox, user)
    finally:
        if user == "nobody":
            shutil.rmtree(base, ignore_errors=True)


def _setsid_case(base: Path, sandbox: bool, user: str) -> None:
    pidfile = base / "child.pid"
    token = f"rlm-linger-{uuid.uuid4().hex}"
    model = base / "s.json"
    model.write_text(json.dumps([call(DOUBLE_FORK.format(pidfile=str(pidfile), token=token,
                                                         linger=LINGER)),
                                 call("print('done')\nfinal('done')")]))
    args = ["run", "go", "--model", f"script:{model}", "--json"] + (["--sandbox"] if sandbox else [])
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    argv = [sys.executable, "-P", "-m", "rlm", *args]
    if user == "nobody":
        argv = _as_nobody(argv, env, base)
    proc = subprocess.run(argv, cwd=base, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode in ANSWERED, proc.stderr[-3000:]
    assert pidfile.exists()  # the grandchild was started
    left = [p for p in psutil.process_iter(["cmdline", "status"])
            if token in (p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE]
    try:
        assert not left, "the setsid grandchild outlived the host"
    finally:
        for p in left:
            p.kill()


ANCESTOR_ENVIRONS = """
import os
found, pid = 0, os.getppid()
while pid > 1:
    try:  # the host itself is non-dumpable: its environ is refused, its parent's is not
        found += open(f'/proc/{pid}/environ', 'rb').read().count(b'sk-wrapped-')
    except OSError:
        pass
    try:
        pid = int(open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[1])
    except OSError:
        break
print(f'found {found}')
final(f'found {found}')
"""


@pytest.mark.parametrize("sandbox, user", [(False, "me"), (True, "me"), (False, "nobody"),
                                           (True, "nobody"), (None, "nobody")])
def test_a_key_held_by_a_wrapper_parent_is_hidden_from_a_sandboxed_cell(tmp_path, sandbox, user):
    """Issue 26.6: `rlm` started by a wrapper that keeps the key in its environment (here
    `sh -c '...; exit'`, like `timeout`, `make`, `uv run` or a CI runner). The host drops
    the key and is non-dumpable, but the wrapper's /proc/<pid>/environ still holds it: a
    cell of an unprivileged user walking up its ancestors reads it without --sandbox (the
    documented limit; a root kernel cannot, having given up CAP_SYS_PTRACE, so the root
    wrapper's permitted capabilities are not a subset of its own), and finds nothing with
    --sandbox (rlm/kernel/sandbox_exec.py hides those /proc entries), nor with no flag at
    all (None: the default is the sandbox where the platform allows it)."""
    if sandbox is not False and not sandbox_available():
        pytest.skip("no user namespaces here")
    base = Path(tempfile.mkdtemp(prefix="rlm-wrapped-")) if user == "nobody" else tmp_path
    try:
        model = base / "s.json"
        model.write_text(json.dumps([call(ANCESTOR_ENVIRONS)]))
        args = ["run", "go", "--model", f"script:{model}", "--json"]
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        env["OPENAI_API_KEY"] = "sk-wrapped-" + "x" * 32
        argv = [sys.executable, "-P", "-m", "rlm", *args, *{True: ["--sandbox"], False: ["--no-sandbox"], None: []}[sandbox]]
        wrap = ["sh", "-c", '"$@"; exit $?', "sh"]
        if user == "nobody":  # the wrapper runs as nobody too: setpriv ... sh -c ... python
            argv = _as_nobody(argv, env, base)
            at = argv.index("--clear-groups") + 1
            argv, wrap = argv[:at] + wrap + argv[at:], []
        proc = subprocess.run([*wrap, *argv], cwd=base, env=env,
                              capture_output=True, text=True, timeout=240)
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        # verification is not this test's subject: the count comes from /proc reads, which
        # are not the task's data, so the run ends answered or unverified (exit 0 or 5);
        # what matters is the answer it ended with
        assert res["status"] in ("answered", "unverified"), proc.stderr[-3000:]
        assert proc.returncode == res["exit_code"], proc.stderr[-3000:]
        final = res["final"]
        readable = sandbox is False and (user == "nobody" or os.geteuid() != 0)
        assert final == ("found 1" if readable else "found 0"), final
    finally:
        if user == "nobody":
            shutil.rmtree(base, ignore_errors=True)


def test_a_dead_hosts_leftover_is_swept_by_the_next_host_of_the_session(tmp_path):
    """A SIGKILLed host reaps nothing: what its kernel started stays. The next host of that
    session sweeps it when it starts a kernel; another session's process is left alone.
    (The sweeper runs in its own process: the leftover is not its descendant.)"""
    from rlm.kernel import reaper

    def leftover(session_dir: Path) -> subprocess.Popen:
        env = {**os.environ, reaper.MARK_ENV: "a-dead-hosts-kernel",
               reaper.SESSION_DIR_ENV: str(session_dir)}
        return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                                env=env, start_new_session=True)

    mine, other = leftover(tmp_path / "s1"), leftover(tmp_path / "s2")
    try:
        sweep = subprocess.run(
            [sys.executable, "-c", "import sys; from rlm.kernel.reaper import "
             "sweep_session_orphans as s; print(s(sys.argv[1]))", str(tmp_path / "s1")],
            capture_output=True, text=True, timeout=60, check=True)
        assert sweep.stdout.strip() == "1"
        assert mine.wait(timeout=30) == -9
        assert other.poll() is None
    finally:
        for p in (mine, other):
            p.kill()
            p.wait()


# ------------------------------------------------------------ the network, on request
CONNECT = """
import socket
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=5).close()
    print("connected")
except OSError as e:
    print("refused:", e)
    raise
final("done")
"""


@pytest.mark.skipif(not sandbox_available(), reason="no user namespaces here")
def test_the_sandbox_has_no_network_and_kernel_network_gives_it_back(tmp_path):
    """Issue 40 item 3: the default sandboxed kernel reaches no network, not even the
    host's loopback, and a cell that tries gets one line naming --kernel-network, not a
    bare socket error; `rlm run --kernel-network` lets it connect (files still protected)."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    port = listener.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    try:
        outs = []
        for flags in ([], ["--kernel-network"]):
            model = tmp_path / f"net{len(flags)}.json"
            model.write_text(json.dumps([call(CONNECT.format(port=port)), call("final('x')")]))
            proc = subprocess.run([sys.executable, "-P", "-m", "rlm", "run", "connect", "--model",
                                   f"script:{model}", "--json", *flags], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=240)
            outs.append(_tool_outputs(proc)[0])
            if not flags:  # the user sees the line too, under the failed cell
                assert "pass --kernel-network" in proc.stdout + proc.stderr
        without, with_network = outs
        assert "refused:" in without and "--kernel-network" in without, without
        assert without.count("--kernel-network") == 1
        assert "connected" in with_network and "--kernel-network" not in with_network
        # the files stay protected with the network on
        model = tmp_path / "write.json"
        model.write_text(json.dumps([call(
            "import os\ntry:\n    open(os.path.join(os.environ['RLM_SESSION_DIR'], 'session.jsonl'),"
            " 'a')\n    print('writable')\nexcept OSError as e:\n    print(type(e).__name__)\n"
            "final('done')")]))
        proc = subprocess.run([sys.executable, "-P", "-m", "rlm", "run", "write", "--model",
                               f"script:{model}", "--json", "--kernel-network"], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=240)
        assert _tool_outputs(proc)[0].startswith("OSError"), proc.stderr[-2000:]
    finally:
        listener.close()


def _tool_outputs(proc: subprocess.CompletedProcess) -> list[str]:
    assert proc.stdout.strip(), proc.stderr[-3000:]
    session = Path(json.loads(proc.stdout.strip().splitlines()[-1])["session_path"])
    entries = [json.loads(line) for line in session.read_text().splitlines()[1:]]
    return [e["message"]["content"] for e in entries
            if e.get("type") == "message" and e["message"]["role"] == "tool"]


def test_kernel_network_is_the_users_setting_only(tmp_path):
    """A project rlm.toml cannot turn the network on, nor can a recorded run option."""
    from rlm import trust
    from rlm.config import config_warnings, load_config

    (tmp_path / "rlm.toml").write_text("kernel_network = true\n")
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert load_config().kernel_network is False
        assert "kernel_network" in config_warnings()[0]
    finally:
        os.chdir(old)
    looser = trust.SCREENED["kernel_network"]  # (recorded, the user's own)
    assert looser(True, False) and looser(True, None)
    assert not looser(False, True)
    assert "kernel_network" in trust.SECURITY_FLAGS
