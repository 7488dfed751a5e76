"""Where a written file's content comes from (rlm.agent.policy.written): the kernel's
record of which line opened which file for writing, and the statements those lines read
from, through a real kernel and an agent the composition root builds."""

from __future__ import annotations

import pytest

from rlm.agent.context_files import load_context_files
from rlm.agent.policy.conditions import used
from rlm.agent.policy.written import Written
from rlm.app import build_agent
from rlm.config import Config
from rlm.events import RunEnded
from rlm.session.store import SessionStore
from tests.fenced import Fenced, cell

CELLS = [
    "levels = [l for l in access.splitlines() if ' POST ' in l]",
    "from collections import Counter\nc = Counter(l.split()[2] for l in levels)\nprint(c)",
    "def save(d, name):\n    with open(name, 'w') as f:\n"
    "        f.writelines(f'{k}: {v}\\n' for k, v in d.items())",
    "save(c, 'counts.txt')",
    "import pandas as pd\nevery = Counter(l.split()[2] for l in access.splitlines())\n"
    "pd.Series(every).to_csv('all.csv')",
    "from pathlib import Path\nPath('t.txt').write_text(str(c))",
    "o = open\nw = o('alias.txt', 'w')\nw.write('x')\nw.close()",
    "exec(\"open('ex.txt', 'w').write(str(len(levels)))\")",
    "import os\nos.rename('all.csv', 'moved.csv')",
    "print(open('counts.txt').read())",  # a read is no write
]


@pytest.mark.timeout(120)
def test_a_files_sources_are_the_statements_its_content_came_from(_isolated_home, tmp_path):
    log = "".join(f"10.0.0.{i} {m} /{p} 200\n" for i, (m, p) in enumerate(
        [("GET", "a"), ("POST", "b"), ("POST", "a"), ("GET", "b")] * 10))
    (tmp_path / "access.log").write_text(log)
    llm = Fenced([cell(c) for c in CELLS] + ["FINAL(done)"])
    session = SessionStore.create(_isolated_home, model="script:small", task="t")
    config = Config(home=_isolated_home, model="script:small", cell_timeout=60, max_turns=30,
                    kernel_cwd=str(tmp_path))
    agent = build_agent(session, config, llm=llm)
    with agent:
        load_context_files(agent, [tmp_path / "access.log"])
        end = [e for e in agent.run("count the POST requests per path")
               if isinstance(e, RunEnded)][-1]
    assert end.reason == "final", end
    written: Written = agent.answers.written
    base = tmp_path
    counts = written.sources(base / "counts.txt")
    assert counts is not None and used("POST", counts)
    assert any("def save" in s for s in counts) and any("save(c" in s for s in counts)
    assert written.sources(base / "all.csv") is not None  # written, then renamed
    moved = written.sources(base / "moved.csv")
    assert moved is not None and any("rename" in s for s in moved)
    assert not used("POST", written.sources(base / "all.csv") or [])
    assert used("POST", written.sources(base / "t.txt") or [])
    assert written.sources(base / "alias.txt") is not None
    # a write inside exec'd text is seen at the line that called exec; what the text
    # reads is not (the strict side: such a file comes from nothing that applied 'POST')
    ex = written.sources(base / "ex.txt")
    assert ex is not None and not used("POST", ex)
    assert written.sources(base / "never.txt") is None


def test_a_name_rebound_without_the_condition_drops_its_sources():
    w = Written()
    w.cell("x = [l for l in data if 'ERROR' in l]", {}, ["x"])
    w.cell("x = list(data)", {}, ["x"])
    w.cell("open('f.txt', 'w').write(str(len(x)))", {"wrote": {"1": ["/w/f.txt"]}}, [])
    assert not used("ERROR", w.sources("/w/f.txt") or [])
    w.cell("y = [l for l in data if 'ERROR' in l]\nopen('g.txt', 'w').write(str(y))\n1/0",
           {"wrote": {"2": ["/w/g.txt"]}}, ["y"])  # failed after its write
    assert used("ERROR", w.sources("/w/g.txt") or [])


@pytest.mark.timeout(240)
def test_a_file_written_without_the_aggregate_the_goal_names_does_not_complete_it(tmp_path):
    """The judge asks the aggregate the goal names (rlm.agent.policy.operations) of the
    code the file came from: salaries per department counted, not averaged, is refused at
    every claim until a cell writes the file from a mean."""
    import json

    from tests.test_line_conditions import rlm
    from tests.test_stuck import block, entries, fenced

    pay = [("Research", 70000), ("Research", 74000), ("Sales", 60000), ("Sales", 62000),
           ("Sales", 64000)]
    (tmp_path / "staff.csv").write_text("dept,salary\n" + "".join(f"{d},{s}\n" for d, s in pay))
    write = ("import pandas as pd\nstaff = pd.read_csv('staff.csv')\n"
             "per = staff.groupby('dept')['salary'].{how}()\n"
             "with open('salaries.md', 'w') as f:\n"
             "    f.writelines(f'{{k}}: {{round(v)}}\\n' for k, v in per.items())\n"
             "print(open('salaries.md').read())")
    counted = "FINAL(Research: 2)"
    replies = [block(write.format(how="count")), counted, counted, counted,
               block(write.format(how="mean")), "FINAL(Research: 72000)",
               "FINAL(Research: 72000)"]
    s = fenced(tmp_path / "s.json", replies)
    out = rlm("run", "staff.csv has salaries per dept. Compute the average salary per dept "
              "and write salaries.md with one line per dept.", "--model", s, "--goal",
              "salaries.md gives the average salary of every dept", "--autonomous",
              "--gate", "grep -q '^Research: ' salaries.md", "--max-turns", "12", "--json",
              cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    seen = [str(e["message"].get("content")) for e in entries(res["session_path"])
            if e["type"] == "message" and e["message"]["role"] == "user"]
    assert any("the code that wrote salaries.md never computes a mean" in t for t in seen), seen
    assert res["reason"] == "final", (res, out.stderr[-2000:])
    assert (tmp_path / "salaries.md").read_text() == "Research: 72000\nSales: 62000\n"
