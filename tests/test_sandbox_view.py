"""Issue 57 item 4: the sandbox shows the kernel only what it needs: a mount, not a list
(rlm/kernel/sandbox_exec.py, `runtime.sandbox_binds`). Through `rlm run` with no flags
(the default path), as root and as nobody: other sessions' logs and connection files,
the session's own log, the user's rlm config dir, the rest of HOME and host unix sockets
are absent; the interpreter, its site-packages and rlm itself cannot be written, as root
too; agent sockets are not in the kernel's environment; the working directory is
writable, /tmp is writable and private."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from as_nobody import as_nobody

from rlm.kernel import runtime
from tests.rlmcli import call

pytestmark = pytest.mark.skipif(runtime.sandbox_problem() is not None,
                                reason="no user namespaces here")

PROBE = """
import errno, json, os, socket, sys, sysconfig, uuid
import kernel_ext
P = json.loads({paths!r})
def shown(p):  # an empty directory (a hidden one, under a shown one) shows nothing
    return os.path.lexists(p) and not (os.path.isdir(p) and not os.listdir(p))
out = {{"shown": {{k: shown(p) for k, p in P["absent"].items()}}}}
out["shown"]["own log"] = shown(os.path.join(os.environ["RLM_SESSION_DIR"], "session.jsonl"))
ext = os.path.dirname(os.path.abspath(kernel_ext.__file__))
code = {{"site-packages": sysconfig.get_paths()["purelib"], "prefix": sys.prefix,
        "base prefix": sys.base_prefix, "kernel_ext": ext,
        "rlm": os.path.join(os.path.dirname(ext), "rlm"), "config dir": P["config dir"]}}
name = "rlm-planted-" + uuid.uuid4().hex + ".pth"
out["writes"] = {{}}
for k, d in code.items():
    try:
        with open(os.path.join(d, name), "w") as f:
            f.write("import os\\n")
        os.unlink(os.path.join(d, name))
        out["writes"][k] = "wrote"
    except OSError as e:
        out["writes"][k] = errno.errorcode.get(e.errno, str(e.errno))
out["sockets"] = {{}}
for k, p in P["sockets"].items():
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(p)
        out["sockets"][k] = "connected"
    except OSError as e:
        out["sockets"][k] = errno.errorcode.get(e.errno, str(e.errno))
    finally:
        s.close()
out["agent env"] = sorted(k for k in ("SSH_AUTH_SOCK", "DBUS_SESSION_BUS_ADDRESS") if k in os.environ)
with open("written-by-cell.txt", "w") as f:
    f.write("ok")
with open(P["tmp"], "w") as f:
    f.write("private")
out["tmp"] = open(P["tmp"]).read()
print(json.dumps(out))
final(json.dumps(out))
"""


def _layout(base: Path, workdir_is_home: bool) -> tuple[Path, dict[str, str], dict]:
    """HOME with $RLM_HOME and the user's config dir in it, another session with its log
    and connection files, a secret file, an agent socket in HOME and one outside it
    (standing for /run's). The working dir is HOME/proj, or HOME itself."""
    home = base / "home"
    rlm_home, config = home / ".rlm", home / ".config"
    other = rlm_home / "sessions" / "20260101-000000-other"
    for d in (other / "runtime", other / "host", config / "rlm", base / "run"):
        d.mkdir(parents=True)
    workdir = home if workdir_is_home else home / "proj"
    workdir.mkdir(exist_ok=True)
    files = {"other log": other / "session.jsonl", "other connection file":
             other / "runtime" / "kernel-0123456789ab.json", "other host file":
             other / "host" / "kernel-0123456789ab.json", "user config":
             config / "rlm" / "trusted-files.json", "rlm config": rlm_home / "config.toml"}
    if not workdir_is_home:
        files["secret in HOME"] = home / "secret.txt"
    for path in files.values():
        path.write_text("# a setting\n" if path.suffix == ".toml" else "{}\n")
    absent = {k: str(p) for k, p in files.items()}
    absent["config dir"] = str(config / "rlm")
    absent["other session"] = str(other)
    sockets = {"outside HOME (/run)": str(base / "run" / "bus.sock")}
    if not workdir_is_home:  # inside the working dir a socket is the user's to show
        sockets["agent in HOME"] = str(home / "agent.sock")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(HOME=str(home), RLM_HOME=str(rlm_home), XDG_CONFIG_HOME=str(config),
               XDG_CACHE_HOME=str(home / ".cache"), XDG_DATA_HOME=str(home / ".local/share"),
               XDG_STATE_HOME=str(home / ".local/state"), RLM_MODEL_CACHE=str(base / "models"),
               SSH_AUTH_SOCK=str(home / "agent.sock"),
               DBUS_SESSION_BUS_ADDRESS=f"unix:path={base / 'run' / 'bus.sock'}")
    env.pop("RLM_CONFIG", None)
    paths = {"absent": absent, "sockets": sockets, "config dir": str(config / "rlm"),
             "tmp": f"/tmp/rlm-private-{uuid.uuid4().hex}"}
    return workdir, env, paths


@pytest.mark.parametrize("user", ["me", "nobody"])
@pytest.mark.parametrize("workdir_is_home", [False, True], ids=["workdir in HOME", "workdir HOME"])
def test_a_sandboxed_cell_sees_only_what_it_needs(tmp_path, user, workdir_is_home):
    base = Path(tempfile.mkdtemp(prefix="rlm-view-")) if user == "nobody" else tmp_path
    listeners: list[socket.socket] = []
    try:
        workdir, env, paths = _layout(base, workdir_is_home)
        for path in {*paths["sockets"].values(), env["SSH_AUTH_SOCK"]}:
            s = socket.socket(socket.AF_UNIX)
            s.bind(path)
            s.listen(8)
            os.chmod(path, 0o777)  # anyone may connect: only absence protects it
            listeners.append(s)
        model = base / "model.json"
        model.write_text(json.dumps([call(PROBE.format(paths=json.dumps(paths)))]))
        argv = [sys.executable, "-P", "-m", "rlm", "run", "look", "--model",
                f"script:{model}", "--json"]
        if user == "nobody":
            nobody = pwd.getpwnam("nobody")
            for path in (base, *base.rglob("*")):  # a tmp dir of its own, not the checkout
                os.chown(path, nobody.pw_uid, nobody.pw_gid, follow_symlinks=False)
            argv = as_nobody(argv, env)
        proc = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True,
                              timeout=240)
        assert proc.returncode == 0, proc.stderr[-3000:]
        seen = json.loads(json.loads(proc.stdout.strip().splitlines()[-1])["final"])
        assert seen["shown"] == dict.fromkeys(seen["shown"], False), seen["shown"]
        assert set(seen["shown"]) == {*paths["absent"], "own log"}
        assert "wrote" not in seen["writes"].values(), seen["writes"]
        assert set(seen["writes"]) == {"site-packages", "prefix", "base prefix", "kernel_ext",
                                       "rlm", "config dir"}
        assert seen["sockets"] == dict.fromkeys(paths["sockets"], "ENOENT"), seen["sockets"]
        assert seen["agent env"] == []
        assert (workdir / "written-by-cell.txt").read_text() == "ok"  # the working dir: writable
        assert seen["tmp"] == "private" and not os.path.exists(paths["tmp"])  # /tmp: its own
    finally:
        for s in listeners:
            s.close()
        if user == "nobody":
            shutil.rmtree(base, ignore_errors=True)


@pytest.mark.timeout(180)
def test_a_context_file_outside_the_working_directory_is_shown_read_only(tmp_path):
    """`--context FILE` from elsewhere is loaded (the kernel reads it where it is); the
    file beside it is not shown, and the context file cannot be written."""
    from tests.rlmcli import rlm, script

    outside, project = tmp_path / "data", tmp_path / "project"
    outside.mkdir()
    project.mkdir()
    (outside / "sales.csv").write_text("region,revenue\nwest,10\neast,20\n")
    (outside / "private.txt").write_text("not for the kernel")
    code = (f"import os\nprint('ROWS', len(sales))\n"
            f"print('BESIDE', os.path.exists({str(outside / 'private.txt')!r}))\n"
            f"try:\n    open({str(outside / 'sales.csv')!r}, 'a').write('x')\n    print('WROTE')\n"
            "except OSError as e:\n    print('REFUSED', e.errno)")
    model = script(project / "r.json", [call(code), {"content": "FINAL(done)"}])
    proc = rlm("run", "go", "--model", model, "--context", str(outside / "sales.csv"), "--json",
               cwd=project)
    path = Path(json.loads(proc.stdout.strip().splitlines()[-1])["session_path"])
    shown = "\n".join(str(json.loads(ln).get("message", {}).get("content"))
                      for ln in path.read_text().splitlines()[1:])
    assert "ROWS 2" in shown and "BESIDE False" in shown and "REFUSED" in shown, shown[-3000:]
    assert (outside / "sales.csv").read_text().endswith("east,20\n")
