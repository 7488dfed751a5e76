"""Issue 15.5 (optional part): `--sandbox` runs the kernel in its own user + network
namespace: no network, and no access to the host's /proc/<pid>/environ or mem, even as
root; refused in one line where the platform cannot do it."""

from __future__ import annotations

import os

import pytest

from rlm.config import Config
from rlm.errors import KernelError
from rlm.kernel import Kernel, runtime

PROBE = """
import os, socket
try:
    socket.create_connection(("192.0.2.1", 80), timeout=5)
    net = "connected"
except OSError as e:
    net = "unreachable" if e.errno == 101 else f"other:{e.errno}"
try:
    open(f"/proc/{os.getppid()}/environ", "rb").read()
    env = "read"
except OSError as e:
    env = type(e).__name__
print(net, env)
"""


def _available() -> bool:
    try:
        runtime.check_sandbox()
        return True
    except KernelError:
        return False


@pytest.mark.parametrize("sandbox", [True, False])
def test_sandboxed_kernel_has_no_network_and_cannot_read_the_host(tmp_path, sandbox):
    if sandbox and not _available():
        pytest.skip("no unprivileged user namespaces here")
    with Kernel(tmp_path / "s", Config(home=tmp_path, cell_timeout=30, sandbox=sandbox)) as k:
        shown = k.execute(PROBE).shaped.strip()
        assert k.execute("x = 41 + 1\nprint(x)").shaped.strip() == "42"
    if sandbox:
        assert shown == "unreachable PermissionError"
    elif os.geteuid() == 0:  # a root kernel gave up CAP_SYS_PTRACE (kernel_ext.launch):
        # the host (here pytest, with every capability) is out of its reach as well
        assert shown.endswith(" PermissionError") and not shown.startswith("unreachable")
    else:  # the control: a plain kernel of the same user reads a dumpable host's environ
        assert shown.endswith(" read")


def test_sandbox_refused_in_one_line_where_unavailable(tmp_path, monkeypatch):
    monkeypatch.setattr(runtime, "SANDBOX_ARGV", ("unshare", "--no-such-option", "--"))
    monkeypatch.setattr(runtime, "_sandbox_ok", [])
    with pytest.raises(KernelError, match="--sandbox is not available here") as err:
        Kernel(tmp_path / "s", Config(home=tmp_path, sandbox=True)).start()
    assert "\n" not in str(err.value)
