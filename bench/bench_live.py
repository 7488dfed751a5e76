"""The live notebook (rlm.notebook.live): what keeping a notebook current costs per event on
a long session, against the baseline of exporting the whole session again (what a view
without its incremental builder, or a user re-running `rlm export`, would pay), measured
in the same run.

    python bench/bench_live.py [--cells 200] [--n 20]

The session: `--cells` cells, each printing 2 KB, every tenth showing a 40 KB PNG (real
artifacts on disk, embedded as the export embeds them). Three costs, medians of `--n`:
- export: `build_notebook` of the branch, written to a file (the baseline);
- a cell that ends: its result appended to the log and the view flushed (the log read,
  the new entries fed, the notebook planned and rewritten);
- output of a running cell: what the 0.5 s timer does (no log read; the running cell
  laid over, the notebook planned and rewritten).
Prints a markdown table with each figure's ratio to the export. Asserts nothing about time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import nbformat

from rlm.events import CellFinished, CellStarted
from rlm.notebook.export import build_notebook
from rlm.notebook.live import LiveView
from rlm.session.entries import MessageEntry
from rlm.session.store import SessionStore


def _median_s(fn: Callable[[], object], n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _png(size: int) -> bytes:
    raw = os.urandom(size)  # incompressible: a PNG-sized payload
    return b"\x89PNG\r\n\x1a\n" + zlib.compress(raw, 0)


def _cell(store: SessionStore, i: int) -> None:
    call_id = f"call{i}"
    code = f"print(df.iloc[{i}])"
    store.append(MessageEntry(message={"role": "assistant", "content": "", "tool_calls": [
        {"id": call_id, "type": "function",
         "function": {"name": "python", "arguments": json.dumps({"code": code})}}]}))
    outputs: list[dict] = [{"kind": "stream", "name": "stdout", "text": ("row " * 512)[:2048]}]
    if i % 10 == 0:
        assert store.dir is not None
        rel = f"artifacts/plot{i}.png"
        (store.dir / rel).write_bytes(_png(40_000))
        outputs.append({"kind": "display_data", "data": {"text/plain": "<Figure>"},
                        "refs": {"image/png": rel}})
    cell = {"status": "ok", "execution_count": i + 1, "outputs": outputs, "duration_s": 0.01}
    store.append(MessageEntry(cell=cell, message={"role": "tool", "tool_call_id": call_id,
                                                  "name": "python", "content": "ok"}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=200)
    ap.add_argument("--n", type=int, default=20)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home, work = Path(tmp) / "home", Path(tmp) / "work"
        work.mkdir()
        store = SessionStore.create(home, model="script:x", task="a long analysis")
        assert store.dir is not None
        (store.dir / "artifacts").mkdir(exist_ok=True)
        store.append(MessageEntry(message={"role": "user", "content": "a long analysis"}))
        for i in range(a.cells):
            _cell(store, i)

        def export() -> None:
            nb = build_notebook(list(store.branch()), store.header, store.dir)
            (work / "export.ipynb").write_text(nbformat.writes(nb))

        view = LiveView(work / "live.ipynb", store.header, store.dir, store.branch,
                        say=lambda line: print("said:", line))
        size = (work / "live.ipynb").stat().st_size
        n_cell = [a.cells]

        def cell_ends() -> None:
            i = n_cell[0]
            n_cell[0] += 1
            _cell(store, i)
            view(CellFinished(f"print(df.iloc[{i}])", "ok", "ok", 0.01))

        t_export = _median_s(export, a.n)
        t_cell = _median_s(cell_ends, a.n)
        view(CellStarted("while True: print('tick')", 0))  # not in the log: no overlay
        store.append(MessageEntry(message={"role": "assistant", "content": "", "tool_calls": [
            {"id": "run", "type": "function", "function": {"name": "python", "arguments":
             json.dumps({"code": "while True: print('tick')"})}}]}))
        view(CellStarted("while True: print('tick')", 0))

        def output() -> None:
            view.cells.print("stdout", "tick\n")
            view.flush(feed=False)

        t_out = _median_s(output, a.n)
        view.close()
        assert view.stopped is None
        png = sum(1 for c in nbformat.read(work / "live.ipynb", as_version=4).cells
                  for o in c.get("outputs", []) if "image/png" in o.get("data", {}))
        print(f"session: {a.cells} cells, notebook {size / 1e6:.1f} MB, {png} PNGs; "
              f"medians of {a.n}\n")
        print("| step | median | x export |\n|---|---:|---:|")
        for name, t in (("export the session (baseline)", t_export),
                        ("live: a cell ends (log read, fed, rewritten)", t_cell),
                        ("live: a running cell's output (timer flush)", t_out)):
            print(f"| {name} | {t * 1000:.1f} ms | {t / t_export:.2f} |")


if __name__ == "__main__":
    main()
