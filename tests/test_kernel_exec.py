"""Kernel.execute against one real kernel: outputs, errors, images, big prints, the bridge."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import psutil
import pytest

from rlm.config import Config
from rlm.kernel import Kernel

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("session")


@pytest.fixture(scope="module")
def kernel(session, tmp_path_factory):
    # working in the base temp dir: the (default) sandbox shows a kernel its working dir
    # only, and the module's tests hand it files under their own tmp_path
    k = Kernel(session, Config(output_budget_chars=4000,
                               kernel_cwd=str(tmp_path_factory.getbasetemp())))
    k.start()
    yield k
    k.stop()


def test_trivial_cell(kernel):
    res = kernel.execute("1 + 1")
    assert res.status == "ok"
    assert res.shaped == "2\n"
    assert [o.kind for o in res.outputs] == ["execute_result"]
    assert res.outputs[0].data == {"text/plain": "2"}
    assert res.execution_count is not None


def test_outputs_keep_their_order_and_streams_merge(kernel):
    code = (
        "import sys\n"
        "print('a'); print('b'); sys.stdout.flush()\n"
        "sys.stderr.write('warn\\n'); sys.stderr.flush()\n"
        "from IPython.display import display, HTML\n"
        "display(HTML('<b>x</b>'))\n"
        "print('c')\n"
        "42"
    )
    res = kernel.execute(code)
    assert res.status == "ok"
    kinds = [(o.kind, o.name) for o in res.outputs]
    assert kinds == [
        ("stream", "stdout"),
        ("stream", "stderr"),
        ("display_data", None),
        ("stream", "stdout"),
        ("execute_result", None),
    ]
    assert res.outputs[0].text == "a\nb\n"
    assert res.outputs[2].data is not None and res.outputs[2].data["text/html"] == "<b>x</b>"
    assert (
        res.shaped.index("a\nb\n")
        < res.shaped.index("warn")
        < res.shaped.index("c\n")
        < res.shaped.index("42")
    )


def test_error_has_traceback_and_shaped_text_has_no_ansi(kernel):
    res = kernel.execute("def f():\n    return 1 / 0\nf()")
    assert res.status == "error"
    err = res.outputs[-1]
    assert err.kind == "error" and err.ename == "ZeroDivisionError"
    assert err.traceback  # raw, colored: nbformat keeps ANSI for renderers
    assert "return 1 / 0" in res.shaped and "ZeroDivisionError: division by zero" in res.shaped
    assert "\x1b[" not in res.shaped


def test_matplotlib_png_lands_in_artifacts(kernel, session):
    res = kernel.execute("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()")
    assert res.status == "ok", res.shaped
    images = [o for o in res.outputs if o.refs and "image/png" in o.refs]
    assert len(images) == 1
    rel = images[0].refs["image/png"]
    assert rel.startswith("artifacts/") and rel.endswith(".png")
    assert (session / rel).read_bytes().startswith(b"\x89PNG")
    assert "image/png" not in images[0].data
    assert "text/plain" in images[0].data
    assert f"[image: {(session / rel).absolute()}]" in res.shaped  # a path to open from anywhere


def test_100mb_print_is_shaped_spooled_and_host_memory_bounded(kernel, session):
    host = psutil.Process()
    before = host.memory_info().rss
    peak = [before]
    done = threading.Event()

    def sample():
        while not done.wait(0.05):
            peak[0] = max(peak[0], host.memory_info().rss)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        line = "x" * 99
        res = kernel.execute(f"for i in range(1_000_000):\n    print({line!r})", timeout=100)
    finally:
        done.set()
        sampler.join()
    assert res.status == "ok", res.shaped[-500:]
    assert res.chars_total == 100_000_000
    assert res.elided_chars > 99_000_000
    assert res.full_output_path and res.full_output_path.startswith("artifacts/")
    assert f"characters elided; full output: {res.full_output_path}]" in res.shaped
    assert len(res.shaped) <= 4000
    assert (session / res.full_output_path).stat().st_size == 100_000_000
    assert len(res.outputs[0].text or "") <= 4000
    assert (peak[0] - before) < 60 * 1024 * 1024


def test_bridge_request_waits_for_the_host_reply(kernel):
    res = kernel.execute("import kernel_ext.bridge as b\nb.request('ping', {'n': 41})['n'] + 1")
    assert res.status == "ok", res.shaped
    assert res.shaped == "42\n"


def test_bridge_handler_result_error_and_concurrency(kernel):
    calls = []

    def handler(method, params):
        calls.append((method, params))
        if method == "llm_query" and params["prompt"] == "boom":
            raise ValueError("the model is on fire")
        if method == "llm_query":
            return params["prompt"].upper()
        return None

    kernel.set_bridge_handler(handler)
    try:
        res = kernel.execute("llm_query('hello')")
        assert res.shaped == "'HELLO'\n"
        res = kernel.execute(
            "try:\n    llm_query('boom')\nexcept RuntimeError as e:\n    print('caught', e)"
        )
        assert res.shaped == "caught the model is on fire\n"
        code = (
            "import threading\n"
            "got = {}\n"
            "def ask(p):\n    got[p] = llm_query(p)\n"
            "ts = [threading.Thread(target=ask, args=(p,)) for p in ('one', 'two')]\n"
            "[t.start() for t in ts]; [t.join() for t in ts]\n"
            "sorted(got.items())"
        )
        res = kernel.execute(code)
        assert res.shaped == "[('one', 'ONE'), ('two', 'TWO')]\n", res.shaped
    finally:
        kernel.set_bridge_handler(None)
    assert ("llm_query", {"prompt": "hello", "model": None}) in calls


def test_api_names_are_hidden_from_namespace_listing(kernel):
    kernel.execute("my_value = 123")
    names = {n["name"] for n in kernel.list_namespace()["names"]}
    assert "my_value" in names
    assert not names & {"llm_query", "final", "goal", "cron", "In", "Out"}


def test_python_loop_timeout_interrupts_and_kernel_lives(kernel):
    pid = kernel.pid
    kernel.execute("survivor = 7")
    res = kernel.execute("while True:\n    pass", timeout=3)
    assert res.status == "timeout"
    assert kernel.pid == pid  # the interrupt was enough
    assert kernel.execute("survivor").shaped == "7\n"


def test_runtime_dir_and_connection_file_are_private(kernel, session):
    for d in ("runtime", "host"):  # the kernel's, and the host's (connection file, log)
        assert (session / d).stat().st_mode & 0o777 == 0o700  # jupyter_client adds the sticky bit
    conn = [p for p in (session / "host").iterdir()
            if p.name.startswith("kernel-") and p.suffix == ".json"]
    assert len(conn) == 1
    assert conn[0].stat().st_mode & 0o777 == 0o600
    assert not [p for p in (session / "runtime").iterdir() if p.suffix == ".json"]


def test_kernel_env_has_no_provider_secrets(session, monkeypatch):
    from rlm.kernel.runtime import kernel_env

    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    monkeypatch.setenv("HF_TOKEN", "t")
    env = kernel_env(session, Config())
    assert "OPENAI_API_KEY" not in env and "HF_TOKEN" not in env
    assert env["RLM_SNAPSHOT_DIR"] == str(session / "snapshot")
    assert env["PATH"] == os.environ["PATH"]


def test_interrupt_while_waiting_on_the_bridge_and_late_reply_is_ignored(kernel):
    release = threading.Event()

    def slow(method, params):
        release.wait(10)
        return "late"

    kernel.set_bridge_handler(slow)
    try:
        threading.Timer(0.5, kernel.interrupt).start()
        res = kernel.execute("llm_query('x')", timeout=30)
        assert res.status == "interrupted"
        assert res.outputs[-1].ename == "KeyboardInterrupt"
        release.set()  # the reply now arrives for a caller that is gone
        kernel.set_bridge_handler(lambda m, p: "fresh")
        assert kernel.execute("llm_query('y')").shaped == "'fresh'\n"
    finally:
        release.set()
        kernel.set_bridge_handler(None)


def test_unload_removes_bridge_hook_and_names_then_reload_works(kernel):
    code = (
        "ip = get_ipython()\n"
        "ip.run_line_magic('unload_ext', 'kernel_ext')\n"
        "state = ('comm_msg' in ip.kernel.control_handlers, 'llm_query' in ip.user_ns)\n"
        "ip.run_line_magic('load_ext', 'kernel_ext')\n"
        "del ip\n"
        "state"
    )
    res = kernel.execute(code)
    assert res.status == "ok", res.shaped
    assert res.shaped == "(False, False)\n"
    assert (
        kernel.execute("import kernel_ext.bridge as b\nb.request('ping', {'n': 1})").shaped
        == "{'n': 1}\n"
    )


def test_listing_while_a_cell_runs_answers_on_a_subshell(kernel, tmp_path):
    """It used to be KernelBusy (issue 16); more in tests/test_subshell.py."""
    running, release = tmp_path / "running", tmp_path / "release"
    code = (f"import os, time\nopen({str(running)!r}, 'w').close()\n"
            f"while not os.path.exists({str(release)!r}):\n    time.sleep(0.01)\n'done'")
    results = []
    runner = threading.Thread(target=lambda: results.append(kernel.execute(code, timeout=120)))
    runner.start()
    try:
        while not running.exists() and runner.is_alive():  # the cell is running now
            time.sleep(0.01)
        listing = kernel.list_namespace(timeout=10)
        assert "note" not in listing and "names" in listing  # live, not the snapshot
    finally:
        release.touch()
        runner.join()
    assert results[0].shaped == "'done'\n"
    assert "names" in kernel.list_namespace()


@pytest.mark.parametrize("breaker, what", [
    ("import sys\nsys.stdout.close()", "sys.stdout was closed"),
    ("import sys, io\nsys.stdout = io.StringIO()\nsys.stderr = io.StringIO()", "sys.stdout was rebound"),
])
def test_a_cell_that_closes_or_rebinds_stdout_does_not_silence_later_cells(kernel, breaker, what):
    res = kernel.execute(breaker)
    assert what in res.shaped  # the cell's own output says what was repaired
    after = kernel.execute("print('still visible')\nimport sys\nprint('err too', file=sys.stderr)")
    assert after.status == "ok" and "still visible" in after.shaped and "err too" in after.shaped


def test_output_of_a_thread_from_an_earlier_cell_is_labelled_late(kernel, tmp_path):
    go, printed = tmp_path / "go", tmp_path / "printed"
    first = kernel.execute(
        "import os, threading, time\n"
        "def late():\n"
        f"    while not os.path.exists({str(go)!r}):\n        time.sleep(0.01)\n"
        "    print('from the thread')\n"
        f"    open({str(printed)!r}, 'w').close()\n"
        "threading.Thread(target=late, name='bg').start()\nprint('first cell')")
    assert first.shaped == "first cell\n"
    second = kernel.execute(
        f"import os, time\nopen({str(go)!r}, 'w').close()\n"
        f"while not os.path.exists({str(printed)!r}):\n    time.sleep(0.01)\nprint('second cell')")
    assert "[late: thread 'bg' from an earlier cell] from the thread\n" in second.shaped
    assert second.shaped.endswith("second cell\n")
    assert kernel.execute("print('third')").shaped == "third\n"  # no label on the main thread


def test_a_second_interrupt_of_one_cell_is_not_sent(kernel):
    """Two interrupts of one cell (a user's two presses, the advisor and a press, the
    gateway test's two matches) send one SIGINT: a second one landing while the kernel
    sends the interrupted cell's reply was caught by ipykernel itself and the reply lost,
    so the cell ran out its timeout (CI, through a gateway). The next cell is interrupted
    again."""
    rt = kernel._rt
    sent: list[int] = []
    real = rt.interrupt

    def counted() -> None:
        sent.append(1)
        real()

    rt.interrupt = counted
    try:
        def on_output(out):
            if "sleeping" in (out.text or ""):
                kernel.interrupt()
                kernel.interrupt()

        code = "import time\nprint('sleeping', flush=True)\ntime.sleep(60)"
        res = kernel.execute(code, timeout=30, on_output=on_output)
        assert res.status == "interrupted" and sent == [1]
        res = kernel.execute(code, timeout=30, on_output=on_output)
        assert res.status == "interrupted" and sent == [1, 1]
        assert kernel.execute("print(6 * 7)").shaped.strip() == "42"
    finally:
        rt.interrupt = real


def test_an_interrupt_before_the_kernel_starts_the_cell_is_held_until_it_does(kernel):
    """An interrupt asked for right after the request was sent, before the kernel started
    the cell (the advisor's blocker arrives the moment a reply is logged), used to reach
    ipykernel between cells, where it is swallowed, and the cell ran to its end. It is now
    held and sent at the cell's execute_input: the cell ends interrupted, not timed out."""
    rt = kernel._rt
    real_send = rt.send_shell
    sent: list[str] = []

    def send_then_interrupt(msg):
        real_send(msg)
        if msg["header"]["msg_type"] == "execute_request" and not sent:
            sent.append("asked")
            kernel.interrupt()  # at once: the kernel has not started the cell yet

    rt.send_shell = send_then_interrupt
    try:
        res = kernel.execute("import time\ntime.sleep(60)\nprint('slept')", timeout=20)
    finally:
        rt.send_shell = real_send
    assert sent == ["asked"]
    assert res.status == "interrupted", (res.status, res.shaped)
    # the cell's KeyboardInterrupt; or, when the interrupt landed in ipykernel's own code
    # around the cell (it then sends no reply), the note that says so: never a timeout
    assert ("KeyboardInterrupt" in res.shaped or "ended this cell without a reply"
            in res.shaped) and not res.shaped.endswith("slept\n"), res.shaped
    assert kernel.execute("print(6 * 7)").shaped.strip() == "42"


def test_an_interrupt_that_showed_no_error_is_sent_again_with_growing_waits(monkeypatch):
    """The state machine alone (rlm.kernel.interrupting): a SIGINT that ipykernel swallowed
    before the cell's code ran leaves the cell running with no error: it is sent again
    after each wait of RETRY_S, never more; one that landed (an error came) is not."""
    import threading

    from rlm.kernel import interrupting

    monkeypatch.setattr(interrupting, "RETRY_S", (0.05, 0.05, 0.05))

    class Rt:
        def __init__(self, until: int):
            self.sent, self.notes, self.until = 0, [], until
            self.reached = threading.Event()

        def interrupt(self):
            self.sent += 1
            if self.sent == self.until:
                self.reached.set()

        def note(self, text):
            self.notes.append(text)

    swallowed, c = Rt(until=4), interrupting.CellInterrupt()
    c.begin()
    c.request(swallowed)  # before the kernel started the cell: held
    assert swallowed.sent == 0
    c.seen(swallowed, {"header": {"msg_type": "execute_input"}})
    assert swallowed.sent >= 1 and swallowed.reached.wait(10)  # the first, then 3 more
    c.request(swallowed)  # a later press: not sent again
    threading.Event().wait(0.3)  # time for a fifth send, which must not come
    c.end()
    assert swallowed.sent == 4 and swallowed.notes.count(
        "interrupt sent again: the cell still runs and showed no error") == 3

    landed, c = Rt(until=2), interrupting.CellInterrupt()
    c.begin()
    c.seen(landed, {"header": {"msg_type": "execute_input"}})
    c.request(landed)
    c.seen(landed, {"header": {"msg_type": "error"}})  # KeyboardInterrupt's traceback
    assert not landed.reached.wait(0.3) and landed.sent == 1
    c.end()
