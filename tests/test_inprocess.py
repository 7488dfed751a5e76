"""InProcessExecutor inside a REAL kernel, driven through jupyter_client as JupyterLab does."""

from __future__ import annotations

import json
import os

import pytest
from jupyter_client.manager import start_new_kernel

pytestmark = pytest.mark.timeout(120)


def run(kc, code: str, timeout: float = 60) -> list[tuple[str, dict]]:
    """Execute like a frontend: every IOPub message of this request, until idle."""
    msg_id = kc.execute(code)
    msgs = []
    while True:
        msg = kc.get_iopub_msg(timeout=timeout)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
        msgs.append((msg["msg_type"], msg["content"]))
    kc.get_shell_msg(timeout=timeout)
    return msgs


@pytest.fixture(scope="module")
def kernel():
    km, kc = start_new_kernel(kernel_name="python3", env={**os.environ})
    yield kc
    kc.stop_channels()
    km.shutdown_kernel(now=True)


AGENT_CELLS = [
    "print('hello from the agent'); y = user_var * 2; y",
    "from IPython.display import display, HTML\ndisplay(HTML('<i>shown</i>'))\n"
    "import sys; print('warn', file=sys.stderr)",
    "1 / 0",
    "import time\nwhile True:\n    time.sleep(0.01)",
    "def broken(:\n    pass",
]


def test_outputs_reach_iopub_and_the_cell_result(kernel, tmp_path):
    setup = (
        "from rlm.notebook.inprocess import InProcessExecutor\nfrom rlm.config import Config\n"
        f"ex = InProcessExecutor(get_ipython(), {str(tmp_path)!r}, Config())\nuser_var = 21\n"
    )
    run(kernel, setup)
    driver = (
        "import json as _json\n"
        f"_cells = {AGENT_CELLS!r}\n"
        "_res = [ex.execute(c, timeout=(0.5 if 'while' in c else None)) for c in _cells]\n"
        "print('RESULTS=' + _json.dumps([r.to_dict() for r in _res]))\n"
    )
    msgs = run(kernel, driver)
    stdout = "".join(c["text"] for t, c in msgs if t == "stream" and c["name"] == "stdout")
    results = json.loads(stdout.split("RESULTS=", 1)[1])
    r_print, r_display, r_err, r_loop, r_syntax = results

    # the user (IOPub, the magic cell's output area) saw everything ...
    assert "hello from the agent\n" in stdout
    seen = [(t, c) for t, c in msgs if t != "stream"]
    assert ("execute_result", "42") in [(t, c["data"].get("text/plain")) for t, c in seen
                                        if t == "execute_result"]
    assert any(t == "display_data" and "<i>shown</i>" in c["data"].get("text/html", "")
               for t, c in seen)
    errors = [c["ename"] for t, c in seen if t == "error"]
    assert errors == ["ZeroDivisionError", "KeyboardInterrupt", "SyntaxError"]

    # ... and the model got the same outputs
    assert r_print["status"] == "ok"
    assert [o["kind"] for o in r_print["outputs"]] == ["stream", "execute_result"]
    assert r_print["outputs"][1]["data"]["text/plain"] == "42"
    assert "hello from the agent" in r_print["shaped"] and "42" in r_print["shaped"]
    kinds = [(o["kind"], o.get("name")) for o in r_display["outputs"]]
    assert kinds == [("display_data", None), ("stream", "stderr")]
    assert r_err["status"] == "error" and r_err["outputs"][0]["ename"] == "ZeroDivisionError"
    assert r_err["outputs"][0]["traceback"] and "ZeroDivisionError" in r_err["shaped"]
    assert "\x1b[" not in r_err["shaped"]
    assert r_loop["status"] == "timeout"
    assert r_syntax["status"] == "error" and r_syntax["outputs"][0]["ename"] == "SyntaxError"
    assert [r["execution_count"] for r in results] == [1, 2, 3, 4, 5]

    # the agent's variables live in the user's namespace; the hooks are restored
    after = run(kernel, "ip = get_ipython()\nprint(y, type(sys.stdout).__name__, "
                        "'InProcess' in ip._showtraceback.__qualname__, 'publish' in ip.display_pub.__dict__, "
                        "'write_format_data' in ip.displayhook.__dict__)")
    text = "".join(c["text"] for t, c in after if t == "stream")
    assert text == "42 OutStream False False False\n"


def test_restart_is_refused_and_namespace_listing_works(kernel, tmp_path):
    code = (
        "from rlm.notebook.inprocess import InProcessExecutor\nfrom rlm.config import Config\n"
        f"ex2 = InProcessExecutor(get_ipython(), {str(tmp_path)!r}, Config())\n"
        "try:\n    ex2.restart('test')\nexcept Exception as e:\n    print('REFUSED', e)\n"
        "print('NS', type(ex2.list_namespace()).__name__, ex2.is_alive(), ex2.pid == __import__('os').getpid())\n"
    )
    msgs = run(kernel, code)
    text = "".join(c["text"] for t, c in msgs if t == "stream")
    assert "REFUSED cannot restart the notebook's own kernel" in text
    assert "NS dict True True" in text
