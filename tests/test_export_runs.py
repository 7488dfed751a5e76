"""Exports that run: an exported notebook's first cell defines the kernel API its cells
use, so "Run All" (nbclient here) reproduces the session offline. Before: NameError where
the session called llm_query, rlm_query, compact, goal or cron (or used `pd` without an
import, now that the kernel defines it). The session is built through `build_agent` with
`script:` models and real kernels; its sub-call replies are recorded by the host
(rlm.agent.recursion: hidden `subcall` entries) and answered from there."""

from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient

from kernel_ext import api
from rlm.app import RunOptions, build_agent, prepare_inputs
from rlm.config import Config
from rlm.events import RunEnded
from rlm.llm import ScriptedLLM, get_llm
from rlm.notebook import export
from rlm.notebook.export import build_notebook, export_session
from rlm.session.entries import CustomEntry, MessageEntry
from rlm.session.store import SessionStore
from tests.rlmcli import call, script

pytest.importorskip("pandas")
pytestmark = pytest.mark.timeout(300)

CELLS = [
    'df = pd.DataFrame({"x": [1, 2, 3]})\na = llm_query("say hi")\nprint("a:", a, df.x.sum())',
    'b = llm_query_batched(["one", "two"])\nprint("b:", b)',
    'c = rlm_query("what is 6*7?")\nprint("c:", c)',
    "print(compact.status())\nprint(goal.get())\nprint(heartbeat.list())\nprint(cron.list())",
    'final("first done")',
]
SECOND = 'total = 42\nfinal_var("total")'


def streams(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o["output_type"] == "stream")


@pytest.fixture
def session_using_the_api(_isolated_home, tmp_path):
    main = script(tmp_path / "main.json", [call(c) for c in CELLS] + [call(SECOND)])
    subs = iter([  # in the order the agent asks for them: llm_query's model, the child's
        get_llm(script(tmp_path / "sub.json", ["hello there", "uno", "dos"])),
        get_llm(script(tmp_path / "child.json", [call('final("42")')])),
    ])
    config = Config(home=_isolated_home, model=main, sub_model="script:sub", cell_timeout=60,
                    batch_concurrency=1)
    session = SessionStore.create(_isolated_home, model=main, task="use the whole API")
    agent = build_agent(session, config, entry="run", llm=get_llm(main),
                        llm_factory=lambda spec: next(subs))
    with agent:
        first = list(agent.run("use the whole API"))
        second = list(agent.run("and the total?"))
    assert isinstance(first[-1], RunEnded) and first[-1].final == "first done", first[-1]
    assert isinstance(second[-1], RunEnded) and second[-1].final == "42", second[-1]
    return session


def test_sub_call_replies_are_recorded_hidden_from_the_model(session_using_the_api):
    subcalls = [e for e in session_using_the_api.branch()
                if isinstance(e, CustomEntry) and e.custom_type == "subcall"]
    got = [(e.data["method"], [(c["preview"], c["reply"]) for c in e.data["calls"]])
           for e in subcalls]
    assert got == [("llm_query", [("say hi", "hello there")]),
                   ("llm_query_batched", [("one", "uno"), ("two", "dos")]),  # one entry
                   ("rlm_query", [("what is 6*7?", "42")])]
    assert all(e.content is None and not e.display for e in subcalls)  # never sent


def test_the_export_runs_offline_and_reproduces_the_sub_call_answers(session_using_the_api, tmp_path):
    out = export_session(session_using_the_api, tmp_path / "api.ipynb")
    nb = nbformat.read(out, as_version=4)
    assert nb.cells[0].metadata["tags"] == ["rlm-prelude"]
    recorded = {c.id: streams(c) for c in nb.cells if c.cell_type == "code"}
    assert "a: hello there 6" in "".join(recorded.values())
    assert "b: ['uno', 'dos']" in "".join(recorded.values())
    assert "c: 42" in "".join(recorded.values())

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    NotebookClient(nb, timeout=120, kernel_name="python3",  # raises on any error
                   resources={"metadata": {"path": str(elsewhere)}}).execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert not [o for c in code for o in c.outputs if o["output_type"] == "error"]
    again = {c.id: streams(c) for c in code}
    for cell in code:
        if any(f"{v}:" in cell.source for v in ("a", "b", "c")) and "print(" in cell.source:
            assert again[cell.id] == recorded[cell.id], cell.source  # the same answers
    text = "".join(again.values())
    for control in ("compact.status", "goal.get", "heartbeat.list", "cron.list"):
        assert f"[rlm] {control}() is a no-op outside rlm" in text
    assert "[rlm] final() is a no-op outside rlm; the session's answer was: first done" in text
    assert "[rlm] final_var() is a no-op outside rlm; the session's answer was total: 42" in text


def test_the_prelude_knows_every_name_of_the_kernel_api():
    assert set(export._API) == set(api.NAMES)


def test_an_export_after_a_named_file_failed_reads_the_files_that_loaded(_isolated_home, tmp_path):
    """`good = read_csv('bad.csv')` before: the exporter zipped the loaded names with
    every file, the failed one included."""
    bad, good = tmp_path / "bad.csv", tmp_path / "good.csv"
    bad.write_text("a,b\n1,2\n1,2,3,4\n")  # ParserError: Expected 2 fields in line 3, saw 4
    good.write_text("x\n1\n2\n")
    config = Config(home=_isolated_home, model="script:m", cell_timeout=60)
    session = SessionStore.create(_isolated_home, model="script:m", task="t")
    options = RunOptions(named=[str(bad), str(good)])
    llm = ScriptedLLM([call("final(str(good.x.sum()))")])
    with build_agent(session, config, entry="run", options=options, llm=llm) as agent:
        prepare_inputs(agent, options, "sum bad.csv and good.csv")
        assert list(agent.run("sum bad.csv and good.csv"))[-1].final == "3"
    (entry,) = [e for e in session.branch()
                if isinstance(e, CustomEntry) and e.custom_type == "context_vars"]
    assert entry.data["names"] == ["good"] and len(entry.data["files"]) == 2
    assert "Not loaded" in entry.content and "bad.csv" in entry.content

    def loaders(nb):
        return [c.source for c in nb.cells if c.cell_type == "code" and "read_csv" in c.source]

    nb = build_notebook(session.branch(), session.header, session.dir)
    (loader,) = loaders(nb)
    assert loader.startswith("good = ") and f"read_csv({str(good)!r})" in loader
    assert "bad.csv" not in loader
    # a log written before `loaded` was recorded: names are matched to their files' stems
    old = CustomEntry(custom_type="context_vars", display=True, content="...",
                      data={"names": ["good"], "files": [str(bad), str(good)]})
    task = MessageEntry(message={"role": "user", "content": "t"})
    (old_loader,) = loaders(build_notebook([old, task], None, tmp_path))
    assert old_loader.startswith("good = ") and f"read_csv({str(good)!r})" in old_loader
