"""Listing a kernel's names while a cell runs (issue 16): `rlm state` from another process
and the compaction's `<ipython_state>` ask the kernel on a subshell (ipykernel >= 7); a
kernel that cannot answer there is listed from its last snapshot, and the listing says so.

Every test runs a real kernel whose cell defines names, writes a `started` marker, then
waits for a `release` file (at most 60 s) and writes `finished`. The test lists between
the two markers: `finished` still absent proves the answer came while the cell ran. The
tests that only list share one kernel (tests/kernels.py); those that change how it answers,
or list a session's own kernel from another process, start their own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from rlm.compaction.notes import ipython_state_entry
from rlm.config import Config
from rlm.kernel import Kernel
from rlm.kernel.state import session_state
from rlm.kernel.types import CellResult
from rlm.session.entries import CustomEntry
from rlm.session.store import SessionStore

WAIT_S = 60.0


class Markers:
    def __init__(self, folder: Path):
        self.started, self.release, self.finished = (folder / n for n in ("started", "release", "finished"))
        self.result: CellResult | None = None

    def cell(self, before: str, during: str, after: str) -> str:
        """Run `before`, write `started`, repeat `during` until `release`, run `after`,
        write `finished`."""
        return (f"import pathlib, time\n{before}\n"
                f"pathlib.Path({str(self.started)!r}).write_text('1')\n"
                f"_t = time.monotonic()\n"
                f"while not pathlib.Path({str(self.release)!r}).exists() and time.monotonic() - _t < {WAIT_S}:\n"
                f"    {during}\n{after}\n"
                f"pathlib.Path({str(self.finished)!r}).write_text('1')\n")


@contextmanager
def running(k: Kernel, tmp: Path, before: str, during: str = "time.sleep(0.05)",
            after: str = "") -> Iterator[Markers]:
    """A cell running on another thread, between its `started` and `finished` markers."""
    # in tmp, the working directory (the default sandbox shows a kernel nothing outside it)
    markers = tmp / "markers"
    markers.mkdir(exist_ok=True)
    m = Markers(markers)
    code = m.cell(before, during, after)
    t = threading.Thread(target=lambda: setattr(m, "result", k.execute(code, timeout=WAIT_S + 30)))
    t.start()
    try:
        ended = threading.Event()
        while not m.started.exists():  # synchronise on the marker the cell writes
            assert t.is_alive(), f"the cell ended before its marker: {m.result}"
            ended.wait(0.01)
        yield m
    finally:
        m.release.write_text("1")
        t.join(WAIT_S + 60)
    assert m.result is not None and m.result.status == "ok", m.result
    assert m.finished.exists()


def new_session(tmp_path: Path) -> Path:
    s = SessionStore.create(Path(os.environ["RLM_HOME"]), model="script:none")
    assert s.dir is not None
    s.close()
    return s.dir


def rlm_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "rlm", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def by_name(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in rows}


def test_rlm_state_answers_from_the_live_kernel_while_a_cell_runs(tmp_path):
    sdir = new_session(tmp_path)
    with Kernel(sdir, Config(home=tmp_path)) as k:
        k.execute("old = 1")
        with running(k, tmp_path, "sales = {'east': [1, 2, 3], 'west': [4]}\nrows = list(range(500))") as m:
            state = json.loads(rlm_cli("state", str(sdir), "--json", cwd=tmp_path).stdout)
            assert not m.finished.exists()  # answered while the cell was still running
            assert state["source"] == "live", state
            names = by_name(state["names"])
            assert "dict of 2: str -> list" in names["sales"]["summary"]
            assert names["rows"]["type"] == "list" and names["old"]["summary"] == "int = 1"
            assert "done" not in names
            text = rlm_cli("state", str(sdir), cwd=tmp_path).stdout  # the human form too
            assert text.startswith("source: live") and "sales" in text
            assert not m.finished.exists()
        # the subshell made for each `rlm state` call is gone again
        left = k.execute("print('subshells', get_ipython().kernel.shell_channel_thread.manager"
                         ".list_subshell())")
        assert "subshells []" in left.shaped


def test_compaction_lists_the_live_kernel_while_a_cell_runs(shared_kernel, tmp_path):
    """The owner's own listing during a cell (the compaction's `<ipython_state>`)."""
    k = shared_kernel
    with running(k, tmp_path, "model_rows = [3.5] * 40") as m:
        listing = k.list_namespace(timeout=10)
        entry = ipython_state_entry(k, {"gone"})
        assert not m.finished.exists()
    assert "note" not in listing and "model_rows" in by_name(listing["names"])
    assert entry is not None and entry.content is not None
    assert "- model_rows: list of 40 float" in entry.content
    assert "Note:" not in entry.content and "Removed since the previous state notice: gone" in entry.content


def test_a_compaction_during_a_running_cell_gets_its_ipython_state(shared_kernel, tmp_path):
    """perform_compaction end to end: the summary, then the notice from the live kernel;
    the file-ops query does not wait for the cell either."""
    from rlm.compaction.core import perform_compaction
    from rlm.compaction.plan import CompactionSettings
    from tests.test_compaction_core import ScriptedLLM, session_from

    s = session_from("after_compaction")
    k = shared_kernel
    with running(k, tmp_path, "per_region = {'east': 17, 'west': 4}") as m:
        entry = perform_compaction(s, ScriptedLLM(["H", "P"]),
                                   CompactionSettings(keep_recent_tokens=100),
                                   trigger="requested", kernel=k)
        assert not m.finished.exists()
    state = s.branch()[-1]
    assert entry is not None and state.parent_id == entry.id
    assert isinstance(state, CustomEntry) and state.custom_type == "ipython_state"
    assert "- per_region: dict of 2: str -> int; keys 'east', 'west'" in (state.content or "")


def test_a_listing_while_the_cell_mutates_its_containers(shared_kernel, tmp_path):
    """The cell grows and clears a dict and a set and binds new names in a loop while the
    subshell lists them: every listing answers, from the live kernel."""
    during = ("_i += 1; grow[_i] = _i; seen.add(_i); globals()[f'n{_i % 50}'] = _i\n"
              "    if _i % 500 == 0: grow.clear(); seen.clear()")
    k = shared_kernel
    with running(k, tmp_path, "grow, seen, _i = {}, set(), 0", during) as m:
        listings = [k.list_namespace(timeout=10) for _ in range(15)]
        assert not m.finished.exists()
    for listing in listings:
        assert "note" not in listing
        rows = by_name(listing["names"])
        assert rows["grow"]["summary"].startswith("dict"), rows["grow"]
        assert rows["seen"]["summary"].startswith("set"), rows["seen"]


def test_a_listing_leaves_the_running_cells_figure_alone(shared_kernel, tmp_path):
    """An execute_request on a subshell would fire post_execute, and matplotlib's inline
    backend would show and close the figure the cell is still drawing (measured)."""
    pytest.importorskip("matplotlib")
    k = shared_kernel
    with running(k, tmp_path, "import matplotlib.pyplot as plt\nlines = plt.plot([1, 2, 3])",
                 after="print('figures', plt.get_fignums())") as m:
        # (`plt` itself is the kernel's alias: never listed)
        assert "lines" in by_name(k.list_namespace(timeout=10)["names"])
    assert m.result is not None
    assert "figures [1]" in m.result.shaped and "[image: " in m.result.shaped


def _hide_subshells() -> str:
    """A kernel that does not advertise subshells (as ipykernel < 7)."""
    return ("_k = type(get_ipython().kernel)\n_info = _k.kernel_info\n"
            "_k.kernel_info = property(lambda self, _i=_info: {**_i.fget(self), 'supported_features': "
            "[f for f in _i.fget(self)['supported_features'] if f != 'kernel subshells']})\n"
            "del _k, _info")


def test_without_subshells_the_listing_comes_from_the_snapshot_and_says_so(tmp_path):
    sdir = new_session(tmp_path)
    with Kernel(sdir, Config(home=tmp_path)) as k:
        k.execute("kept = [1, 2, 3]")
        assert k.execute(_hide_subshells()).status == "ok"
        with running(k, tmp_path, "fresh = 'defined after the snapshot'") as m:
            listing = k.list_namespace(timeout=10)
            entry = ipython_state_entry(k, {"kept", "gone"})
            state = session_state(sdir, timeout=1.0)
            shown = rlm_cli("state", str(sdir), cwd=tmp_path).stdout
            assert not m.finished.exists()
    assert listing["source"] == "snapshot"
    assert "busy running a cell and it does not support kernel subshells" in listing["note"]
    assert "the listing is from the snapshot taken at " in listing["note"]
    assert "kept" in by_name(listing["names"]) and "fresh" not in by_name(listing["names"])
    assert entry is not None and entry.content is not None
    assert "Note: the kernel is busy running a cell" in entry.content and "snapshot taken at" in entry.content
    assert "- kept: list of 3 int" in entry.content and "Removed since" not in entry.content
    assert state["source"] == "snapshot" and "snapshot taken at" in state["detail"]
    assert "kept" in by_name(state["names"]) and "fresh" not in by_name(state["names"])
    assert shown.startswith("source: snapshot"), shown  # its detail wraps below it
    assert "the kernel is busy running a cell and it does not support kernel subshells" \
        in " ".join(shown.split()), shown
    assert "snapshot taken at" in " ".join(shown.split()) and "kept" in shown and "fresh" not in shown


def test_a_subshell_that_does_not_answer_falls_back_to_the_snapshot(tmp_path):
    with Kernel(tmp_path / "s", Config(home=tmp_path)) as k:
        k.execute("kept = 2")
        k.execute("get_ipython().kernel.shell_handlers.pop('rlm_namespace_request')")
        with running(k, tmp_path, "fresh = 3") as m:
            listing = k.list_namespace(timeout=1.0)
            assert not m.finished.exists()
    assert listing["source"] == "snapshot"
    assert "did not answer on a subshell (no rlm_namespace_reply within 1 s: " in listing["note"]
    assert set(by_name(listing["names"])) >= {"kept"} and "fresh" not in by_name(listing["names"])


def test_an_idle_kernel_still_lists_on_its_main_shell(tmp_path):
    """No cell runs: the listing is the ordinary one (no subshell, no note)."""
    with Kernel(tmp_path / "s", Config(home=tmp_path)) as k:
        k.execute("x = 5")
        listing = k.list_namespace()
        assert "note" not in listing and by_name(listing["names"])["x"]["summary"] == "int = 5"
        assert k._lister._held is None  # never needed a subshell


def test_a_summary_reads_a_container_again_when_it_changed_size_meanwhile():
    from kernel_ext.describe import summary

    class Flaky(set):
        reads = 0

        def __iter__(self):
            Flaky.reads += 1
            if Flaky.reads == 1:  # what a set resized by the running cell raises
                raise RuntimeError("Set changed size during iteration")
            return super().__iter__()

    assert summary(Flaky({1, 2, 3})) == "Flaky of 3 int"


def test_the_subshell_listing_retries_a_namespace_that_changed_under_it(shell, monkeypatch):
    from kernel_ext import snapshot, subshell

    shell.run_cell("kept = {'a': 1}")
    real, calls = snapshot.Snapshotter.namespace, []

    def racing(self):
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("dictionary changed size during iteration")
        return real(self)

    monkeypatch.setattr(snapshot.Snapshotter, "namespace", racing)
    assert "kept" in by_name(json.loads(subshell.listing_text(shell))["names"])
    calls.clear()
    monkeypatch.setattr(subshell, "RETRIES", 2)
    with pytest.raises(RuntimeError, match="kept changing"):
        subshell.listing_text(shell)


def test_listing_in_a_thread_while_the_namespace_churns(shell):
    """In-process: one thread binds/deletes names and grows/clears containers, another lists."""
    from kernel_ext import subshell

    shell.run_cell("box, bag = {}, set()")
    stop = threading.Event()

    def churn() -> None:
        ns, i = shell.user_ns, 0
        while not stop.is_set():
            i += 1
            ns[f"tmp{i % 40}"] = [i] * (i % 7)
            ns["box"][i] = i
            ns["bag"].add(i)
            if i % 300 == 0:
                ns["box"].clear()
                ns["bag"].clear()
                for k in [k for k in ns if k.startswith("tmp")]:
                    ns.pop(k, None)

    t = threading.Thread(target=churn)
    t.start()
    try:
        listings = [json.loads(subshell.listing_text(shell)) for _ in range(30)]
    finally:
        stop.set()
        t.join()
    for listing in listings:
        rows = by_name(listing["names"])
        assert rows["box"]["summary"].startswith("dict") and rows["bag"]["summary"].startswith("set")
