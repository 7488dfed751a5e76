"""Export: a scripted session built from REAL cell results (executed in a real kernel)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from rlm.config import Config
from rlm.kernel.kernel import Kernel
from rlm.kernel.types import CellResult, Output
from rlm.notebook.export import build_notebook, export_session, redact_text, secret_values
from rlm.session.entries import CompactionEntry, CustomEntry, MessageEntry, SessionHeader
from rlm.session.store import SessionStore

pytestmark = pytest.mark.timeout(120)

MPL_ENV = {"MPLBACKEND": "module://matplotlib_inline.backend_inline"}


class _Store:
    """Duck-typed store: export_session needs only .branch(leaf), .header and .dir."""

    def __init__(self, header, entries, d):
        self.header, self.entries, self.dir = header, entries, d

    def branch(self, leaf=None):
        return list(self.entries)


def _chain(entries):
    for prev, e in zip(entries, entries[1:], strict=False):
        e.parent_id = prev.id
    return entries


def _assistant(content: str, code: str, call_id: str) -> MessageEntry:
    call = {"id": call_id, "type": "function",
            "function": {"name": "python", "arguments": json.dumps({"code": code})}}
    return MessageEntry(message={"role": "assistant", "content": content, "tool_calls": [call]})


def _tool(call_id: str, cell: dict) -> MessageEntry:
    return MessageEntry(message={"role": "tool", "tool_call_id": call_id,
                                 "content": cell["shaped"]}, cell=cell)


CELLS = [
    ("I'll build the data first.\n```python\ndata = [3, 1, 4, 1, 5]\nprint('n =', len(data))\n```\n"
     "Then sum it.", "data = [3, 1, 4, 1, 5]\nprint('n =', len(data))"),
    ("", "total = sum(data)\ntotal"),
    ("Plot it.", "import matplotlib.pyplot as plt\nfrom IPython.display import display, HTML\n"
     "plt.plot(data)\nplt.show()\ndisplay(HTML('<b>plotted</b>'))"),
    ("", "1 / 0"),
    ("Done.", "print(total * 2)\nfinal(total)"),
]


@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    """A real on-disk session of real cell results (rlm.kernel.Kernel), with a compaction."""
    home = tmp_path_factory.mktemp("home")
    store = SessionStore.create(home, model="script:replies.json", task="Sum and plot some numbers")
    config = Config(home=home, cell_timeout=60)
    with Kernel(store.dir, config, bridge_handler=lambda method, params: {"ok": True}) as k:
        results = [k.execute(code).to_dict() for _, code in CELLS]
    store.append(MessageEntry(message={"role": "user", "content": store.header.task}))
    for i, ((prose, code), res) in enumerate(zip(CELLS, results, strict=True)):
        store.append(_assistant(prose, code, f"call_{i}"))
        store.append(_tool(f"call_{i}", res))
        if i == 1:
            store.append(CompactionEntry(summary="Built `data`, summed it into `total`.",
                                         tokens_before=48312, trigger="threshold"))
    store.append(CustomEntry(custom_type="final", data={"answer": "14", "source": "final"}))
    return store, results


def test_export_is_valid_and_faithful(scripted, tmp_path):
    store, results = scripted
    path = export_session(store.path, tmp_path / "out.ipynb")  # through SessionStore.open
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.rlm == {"session_id": store.header.id, "model": "script:replies.json",
                               "rlm_version": __import__("rlm").__version__}
    md = [c.source for c in nb.cells if c.cell_type == "markdown"]
    code = [c for c in nb.cells if c.cell_type == "code" and "rlm-prelude" not in
            c.metadata.get("tags", [])]
    assert md[0] == "**Task:** Sum and plot some numbers"
    assert "I'll build the data first." in md and "Then sum it." in md  # prose without fence
    assert any(s.startswith("### Compaction summary (threshold, 48,312 tokens before)") for s in md)
    assert md[-1] == "**Final answer:** 14"
    assert [c.source for c in code] == [c for _, c in CELLS]
    assert code[0].outputs[0].text == "n = 5\n"
    assert code[1].outputs[0].output_type == "execute_result"
    assert code[1].outputs[0].data["text/plain"] == "14"
    assert code[1].execution_count == results[1]["execution_count"]
    kinds = [(o.output_type, sorted(o.get("data", {}))) for o in code[2].outputs]
    assert ("display_data", ["image/png", "text/plain"]) in kinds
    png = next(o for o in code[2].outputs if "image/png" in o.get("data", {})).data["image/png"]
    assert base64.b64decode(png).startswith(b"\x89PNG")
    err = code[3].outputs[0]
    assert err.output_type == "error" and err.ename == "ZeroDivisionError" and err.traceback
    assert code[3].metadata.tags == ["raises-exception"]


def test_exported_notebook_reruns_in_fresh_kernel(scripted, monkeypatch):
    store, _ = scripted
    nb = build_notebook(store.branch(), store.header, Path(store.dir))
    for k, v in MPL_ENV.items():
        monkeypatch.setenv(k, v)
    NotebookClient(nb, timeout=60, kernel_name="python3").execute()
    code = [c for c in nb.cells if c.cell_type == "code"][1:]  # skip the prelude
    assert code[0].outputs[0].text == "n = 5\n"
    assert code[1].outputs[0].data["text/plain"] == "14"
    assert any("image/png" in o.get("data", {}) for o in code[2].outputs)
    assert code[3].outputs[0].ename == "ZeroDivisionError"
    # the prelude's final() says it is a no-op outside rlm, after the cell's own output
    assert code[4].outputs[0].text.startswith("28\n")
    assert "[rlm] final() is a no-op outside rlm" in code[4].outputs[0].text


def test_crash_and_restore_are_marked(tmp_path):
    header = SessionHeader(model="m", task="t")
    died = CellResult(status="died", died_cause="signal SIGKILL", restart=None).to_dict()
    died["restart"] = {"restored": ["df"], "failed": [], "skipped": [{"name": "sock", "reason": "x"}]}
    entries = _chain([
        _assistant("", "import os; os.kill(os.getpid(), 9)", "c1"), _tool("c1", died),
        CustomEntry(custom_type="kernel_restored",
                    data={"cause": "manual", "restored": ["a"], "failed": [{"name": "b"}]}),
    ])
    nb = build_notebook(entries, header, tmp_path)
    md = [c.source for c in nb.cells if c.cell_type == "markdown"]
    assert md == ["**Task:** t",
                  "⚠ Kernel restarted: signal SIGKILL; restored: df; lost: sock",
                  "⚠ Kernel restarted: manual; restored: a; lost: b"]


def test_secrets_are_redacted(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-1234567890abcdef")
    header = SessionHeader(model="openai/gpt-4o", task="use key sk-abcdefghijklmnopqrstuvwx")
    cell = CellResult(status="ok", outputs=[
        Output(kind="stream", name="stdout", text="token is tok-1234567890abcdef\n")]).to_dict()
    entries = _chain([
        MessageEntry(message={"role": "user", "content": header.task}),
        _assistant("key: sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX12", "print(os.environ['X'])", "c1"),
        _tool("c1", cell)])
    path = export_session(_Store(header, entries, tmp_path), tmp_path / "s.ipynb")
    text = path.read_text()
    assert "tok-1234567890abcdef" not in text and "sk-abc" not in text and "sk-proj" not in text
    assert text.count("[redacted]") == 3
    assert "tok-1234567890abcdef" in secret_values()
    assert redact_text("plain text sk-", []) == "plain text sk-"
