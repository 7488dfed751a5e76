"""The names a cell binds come from the kernel (issue 59, item 3): kernel_ext.provenance
compares the user's names before and after each cell, the host checks the list into
`CellResult.binds`, and every host reader of "the names a cell binds" reads that: stuck
detection, the prune's supersession, the data flow. A real kernel runs each table cell;
the in-process `%%rlm` executor gives the same answer."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlm.agent.policy.dataflow import DataFlow
from rlm.agent.policy.stuck import SMALL, StuckWatch
from rlm.config import Config
from rlm.kernel import Kernel
from rlm.kernel.binds import kept_names
from rlm.kernel.kernel import cell_binds

pytestmark = pytest.mark.timeout(180)

# (what ran before, the cell, the names the kernel says it bound)
TABLE = [
    ("", "for i in range(3):\n    pass", {"i"}),  # a loop's variable is bound
    ("", "for j in range(3):\n    pass", {"j"}),  # renamed: a new binding too
    ("", "def f(a):\n    b = a * 2\n    return b", {"f"}),  # not its locals
    ("", "sq = [k * k for k in range(3)]", {"sq"}),  # not the comprehension's variable
    ("", "if (w := 10 ** 6) > 1:\n    pass", {"w"}),
    ("", "hits = [(z := n) for n in range(2)]", {"hits", "z"}),  # the walrus leaks
    ("total = 10 ** 6", "total += 1", {"total"}),  # a new int: rebound
    ("lst = []", "lst += [1]\nlst.append(2)", {"lst"}),  # the same object, rebound
    ("gone = object()", "del gone", {"gone"}),  # `del` binds (Python's execution model)
    ("", "import json as js", {"js"}),
    ("", "def g():\n    global counter\n    counter = [1]\ng()", {"g", "counter"}),
    ("", "exec('ex1 = [1]')\nglobals()['gx'] = [2]", {"ex1", "gx"}),
    ("", "a1 = [1]\nraise ValueError('halfway')\na2 = [2]", {"a1"}),  # before the error
    ("n5 = 5", "n5 = 5", {"n5"}),  # rebound to the very object it held
    ("keep = 1", "if keep > 5:\n    keep = 0\nlst.append(3)", {"keep"}),  # a branch not
    # taken over a name that existed: the one over-count (the code assigns it)
    ("", "undef = 1\nraise KeyError(1)\nn5 = 5", {"undef"}),  # failed: observed only
]


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    k = Kernel(tmp_path_factory.mktemp("s"), Config(
        kernel_cwd=str(tmp_path_factory.getbasetemp())))
    k.start()
    yield k
    k.stop()


@pytest.fixture(scope="module")
def ran(kernel):
    """(cell, its CellResult) for each table row, run in order in one kernel."""
    out = []
    for before, cell, _ in TABLE:
        if before:
            assert kernel.execute(before).ok
        out.append((cell, kernel.execute(cell)))
    return out


def test_the_kernel_says_what_each_cell_bound(ran):
    got = [(cell, set(res.binds or ())) for cell, res in ran]
    assert got == [(cell, want) for _, cell, want in TABLE]
    failed = [cell for cell, res in ran if res.status == "error"]
    assert [c.split("\n")[0] for c in failed] == ["a1 = [1]", "undef = 1"]


def test_the_host_checks_the_kernels_list(ran):
    def reply(binds):
        return {"metadata": {"rlm_provenance": {"read": [], "said": {}, "partial": [],
                                                "binds": binds}}}

    assert cell_binds(reply(["b", "a", "a"])) == ["a", "b"]
    for bad in (None, "a", [1], ["not a name"], ["x" * 300], ["n"] * 1001):
        assert cell_binds(reply(bad)) is None, bad
    assert cell_binds(None) is None and cell_binds({"metadata": {}}) is None


def test_stuck_detection_counts_a_new_kept_name_not_a_renamed_loop(ran):
    """The issue's complaint: a renamed loop variable counted as progress. A loop's
    variable is bound (the kernel says so) but kept by no one: not progress."""
    w = StuckWatch(SMALL)
    progress = {}
    for cell, res in ran:
        w.open_turn()
        progress[cell] = w.cell(cell, "same output", res.ok, res.binds) is None
        assert w.names >= kept_names(res.binds, cell) if res.ok else True
    assert not progress["for j in range(3):\n    pass"]
    assert progress["sq = [k * k for k in range(3)]"] and "k" not in w.names
    assert "b" not in w.names and {"f", "w", "z", "js", "counter", "ex1", "gx"} <= w.names
    assert "a1" not in w.names  # a failed cell is no progress
    assert progress["n5 = 5"]  # new to this run
    assert w.cell("n5 = 5", "same output", True, ["n5"]) is not None  # again: no news


def test_the_prune_and_the_data_flow_read_the_same_names(ran, tmp_path):
    """The prune reads each result's binds from the log (its `cell` record), loops'
    variables left out; the data flow places the kernel's names on statements."""
    import json

    from rlm.compaction.tiers import cell_results
    from rlm.session.entries import MessageEntry
    from rlm.session.store import SessionStore

    s = SessionStore.create(tmp_path / "s", model="m", task="t")
    for k, (cell, res) in enumerate(ran):
        s.append(MessageEntry(message={"role": "assistant", "content": "", "tool_calls": [
            {"id": f"c{k}", "type": "function",
             "function": {"name": "python", "arguments": json.dumps({"code": cell})}}]}))
        s.append(MessageEntry(message={"role": "tool", "tool_call_id": f"c{k}",
                                       "name": "python", "content": res.shaped},
                              cell=res.to_dict()))
    logged = SessionStore.open(s.dir).branch()
    assert [set(r.binds) for r in cell_results(logged)] == [set(res.binds or ())
                                                            for _, res in ran]
    for cell, res in ran:
        kept = kept_names(res.binds, cell)
        assert kept == set(res.binds or ()) - ({"i"} if cell.startswith("for i") else
                                                {"j"} if cell.startswith("for j") else set())
    # names holding data before the table's cells
    flow = DataFlow({"total", "ex1", "gx", "counter"})
    for cell, res in ran:
        flow.cell(cell, res.provenance, res.binds)
    # exec, globals() and g()'s `global` rebound them to literals where no statement of
    # the cell says: they hold no data now
    assert not flow.derived & {"ex1", "gx", "counter"}
    assert "total" in flow.derived  # `total += 1` keeps what total held


def test_the_in_process_executor_says_the_same(tmp_path):
    from IPython.core.interactiveshell import InteractiveShell

    from rlm.notebook.inprocess import InProcessExecutor

    shell = InteractiveShell.instance()
    ex = InProcessExecutor(shell, str(tmp_path), Config())
    got = []
    for before, cell, _ in TABLE:
        if before:
            assert ex.execute(before).status == "ok"
        got.append((cell, set(ex.execute(cell).binds or ())))
    assert got == [(cell, want) for _, cell, want in TABLE]
    assert Path(tmp_path).is_dir()


def test_a_namespace_too_large_to_compare_leaves_binds_unknown():
    """Two passes a cell over the namespace are the cost: past MAX_SCAN_NAMES names the
    kernel says nothing rather than take longer (the host reads None as no names)."""
    from kernel_ext import provenance

    ns = {f"v{i}": i for i in range(100)}
    provenance.begin(ns)
    ns["fresh"] = object()
    assert provenance.end()["binds"] == ["fresh"]
    ns.update({f"w{i}": i for i in range(provenance.MAX_SCAN_NAMES)})
    provenance.begin(ns)
    ns["fresh"] = object()
    assert provenance.end()["binds"] is None
