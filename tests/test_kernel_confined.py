"""Issue 15.5: a root kernel cannot reach into the host's memory without --sandbox.

The host is non-dumpable, which stops a cell of the same ordinary user; root overrides
that with CAP_SYS_PTRACE. The kernel (kernel_ext.launch) gives up CAP_SYS_PTRACE and the
other capabilities that read another process's memory before user code runs. The target
here is a stand-in host: a process that made itself non-dumpable, as `rlm` does."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rlm.config import Config
from rlm.kernel import Kernel

PROBE = """
import os
out = []
for what in ("mem", "environ"):
    try:
        open(f"/proc/{PID}/{what}", "rb").close()
        out.append(what + ":open")
    except OSError as e:
        out.append(what + ":" + type(e).__name__)
status = dict(l.split(":\\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\\t" in l)
print(" ".join(out), int(status["CapEff"], 16) >> 19 & 1, int(status["CapBnd"], 16) >> 19 & 1)
"""

STAND_IN = ("import sys; from rlm.secrets import set_nondumpable; assert set_nondumpable(); "
            "print('ready', flush=True); sys.stdin.read()")


@pytest.fixture
def host():
    proc = subprocess.Popen([sys.executable, "-c", STAND_IN], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"  # non-dumpable from here on
    yield proc.pid
    proc.stdin.close()
    proc.wait(timeout=30)


def _probe_outside_kernel(pid: int) -> str:
    return subprocess.run([sys.executable, "-c", PROBE.replace("PID", str(pid))],
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.skipif(os.geteuid() != 0, reason="the capability drop matters for root")
def test_a_root_kernel_cannot_open_the_hosts_memory(tmp_path, host):
    probe = PROBE.replace("PID", str(host))
    # the control: a root process that kept its capabilities opens both
    outside = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                             check=True).stdout.strip()
    assert outside == "mem:open environ:open 1 1"
    with Kernel(tmp_path / "s", Config(home=tmp_path, cell_timeout=60)) as k:
        shown = k.execute(probe).shaped.strip()
        # a process the kernel starts cannot get the capability back (bounding set cut)
        child = k.execute("import subprocess, sys\nprint(subprocess.run([sys.executable, "
                          f"'-c', {probe!r}], capture_output=True, text=True).stdout.strip())")
        # the kernel still works as root otherwise: subprocesses, files, its own memory
        rest = k.execute("import subprocess\nprint(subprocess.run(['id', '-u'], "
                         "capture_output=True, text=True).stdout.strip(), "
                         "len(open('/etc/hostname', 'rb').read()) > 0, "
                         "open('/proc/self/mem', 'rb').close() is None)")
        umask = k.execute("import os\nm = os.umask(0)\nos.umask(m)\nprint(oct(m))")
    # refused, or (a sandboxed kernel with its own PID namespace and /proc) not even seen
    assert shown in ("mem:PermissionError environ:PermissionError 0 0",
                     "mem:FileNotFoundError environ:FileNotFoundError 0 0")
    assert child.shaped.strip() == shown
    assert rest.shaped.strip() == "0 True True"
    # the launcher's umask 077 (IPython's profile dir is private) is given back before
    # user code runs: files a cell writes get the user's own modes
    host_umask = os.umask(0)
    os.umask(host_umask)
    assert umask.shaped.strip() == oct(host_umask)
