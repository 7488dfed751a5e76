"""Issue 15.4: the kernel's channels are unix sockets in a private directory, never a
TCP port another local process could subscribe to."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from rlm.config import Config
from rlm.kernel import Kernel
from rlm.kernel.runtime import AF_UNIX_PATH_MAX


def _listening_tcp(pid: int) -> set[int]:
    """Ports of the TCP sockets `pid` listens on."""
    mine = _socket_inodes(pid)
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] == "0A" and cols[9] in mine:  # LISTEN
                ports.add(int(cols[1].split(":")[1], 16))
    return ports


def _socket_inodes(pid: int) -> set[str]:
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(target[8:-1])
    return out


def _check(k: Kernel, sock_dir: Path) -> dict:
    conn_path = Path((k.session_dir / "host" / "kernel.pid").read_text().splitlines()[1])
    conn = json.loads(conn_path.read_text())
    assert conn["transport"] == "ipc"
    assert Path(conn["ip"]).parent == sock_dir
    assert stat.S_IMODE(sock_dir.stat().st_mode) & 0o777 == 0o700  # jupyter adds the sticky bit
    for ch in ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port"):
        p = Path(f"{conn['ip']}-{conn[ch]}")
        st = p.lstat()
        assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600, (p, oct(st.st_mode))
        assert len(os.fsencode(p)) <= AF_UNIX_PATH_MAX
    # the one TCP port left is ipykernel's fork pipe: a PULL socket (it never sends) whose
    # messages must carry a random 16-byte key; no channel of the connection file is TCP
    pipe = k.execute("import ipykernel.kernelapp as _a\n"
                     "print(_a.IPKernelApp.instance().iopub_thread._pipe_port)").shaped.strip()
    assert _listening_tcp(k.pid) <= {int(pipe)}, "a kernel channel listens on TCP"
    return conn


def test_local_kernel_uses_private_unix_sockets(tmp_path):
    d = tmp_path / "sessions" / "s"
    with Kernel(d, Config(home=tmp_path, cell_timeout=30)) as k:
        assert k.execute("print(6 * 7)").shaped.strip() == "42"
        conn = _check(k, d / "runtime")
    assert not [p for p in (d / "runtime").iterdir() if p.is_socket()]  # removed at stop
    assert conn["shell_port"] < 100  # ipc "ports" are small indices, not TCP ports


def test_a_long_session_path_falls_back_to_a_short_private_dir(tmp_path):
    d = tmp_path / ("x" * 60) / ("y" * 60) / "sessions" / "s"
    with Kernel(d, Config(home=tmp_path, cell_timeout=30)) as k:
        assert k.execute("print('ok')").shaped.strip() == "ok"
        conn_path = Path((d / "host" / "kernel.pid").read_text().splitlines()[1])
        sock_dir = Path(json.loads(conn_path.read_text())["ip"]).parent
        assert not sock_dir.is_relative_to(d)
        _check(k, sock_dir)
    assert not sock_dir.exists()  # removed with the kernel


FOREIGN = """
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(sys.argv[1])
    print("connected")
except OSError as e:
    print(type(e).__name__)
"""


def test_another_user_cannot_connect_to_iopub(tmp_path):
    """As root: a process dropped to nobody cannot even connect to the IOPub socket."""
    import subprocess
    import sys

    from as_nobody import as_nobody

    if os.geteuid() != 0:
        import pytest

        pytest.skip("needs root to act as another user")
    d = tmp_path / "sessions" / "s"
    with Kernel(d, Config(home=tmp_path, cell_timeout=30)) as k:
        k.execute("1")
        conn_path = Path((d / "host" / "kernel.pid").read_text().splitlines()[1])
        conn = json.loads(conn_path.read_text())
        iopub = f"{conn['ip']}-{conn['iopub_port']}"
        as_root = subprocess.run([sys.executable, "-c", FOREIGN, iopub],
                                 capture_output=True, text=True, timeout=30)
        foreign = subprocess.run(as_nobody([sys.executable, "-c", FOREIGN, iopub]),
                                 capture_output=True, text=True, timeout=30, cwd="/")
    assert as_root.stdout.strip() == "connected"  # the path is right: the owner can
    assert foreign.stdout.strip() == "PermissionError"
