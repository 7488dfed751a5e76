"""A cell's save runs in the kernel after the cell's reply (kernel_ext.settle) and the host
overlaps its own step with it, but what a cell leaves is on disk before the next model
call, as the log's entries are (rlm.kernel.settling). Real kernel, scripted model, the
agent built through the root; what is on disk is read at each model call."""

from __future__ import annotations

from typing import Any

from rlm.app import build_agent
from rlm.config import Config
from rlm.llm import ScriptedLLM
from rlm.session.store import SessionStore
from tests.rlmcli import call
from tests.snapshot_shell import read_manifest


def _run(home: Any, cells: list[str]) -> tuple[list[set[str] | None], list[list[dict]], Any]:
    """Run `cells` then final('done'); at each model call, the names the snapshot on
    disk holds, and the messages the model got."""
    config = Config(home=home, model="script:settle")
    session = SessionStore.create(home, model=config.model, task="t")
    llm = ScriptedLLM([call(c) for c in cells] + [call("final('done')")])
    on_disk: list[set[str] | None] = []
    complete = llm.complete

    def seeing(messages: list[dict], *a: Any, **kw: Any) -> Any:
        try:
            on_disk.append(set(read_manifest(session.dir / "snapshot")["entries"]))
        except (AssertionError, OSError):
            on_disk.append(None)
        return complete(messages, *a, **kw)

    llm.complete = seeing  # type: ignore[method-assign]
    with build_agent(session, config, llm=llm) as agent:
        events = list(agent.run("go"))
    assert events[-1].reason == "final", events[-1]
    return on_disk, llm.calls, session


def test_what_a_cell_leaves_is_on_disk_before_the_next_model_call(_isolated_home):
    # 40 MB each: the pickle and its fsync take long enough that a model call made
    # before the save ended would find the name missing
    cells = [f"import numpy as np\nbig{i} = np.full(5_000_000, {i}.0)\nsmall{i} = {i}"
             for i in range(3)]
    on_disk, _, _ = _run(_isolated_home, cells)
    assert len(on_disk) == 4
    for i in range(3):  # the call after cell i sees it saved
        assert {f"big{i}", f"small{i}"} <= (on_disk[i + 1] or set()), (i, on_disk)


def test_a_save_that_fails_is_told_to_the_model_before_its_next_call(_isolated_home):
    cells = ["import kernel_ext.snapshot as _s\n"
             "def _broken(full=False):\n    raise OSError('the disk said no')\n"
             "_s._state.snapshot = _broken\nx = 1",
             "y = 2"]
    _, calls, session = _run(_isolated_home, cells)
    said = [m["content"] for m in calls[1] if m["role"] == "user"]
    assert any("[rlm] snapshot failed" in c and "the disk said no" in c for c in said), said
    notes = [e for e in session.branch() if getattr(e, "origin", None) == "snapshot"]
    assert notes  # in the log, as what the model was told


def test_a_kernel_that_dies_while_saving_is_said_and_the_next_cell_restores(_isolated_home):
    cells = ["a = 1",
             # the save after this cell exits the kernel once its first data file is written
             "import os\nos.environ['RLM_SNAPSHOT_CRASH_AFTER_FILES'] = '1'\nb = [2] * 10",
             "print(sorted(n for n in ('a', 'b') if n in globals()))"]
    _, calls, _ = _run(_isolated_home, cells)
    told = "\n".join(str(m["content"]) for m in calls[2])
    assert "while it saved the snapshot after the last cell" in told, told
    last = str(calls[3][-1]["content"])
    assert "['a']" in last or "['a', 'b']" in last, last  # restored; `b` only if replayed
