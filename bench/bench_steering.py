"""Steering on scripted drift scenarios: turns wasted without and with stream rules, gates
and the advisor (issue 29). Real kernels, agents built by build_agent, scripted models.

A scripted model replays the same replies with and without steering (its "next sample"
after a stopped reply is its next scripted reply), so the figures say what the steering
itself changes: cells of a forbidden or failing approach that ran, a false final accepted,
model calls and tokens spent, and the advisor's tokens as a fraction of the primary's.

    python bench/bench_steering.py
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path
from typing import Any

from rlm.app import build_agent
from rlm.app.options import RunOptions
from rlm.config import Config
from rlm.events import CellFinished, RunEnded
from rlm.llm import ScriptedLLM
from rlm.session.entries import MessageEntry
from rlm.session.store import SessionStore

RULE = "---\ncondition: read_csv\\(\nscope: code\n---\nThe data is JSON: use pd.read_json.\n"


def advise(note: str, severity: str) -> dict[str, Any]:
    return {"content": "", "tool_calls": [{"name": "advise", "arguments": {
        "note": note, "severity": severity}}]}


def fenced(code: str) -> str:
    return f"Next.\n\n```python\n{code}\n```\n"


def case(work: Path, replies: list[str], *, rules: bool = False, gate: str | None = None,
         advisor: list[Any] | None = None) -> dict[str, Any]:
    home = work / "home"
    rule_dir = work / ".rlm" / "rules"
    if rules:
        rule_dir.mkdir(parents=True, exist_ok=True)
        (rule_dir / "no_read_csv.md").write_text(RULE)
    os.chdir(work)
    config = Config(home=home, model="script:main", cell_timeout=60,
                    advisor="script:advisor" if advisor is not None else None)
    llm = ScriptedLLM(replies)
    adv = ScriptedLLM(advisor or [])
    session = SessionStore.create(home, model="script:main", task="t")
    options = RunOptions(autonomous=True, gate=[gate]) if gate else RunOptions()
    agent = build_agent(session, config, llm=llm, options=options, llm_factory=lambda s: adv)
    with agent:
        events = list(agent.run("Total revenue of sales.json?"))
        if agent.advisor is not None:
            agent.advisor.wait_idle(120)
    cells = [e for e in events if isinstance(e, CellFinished)]
    end = next(e for e in events if isinstance(e, RunEnded))
    forbidden = sum(1 for e in session.branch() if isinstance(e, MessageEntry)
                    and e.role == "assistant" and "read_csv" in str(e.message.get("content")))
    stats = agent.advisor.stats if agent.advisor is not None else None
    primary = agent.tokens_used - (stats.input_tokens + stats.output_tokens if stats else 0)
    return {
        "forbidden_run": forbidden, "failed_run": sum(1 for c in cells if c.status == "error"),
        "stopped": sum(1 for c in cells if c.status == "interrupted") + sum(
            1 for e in session.branch() if isinstance(e, MessageEntry) and e.role == "tool"
            and str(e.message.get("content")).startswith("not run: the advisor")),
        "turns": end.turns, "model_calls": len(llm.calls), "cells": len(cells),
"final": end.final,
        "reason": end.reason, "primary_tokens": primary,
        "advisor_fraction": (stats.input_tokens + stats.output_tokens) / primary if stats else None,
    }


def main() -> None:
    import pandas as pd

    read_csv = fenced("import pandas as pd\ndf = pd.read_csv('sales.json')\nprint(df.shape)")
    read_csv2 = fenced("import pandas as pd\ndf = pd.read_csv('sales.json', sep=',')\n"
                       "print(df.head())")
    good = fenced("import pandas as pd\ndf = pd.read_json('sales.json')\n"
                  "print(df.revenue.sum())")
    final = fenced("final(str(df.revenue.sum()))")
    # a slow approach that fails (a scan, a retried download): 3 s, then FileNotFoundError
    slow_bad = fenced("import time, pandas as pd\ntime.sleep(3)\ndf = pd.read_csv('sales.csv')")
    slow_bad2 = fenced("import time, pandas as pd\ntime.sleep(3)\n"
                       "df = pd.read_csv('./sales.csv', sep=',')")
    slow_bad3 = fenced("import time, pandas as pd\ntime.sleep(3)\n"
                       "df = pd.read_csv('data/sales.csv')")
    rows = []
    lock = threading.Lock()
    scenarios = [
        ("forbidden call (rule)", [read_csv, read_csv2, good, final], {"rules": True}),
        ("false finish (gate)", [fenced("final('written')"), fenced(
            "open('report.txt', 'w').write(str(40 + 2))\nfinal('written')")],
         {"gate": "test -f report.txt"}),
        ("failing approach (advisor blocker)", [slow_bad, slow_bad2, slow_bad3, good, final],
         {"advisor": [{"content": ""},
                      advise("sales.csv does not exist: the data is sales.json", "blocker"),
                      advise("Stop retrying sales.csv: read sales.json", "blocker"),
                      {"content": ""}, {"content": ""}]}),
        ("advisor watching", [read_csv, good, final],
         {"advisor": [{"content": "", "tool_calls": [{"name": "advise", "arguments": {
             "note": "The file is JSON: read it with pd.read_json", "severity": "concern"}}]},
             {"content": ""}, {"content": ""}]}),
    ]
    for name, replies, steer in scenarios:
        for on in (False, True):
            with tempfile.TemporaryDirectory() as tmp, lock:
                work = Path(tmp)
                pd.DataFrame({"revenue": [10, 25, 7]}).to_json(work / "sales.json")
                kw = steer if on else {}
                got = case(work, list(replies), **kw)
                rows.append((name, "with" if on else "without", got))
    print("| scenario | steering | turns | model calls | cells | forbidden cells run | "
          "failed cells run | cells stopped | final | advisor tokens / primary |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|---:|")
    for name, mode, g in rows:
        frac = f"{g['advisor_fraction']:.2f}" if g["advisor_fraction"] is not None else "-"
        print(f"| {name} | {mode} | {g['turns']} | {g['model_calls']} | {g['cells']} | "
              f"{g['forbidden_run']} | {g['failed_run']} | {g['stopped']} | "
              f"{g['final']} ({g['reason']}) | {frac} |")


if __name__ == "__main__":
    main()
