"""A kernel that dies or will not stop: noticed fast, reported with its cause, restarted."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from rlm.config import Config
from rlm.errors import KernelDied
from rlm.kernel import Kernel

pytestmark = pytest.mark.timeout(120)

HANG_GUARD_S = 30  # far below the cell timeout: proves death was noticed, not waited out


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    k = Kernel(tmp_path_factory.mktemp("session"), Config(interrupt_grace_s=1.0))
    k.start()
    yield k
    k.stop()


def test_os_exit_inside_a_cell(kernel):
    pid = kernel.pid
    t0 = time.monotonic()
    res = kernel.execute("import os\nos._exit(1)", timeout=60)
    assert time.monotonic() - t0 < HANG_GUARD_S
    assert res.status == "died" and res.died_cause == "exit code 1"
    assert res.restart is not None
    assert "the kernel died: exit code 1" in res.shaped
    assert kernel.pid != pid and kernel.is_alive()
    assert kernel.execute("6 * 7").shaped == "42\n"


def test_a_restart_that_fails_is_part_of_the_result_and_is_retried(kernel, monkeypatch):
    """Before: a restart that failed (a gateway gone, a kernel that cannot start) raised
    KernelError out of execute(), so the run ended with a traceback instead of a result."""
    import rlm.kernel.kernel as kmod

    real, calls = kmod.make_runtime, []

    def gone_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise kmod.KernelError("cannot reach the kernel gateway at http://gw:8888")
        return real(*args, **kwargs)

    monkeypatch.setattr(kmod, "make_runtime", gone_once)
    kernel.execute("kept = 41", timeout=60)
    kernel.snapshot_now()
    res = kernel.execute("import os\nos._exit(3)", timeout=60)
    assert res.status == "died" and res.restart is None
    assert res.restart_error is not None and "cannot reach the kernel gateway" in res.restart_error
    assert "restarting it failed" in res.shaped and "the next cell tries again" in res.shaped
    assert not kernel.is_alive()
    assert kernel.execute("kept + 1").shaped == "42\n"  # the retry restarted and restored
    assert len(calls) == 2 and kernel.last_restart_cause is not None
    assert "retried" in kernel.last_restart_cause


def test_sigkill_from_outside(kernel):
    pid = kernel.pid
    threading.Timer(0.5, os.kill, (pid, signal.SIGKILL)).start()
    t0 = time.monotonic()
    res = kernel.execute("import time\ntime.sleep(50)", timeout=60)
    assert time.monotonic() - t0 < HANG_GUARD_S
    assert res.status == "died" and res.died_cause == "signal SIGKILL"
    assert kernel.pid != pid
    assert kernel.execute("1 + 1").shaped == "2\n"


def test_c_loop_ignoring_sigint_ends_by_restart(kernel):
    pid = kernel.pid
    res = kernel.execute("sum(range(10**11))", timeout=3)
    assert res.status == "timeout"
    assert res.restart is not None and kernel.pid != pid
    assert "restarted" in res.shaped
    assert kernel.execute("'next'").shaped == "'next'\n"


def test_dead_kernel_listing_raises_kernel_died(kernel):
    os.kill(kernel.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while kernel.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(KernelDied, match="SIGKILL"):
        kernel.list_namespace()
    res = kernel.execute("1")  # the next cell reports the death and restarts
    assert res.status == "died" and res.restart is not None
    assert kernel.execute("2").shaped == "2\n"


def test_memory_cap_turns_runaway_allocation_into_memory_error(tmp_path):
    with Kernel(tmp_path / "s", Config(memory_cap_bytes=2 * 1024**3)) as k:
        pid = k.pid
        res = k.execute("x = bytearray(8 * 1024**3)")
        assert res.status == "error" and res.outputs[-1].ename == "MemoryError"
        assert k.pid == pid
        assert k.execute("len(bytearray(10**6))").shaped == "1000000\n"


def test_stop_leaves_no_process(tmp_path):
    k = Kernel(tmp_path / "s", Config())
    k.start()
    pid = k.pid
    k.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_segfault_is_reported_with_its_signal(kernel):
    res = kernel.execute("import ctypes\nctypes.string_at(0)", timeout=60)
    assert res.status == "died"
    assert res.died_cause in ("signal SIGSEGV", "exit code 139"), res.died_cause
    assert kernel.execute("3").shaped == "3\n"
