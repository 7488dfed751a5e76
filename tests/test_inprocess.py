"""InProcessExecutor inside a REAL kernel, driven through jupyter_client as JupyterLab does."""

from __future__ import annotations

import json
import os

import pytest
from frontend import run
from jupyter_client.manager import start_new_kernel

pytestmark = pytest.mark.timeout(120)




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
    "import matplotlib\nmatplotlib.use('module://matplotlib_inline.backend_inline')\n"
    "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()",
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
    r_print, r_display, r_err, r_loop, r_syntax, r_plot = results

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
    assert [r["execution_count"] for r in results] == [1, 2, 3, 4, 5, 6]
    assert any("image/png" in c["data"] for t, c in seen if t == "display_data")  # user saw it
    (img,) = [o for o in r_plot["outputs"] if o["kind"] == "display_data"]
    assert "image/png" not in img["data"] and img["refs"]["image/png"].startswith("artifacts/")
    assert (tmp_path / img["refs"]["image/png"]).read_bytes().startswith(b"\x89PNG")
    assert f"[image: {(tmp_path / img['refs']['image/png']).absolute()}]" in r_plot["shaped"]

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


def test_import_notebook_runs_cells_and_records_them(kernel, tmp_path):
    import nbformat
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    src = tmp_path / "analysis.ipynb"
    nbformat.write(new_notebook(cells=[
        new_markdown_cell("# My analysis"),
        new_code_cell("rows = [1, 2, 3]\nprint('loaded', len(rows))"),
        new_code_cell("undefined_name"),
        new_code_cell("doubled = [r * 2 for r in rows]\ndoubled"),
    ]), src)
    out = tmp_path / "exported.ipynb"
    code = (
        "from rlm.notebook.inprocess import InProcessExecutor\nfrom rlm.config import Config\n"
        "from rlm.notebook.from_notebook import import_notebook, NotebookCellFailed\n"
        "from rlm.notebook.export import export_session\n"
        "from rlm.session.store import SessionStore\n"
        f"ex3 = InProcessExecutor(get_ipython(), {str(tmp_path)!r}, Config())\n"
        "s = SessionStore.in_memory(task='t')\n"
        f"res = import_notebook({str(src)!r}, ex3, s)\n"
        "print('STATUS', [r.status for r in res], doubled)\n"
        "entry = s.branch()[-1]\nprint('CONTENT', entry.custom_type, repr(entry.content))\n"
        "s2 = SessionStore.in_memory(task='t')\n"
        f"try:\n    import_notebook({str(src)!r}, ex3, s2, strict=True)\n"
        "except NotebookCellFailed as e:\n    print('STRICT', len(s2.branch()[-1].data['cells']), e)\n"
        f"class _S:\n    header, dir = s.header, {str(tmp_path)!r}\n"
        "    def branch(self, leaf=None):\n        return s.branch()\n"
        f"export_session(_S(), {str(out)!r})\n"
    )
    text = "".join(c["text"] for t, c in run(kernel, code) if t == "stream")
    assert "STATUS ['ok', 'error', 'ok'] [2, 4, 6]" in text
    assert "CONTENT notebook_import" in text and "3 code cell(s), 1 failed" in text
    assert "NameError" in text and "Namespace after the notebook:" in text
    assert "STRICT 2 " in text and "cell 3 failed (error)" in text
    nb = nbformat.read(out, as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.source for c in cells][:1] == ["rows = [1, 2, 3]\nprint('loaded', len(rows))"]
    assert cells[0].outputs[0].text == "loaded 3\n"
    assert cells[1].outputs[0].ename == "NameError"
    assert cells[2].outputs[0].data["text/plain"] == "[2, 4, 6]"
