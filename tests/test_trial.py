"""Kernel.trial against one real kernel: candidate cells in forked copies of the namespace
(kernel_ext.trial). Results, errors, timeouts, isolation, final(), refused bridge calls,
caps, order, no snapshot, and a kernel that goes on as before."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from kernel_ext import contract
from rlm.kernel import Kernel
from rlm.protocols import Executor, Trials

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def kernel(shared_kernel: Kernel) -> Kernel:
    return shared_kernel  # tests/kernels.py: the module's kernel, its namespace as started


@pytest.fixture
def session(kernel: Kernel) -> Path:
    return kernel.session_dir


def _ok(kernel: Kernel, code: str) -> str:
    res = kernel.execute(code)
    assert res.status == "ok", res.shaped
    return res.shaped


def _snapshot_files(session: Path) -> dict[str, tuple[int, int]]:
    """Every file under the session's snapshot directory: (size, mtime_ns)."""
    root = session / "snapshot"
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in root.rglob("*") if p.is_file()}


def test_kernel_implements_trials_and_the_call_is_declared(kernel):
    from rlm.notebook.inprocess import InProcessExecutor

    assert isinstance(kernel, Trials) and isinstance(kernel, Executor)
    assert not hasattr(InProcessExecutor, "trial")  # it cannot fork the user's kernel
    assert contract.TRIAL in contract.CALLS


def test_ok_result_has_prints_display_and_the_last_value(kernel):
    _ok(kernel, "base = 20")
    [res] = kernel.trial(["import sys\nprint('hi')\nsys.stderr.write('warn\\n')\n"
                          "display('shown')\nbase + 1"])
    assert res["status"] == "ok", res
    assert res["output"] == "hi\nwarn\n'shown'\n21\n"
    assert res["final"] is None and res["error"] is None
    assert res["seconds"] >= 0


def test_a_statement_cell_has_no_out_and_magics_run_as_in_a_cell(kernel):
    first, second = kernel.trial(["x_trial = 5", "%env TRIAL_VAR=1\nimport os\nos.environ['TRIAL_VAR']"])
    assert first == {**first, "status": "ok", "output": ""}
    assert second["status"] == "ok", second
    assert second["output"].endswith("'1'\n")
    assert "TRIAL_VAR" not in _ok(kernel, "import os\nsorted(os.environ)")
    assert "NameError" in kernel.execute("x_trial").shaped


def test_an_exception_is_an_error_with_its_name_and_message(kernel):
    [res] = kernel.trial(["print('before')\n1/0"])
    assert res["status"] == "error"
    assert res["error"] == "ZeroDivisionError: division by zero"
    assert res["output"] == "before\n"
    [syntax] = kernel.trial(["def ("])
    assert syntax["status"] == "error" and syntax["error"].startswith("SyntaxError")


def test_a_looping_candidate_is_killed_and_the_kernel_answers(kernel):
    fast, slow = kernel.trial(["2 + 2", "while True: pass"], timeout=1.0)
    assert fast["status"] == "ok" and fast["output"] == "4\n"
    assert slow["status"] == "timeout" and "killed after" in slow["error"]
    assert _ok(kernel, "'alive'") == "'alive'\n"


def test_a_child_that_exits_or_crashes_died(kernel):
    exits, crashes = kernel.trial(["import os\nos._exit(3)",
                                   "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)"])
    assert exits["status"] == "died" and "exit code 3" in exits["error"]
    assert crashes["status"] == "died" and "SIGSEGV" in crashes["error"]


def test_the_namespace_and_cwd_are_untouched(kernel, tmp_path):
    _ok(kernel, "import pandas as pd, os\n"
                "df = pd.DataFrame({'x': [1, 2, 3]})\nkept = [1, 2]\nhere = os.getcwd()")
    before = _ok(kernel, "(df.to_dict(), kept, os.getcwd())")
    results = kernel.trial([
        "df['x'] = 0\ndf['new'] = 1\nkept.append(3)\nglobal_from_trial = 1",
        "del df\ndel kept",
        f"import os\nos.chdir({str(tmp_path)!r})\nos.getcwd()",
    ])
    assert [r["status"] for r in results] == ["ok", "ok", "ok"], results
    assert results[2]["output"] == repr(str(tmp_path)) + "\n"
    assert _ok(kernel, "(df.to_dict(), kept, os.getcwd())") == before
    assert _ok(kernel, "os.getcwd() == here") == "True\n"
    assert "NameError" in kernel.execute("global_from_trial").shaped


def test_final_is_recorded_and_never_reaches_the_host(kernel):
    calls: list[tuple[str, dict]] = []
    kernel.set_bridge_handler(lambda method, params: calls.append((method, params)) or "x")
    try:
        _ok(kernel, "answer_value = 42")
        said, named = kernel.trial(["final('the answer')\nprint('after')",
                                    "final_var('answer_value')"])
        assert said == {**said, "status": "ok", "final": "the answer", "output": "after\n"}
        assert named["final"] == "42"
        assert calls == []
        _ok(kernel, "llm_query('real')")  # the real bridge still works
        assert [m for m, _ in calls] == ["llm_query"]
    finally:
        kernel.set_bridge_handler(None)


def test_other_bridge_requests_are_refused_in_a_trial(kernel):
    calls: list[str] = []
    kernel.set_bridge_handler(lambda method, params: calls.append(method) or "x")
    try:
        query, ping, typed = kernel.trial([
            "llm_query('hello')",
            "from kernel_ext import bridge\nbridge.request('ping', {'n': 1})",
            "input('name? ')",
        ])
    finally:
        kernel.set_bridge_handler(None)
    assert query["status"] == "error" and "not available in a trial" in query["error"]
    assert query["error"].startswith("RuntimeError: llm_query")
    assert ping["status"] == "error" and "not available in a trial" in ping["error"]
    assert typed["status"] == "error" and "not available in a trial" in typed["error"]
    assert calls == []


def test_a_huge_print_is_capped_and_does_not_block(kernel):
    [res] = kernel.trial(["print('x' * 10_000_000)\n'end'"], cap=100)
    assert res["status"] == "ok"
    assert res["output"].startswith("x" * 100 + "\n[trial output cut at 100 of 10000007 characters]")
    assert len(res["output"]) < 200


def test_results_come_in_order(kernel):
    codes = [f"import time\ntime.sleep({0.3 if i % 2 == 0 else 0})\n{i}" for i in range(5)]
    results = kernel.trial(codes)
    assert [r["output"] for r in results] == [f"{i}\n" for i in range(5)]
    assert kernel.trial([]) == []


def test_a_trial_writes_no_snapshot(kernel, session):
    _ok(kernel, "snap_probe = list(range(10))")
    before = _snapshot_files(session)
    assert before, "the kernel snapshots after a cell: the check below would prove nothing"
    results = kernel.trial([
        "snap_probe.append(1)\nnew_name = 2",
        "get_ipython().run_cell('forced = 3')\n"
        "from kernel_ext import snapshot\nsnapshot.snapshot_now()",
    ])
    assert [r["status"] for r in results] == ["ok", "ok"], results
    assert _snapshot_files(session) == before
    [nested] = kernel.trial(["get_ipython().run_cell('40 + 2')\nNone"])
    assert nested["status"] == "ok" and nested["output"].strip() == "42", nested
    assert _snapshot_files(session) == before
    _ok(kernel, "snap_probe.append(2)")
    assert _snapshot_files(session) != before  # a real cell still snapshots


def test_real_cells_stream_outputs_after_trials(kernel):
    kernel.trial(["print('trial')", "while True: pass"], timeout=0.5)
    seen: list[str] = []
    res = kernel.execute("import sys\nprint('one'); sys.stdout.flush()\n"
                         "display('two')\nprint('three')",
                         on_output=lambda o: seen.append(o.kind))
    assert res.status == "ok"
    assert res.shaped == "one\n'two'\nthree\n"
    assert "stream" in seen and "display_data" in seen
    assert os.getpid() != kernel.pid


def _wait_for_file(path: Path, limit: float = 30.0) -> str:
    """The file's text once a candidate wrote it (the candidate's own signal)."""
    tick = threading.Event()
    deadline = time.monotonic() + limit
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < deadline, f"{path} never written"
        tick.wait(0.02)
    return path.read_text()


def _ended_in_kernel(kernel: Kernel, pid: int) -> bool:
    """Whether `pid` (in the kernel's pid namespace: the sandbox may have its own) is gone
    or a zombie within 10 s, as the kernel sees it."""
    return _ok(kernel, "import time\n"
                       "def _state(pid):\n"
                       "    try:\n"
                       "        return open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[0]\n"
                       "    except FileNotFoundError:\n"
                       "        return 'gone'\n"
                       "_t = time.monotonic()\n"
                       f"while _state({pid}) not in ('gone', 'Z') and time.monotonic() - _t < 10:\n"
                       "    time.sleep(0.01)\n"
                       f"_state({pid}) in ('gone', 'Z')") == "True\n"


def test_a_background_process_a_candidate_starts_does_not_outlive_it(kernel, tmp_path):
    [res] = kernel.trial(["import subprocess, sys\n"
                          "p = subprocess.Popen(['sleep', '60'])\n"
                          "print(p.pid)"], timeout=20)
    assert res["status"] == "ok", res
    assert res["seconds"] < 15  # the sleeper holds the pipe; the result did not wait on it
    assert _ended_in_kernel(kernel, int(res["output"]))


def test_an_interrupt_during_trials_kills_the_children(kernel, tmp_path):
    flag = tmp_path / "pid"
    errors: list[BaseException] = []

    def run() -> None:
        try:
            kernel.trial([f"import os\nopen({str(flag)!r}, 'w').write(str(os.getpid()))\n"
                          "while True: pass"], timeout=60)
        except BaseException as e:  # noqa: BLE001 - the test inspects it
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    child = int(_wait_for_file(flag))
    kernel.interrupt()
    t.join(30)
    assert not t.is_alive()
    assert errors and "KeyboardInterrupt" in str(errors[0])
    assert _ended_in_kernel(kernel, child)
    assert _ok(kernel, "'still here'") == "'still here'\n"
