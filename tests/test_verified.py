"""An honest "verified" (issues 25, 58): every figure and name an answer asserts is in an
output of code that depends on the task's data (rlm.agent.policy.dataflow), or is the value
`final()` computed from it; the same for fenced-code and native-tool models. Agents built
through the composition root with `script:` models, real kernels; assertions on RunEnded,
`--json`'s dict and the log. The task's data here is a file the cells read (DATA)."""

from __future__ import annotations

import json

import pytest

from rlm.agent.result import RunResult
from rlm.app import build_agent
from rlm.config import Config
from rlm.events import RunEnded
from rlm.llm import get_llm
from rlm.session.entries import CustomEntry, MessageEntry
from rlm.session.store import SessionStore

KINDS = ("fenced", "native")


def _script(kind: str, steps: list[tuple[str, str]]) -> list:
    """The same transcript as each kind of model writes it: ("cell", code) | ("answer", text)."""
    out: list = []
    for what, text in steps:
        if what == "cell":
            out.append(f"```python\n{text}\n```" if kind == "fenced" else
                       {"content": "", "tool_calls": [{"name": "python",
                                                      "arguments": {"code": text}}]})
        else:
            out.append(f"FINAL({text})" if kind == "fenced" else text)
    return out


DATA = "N725MQ 575 EV 6"  # the task's data: flights.txt in the working directory
READ = "data = open('flights.txt').read().split()\n"


def _run(home, tmp_path, kind: str, steps: list[tuple[str, str]], prompt: str,
         max_turns: int | None = None) -> tuple[RunEnded, RunResult, SessionStore]:
    (tmp_path / "flights.txt").write_text(DATA)
    path = tmp_path / f"{kind}.json"
    path.write_text(json.dumps(_script(kind, steps)))
    spec = f"script:{path}"
    config = Config(home=home, model=spec, cell_timeout=60, max_turns=max_turns)
    llm = get_llm(spec, config)
    if kind == "fenced":
        llm.native_tools = False  # like the local model: fenced code, text FINAL
    session = SessionStore.create(home, model=spec, task=prompt)
    agent = build_agent(session, config, entry="run", llm=llm)
    with agent:
        events = list(agent.run(prompt))
    end = [e for e in events if isinstance(e, RunEnded)][-1]
    return end, RunResult.from_events(session, events), session


def _cell_entries(session: SessionStore, holding: str) -> list[str]:
    return [e.id for e in SessionStore.open(session.path).branch()
            if isinstance(e, MessageEntry) and e.role == "tool" and holding in (e.cell or {}).get(
                "shaped", "")]


@pytest.mark.parametrize("kind", KINDS)
def test_a_literal_final_with_no_output_holding_it_is_unverified(_isolated_home, tmp_path, kind):
    end, result, session = _run(_isolated_home, tmp_path, kind,
                                [("cell", "x = 6 * 7"), ("cell", 'final("42")')], "6 times 7?")
    assert end.final == "42" and end.verified is False
    assert end.unverified_claims == ["42"] and "figures (42)" in end.why
    out = result.to_json()
    assert out["verified"] is False and out["unverified_claims"] == ["42"]
    assert "evidence" not in out
    final = [e for e in SessionStore.open(session.path).branch()
             if isinstance(e, CustomEntry) and e.custom_type == "final"][-1]
    assert final.data["verified"] is False and final.data["unverified_claims"] == ["42"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_computed_final_is_verified_with_its_cell_as_evidence(_isolated_home, tmp_path, kind):
    end, result, session = _run(_isolated_home, tmp_path, kind,
                                [("cell", READ + "final(int(data[3]) * 7)")], "6 times 7?")
    cell = [e.id for e in SessionStore.open(session.path).branch()
            if isinstance(e, MessageEntry) and e.role == "tool"]
    assert end.verified is True and end.evidence == {"42": cell}
    assert result.to_json()["evidence"] == {"42": cell}


@pytest.mark.parametrize("kind", KINDS)
def test_two_figures_of_which_one_no_output_holds_is_unverified(_isolated_home, tmp_path, kind):
    end, _, _ = _run(_isolated_home, tmp_path, kind,
                     [("cell", READ + "print(data[1])"), ("answer", "575 of 1000 flights")],
                     "How many flights?", max_turns=2)
    assert end.verified is False and end.unverified_claims == ["1000"]


@pytest.mark.parametrize("kind", KINDS)
def test_the_flights_case_a_count_no_cell_printed_is_unverified(_isolated_home, tmp_path, kind):
    """Seen with the default model: the only cell printed N725MQ; the answer "N725MQ, with
    1000 flights" (the true count is 575) was verified, exit 0."""
    end, result, _ = _run(_isolated_home, tmp_path, kind,
                          [("cell", READ + "print(data[0])"),
                           ("answer", "N725MQ, with 1000 flights")],
                          "Which plane (tailnum) flew the most flights?", max_turns=2)
    assert end.verified is False and end.unverified_claims == ["1000"]
    assert "figures (1000)" in end.why and result.to_json()["unverified_why"] == end.why


@pytest.mark.parametrize("kind", KINDS)
def test_a_short_code_printed_and_answered_is_verified(_isolated_home, tmp_path, kind):
    """An answer `EV` whose cell printed `EV` was unverified: words under 3 characters
    were never checked."""
    end, result, session = _run(_isolated_home, tmp_path, kind,
                                [("cell", READ + "print(data[2])"), ("answer", "EV")],
                                "Which carrier had the most delayed flights?")
    assert end.verified is True and end.evidence == {"EV": _cell_entries(session, "EV")}
    assert result.to_json()["evidence"] == end.evidence


def test_both_kinds_of_model_get_the_same_result_on_the_same_transcript(_isolated_home, tmp_path):
    transcripts = [
        ([("cell", READ + "print(data[0], data[1])"), ("answer", "N725MQ, with 575 flights")], 2),
        ([("cell", READ + "print(data[0])"), ("answer", "N725MQ, with 1000 flights")], 2),
        ([("cell", "print({}['x'])"), ("cell", READ + "print(data[2])"), ("answer", "EV")], 3),
        ([("cell", READ + "print(data[0])"), ("cell", 'final("Lyon")')], 2),
        ([("cell", READ + "print(999 + 1)"), ("answer", "1000")], 2),
    ]
    for i, (steps, turns) in enumerate(transcripts):
        got = []
        for kind in KINDS:
            where = tmp_path / f"{i}"
            where.mkdir(exist_ok=True)
            end, _, _ = _run(_isolated_home, where, kind, steps, "Which one?", max_turns=turns)
            got.append((end.final, end.verified, end.unverified_claims, sorted(end.evidence or {})))
        assert got[0] == got[1], (steps, got)


def test_rlm_run_json_gives_the_unverified_claims_and_exit_5(tmp_path, _isolated_home):
    """The flights case through the real entry point: `--json` said `"verified": true`,
    exit 0."""
    import os
    import subprocess
    import sys

    path = tmp_path / "s.json"
    (tmp_path / "flights.txt").write_text(DATA)
    path.write_text(json.dumps(_script("native", [
        ("cell", READ + "print(data[0])"), ("answer", "N725MQ, with 1000 flights")])))
    proc = subprocess.run([sys.executable, "-m", "rlm", "run", "Which plane flew the most?",
                           "--model", f"script:{path}", "--json"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=240,
                          env={**os.environ, "RLM_HOME": str(_isolated_home)})
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 5, proc.stderr[-2000:]
    assert res["verified"] is False and res["unverified_claims"] == ["1000"]
    assert "figures (1000)" in res["unverified_why"] and "evidence" not in res


# Issue 40 item 12: "verified" by what the value is, not how it is spelled. A figure typed
# in the code reaches final()'s value through an f-string, str(), a container literal or a
# name bound to one: typed, not computed, so unverified unless an output shows it.
SPELLINGS = [
    'top = "N725MQ"\nfinal(f"{top}, with {1000} flights")',
    "final(str(1000))",
    'top = "N725MQ"\nfinal({"plane": top, "flights": 1000})',
    "n = [1000]\nfinal(n[0])",
    'final("flights: " + str(1000))',
    'final("{} flights".format(1000))',
    "count = 1000\nlabel = f'{count} flights'\nfinal(label)",
    "final_var('n') if False else None\nn = 1000\nfinal_var('n')",
]


# Issue 58 item 3: an invented figure made from literals is unverified however it is
# computed, printed or carried, even in a cell (or a session) that also read the data: the
# rule is data dependence, not a list of spellings. Each cell prints 1000 and then answers
# with it; the data (DATA) holds no 1000.
INVENTED = [
    "print(999 + 1)\nfinal(999 + 1)",
    "def f():\n    return 1000\nprint(f())\nfinal(f())",
    "n = 0\nfor _ in range(1000):\n    n += 1\nprint(n)\nfinal(n)",
    "d = {}\nv = d.get('flights', 1000)\nprint(v)\nfinal(v)",
    "print(n := 10 ** 3)\nfinal(n)",
    "x = 500\nx += 500\nprint(x)\nfinal_var('x')",
    "import math\nprint(int(math.sqrt(10 ** 6)))\nfinal(int(math.sqrt(10 ** 6)))",
    "print(len('a' * 1000))\nfinal(len('a' * 1000))",
    "v = sum([250] * 4)\nprint(v)\nfinal(str(v))",
    "v = int('1' + '000')\nprint(v)\nfinal(v)",
    "import numpy as np\nv = int(np.arange(1000).size)\nprint(v)\nfinal(v)",
    "v = max(range(1001))\nprint(f'{v} flights')\nfinal(f'{v} flights')",
    "v = sorted([3, 1000, 7])[-1]\nprint(v)\nfinal(v)",
    "v = (lambda: 1000)()\nprint(v)\nfinal(v)",
    "class C:\n    n = 1000\nprint(C.n)\nfinal(C.n)",
    "v = [1000][0]\nprint(v)\nfinal(v)",
    "v = eval('999 + 1')\nprint(v)\nfinal(v)",
    "exec('v = 999 + 1')\nprint(v)\nfinal(v)",
    "v = 10 ** 3\nprint(v)\nanswer = v\nfinal_var('answer')",
    "v = round(999.6)\nprint(v)\nfinal(v)",
]



@pytest.mark.parametrize("code", SPELLINGS + INVENTED)
def test_a_typed_figure_is_unverified_however_it_is_spelled(_isolated_home, tmp_path, code):
    end, _, _ = _run(_isolated_home, tmp_path, "native", [("cell", code)],
                     "How many flights did the busiest plane fly?")
    assert end.verified is False and "1000" in end.unverified_claims, (code, end)


@pytest.mark.parametrize("code", SPELLINGS)
def test_the_same_answer_with_the_figure_printed_is_verified(_isolated_home, tmp_path, code):
    end, _, _ = _run(_isolated_home, tmp_path, "native",
                     [("cell", READ + "print(data[0], int(data[1]) + 425)"), ("cell", code)],
                     "How many flights did the busiest plane fly?")
    assert end.verified is True, (code, end)


def test_a_figure_the_code_computes_stays_verified_and_a_carried_constant_does_not():
    """`final(f"{g(2)}|{K}")` with `K = 3`: g(2) is computed; K is a constant the code only
    carries into the answer, so 3 is typed: unverified unless an output shows it
    (docs/architecture.md, "Verified")."""
    from rlm.agent.policy.verify import typed_literals

    figures, _ = typed_literals(["K = 3\ndef g(x):\n    return x * 10\nfinal(f'{g(2)}|{K}')"])
    assert 3.0 in figures and 20.0 not in figures and 10.0 not in figures and 2.0 not in figures
    figures, _ = typed_literals(["rows = [4, 5, 6]\nfinal(len(rows))"])
    assert figures == []  # the count is computed from the literals, not carried
    figures, _ = typed_literals(["x = df.head(10)\nfinal(x['a'].sum() * 3)"])
    assert figures == []


@pytest.mark.parametrize("code", INVENTED[:8])
def test_an_invented_figure_beside_the_data_is_unverified(_isolated_home, tmp_path, code):
    """The same cells after a cell that read the data, and inside a cell that reads it:
    reading the data elsewhere does not make a literal computation a finding."""
    for steps in ([("cell", READ + "print(data[0])"), ("cell", code)], [("cell", READ + code)]):
        end, _, _ = _run(_isolated_home, tmp_path, "native", steps,
                         "How many flights did the busiest plane fly?")
        assert end.verified is False and "1000" in end.unverified_claims, (steps, end)
        assert "literals" in end.why


COMPUTED = [
    "print(int(data[1]) + 425)\nfinal(int(data[1]) + 425)",
    "n = int(data[1])\nn += 425\nprint(n)\nfinal_var('n')",
    "def total():\n    return int(data[1]) + 425\nprint(total())\nfinal(total())",
    "rows = [int(data[1]), 425]\nprint(sum(rows))\nfinal(f'{sum(rows)} flights')",
    "import pandas as pd\ndf = pd.read_csv('flights.txt', sep=' ', header=None)\n"
    "v = int(df[1][0]) + 425\nprint(v)\nfinal(v)",
]


@pytest.mark.parametrize("code", COMPUTED)
def test_a_figure_computed_from_the_data_is_verified(_isolated_home, tmp_path, code):
    steps = [("cell", code if "read_csv" in code else READ + code)]
    end, _, _ = _run(_isolated_home, tmp_path, "native", steps,
                     "How many flights did the busiest plane fly?")
    assert end.verified is True, (code, end)


# Issue 58 item 3, the claimless answers: "Badge not found", typed from a log the model
# copied into its cell, was verified (no figure or name, so no claim to check: needle seeds
# 7 and 8). An answer is never verified for saying nothing checkable: its own words are its
# claims, and only what code that read the data printed shows them.
CLAIMLESS = [
    ("cell", "log = 'nothing here'\nprint('Badge not found' if 'badge' in log else 'not found')"),
    ("cell", "hits = []\nprint('None' if not hits else hits)"),
    ("cell", "print('no')"),
    ("cell", "ok = True\nprint('ok')"),
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("answer,cell", [("not found", CLAIMLESS[0]), ("None", CLAIMLESS[1]),
                                         ("No.", CLAIMLESS[2]), ("ok", CLAIMLESS[3]),
                                         ("", ("cell", READ + "print(data[0])"))])
def test_a_claimless_answer_from_no_data_is_unverified(_isolated_home, tmp_path, kind, answer,
                                                        cell):
    steps = [cell, ("answer", answer)] if kind == "native" or answer else [cell]
    end, result, _ = _run(_isolated_home, tmp_path, kind, steps,
                          "Which badge did plane N725MQ get?", max_turns=2)
    if end.final is None:  # a fenced model's empty FINAL() is no answer at all
        return
    assert end.verified is False, (answer, end)
    assert result.status == "unverified" and result.exit_code == 5


@pytest.mark.parametrize("answer,code", [
    ("not found", READ + "print('not found' if 'K-2182' not in data else 'there')"),
    ("Yes", READ + "print('EV' in data)"),
    ("No", READ + "print('AA' in data)"),
])
def test_a_claimless_answer_the_data_shows_is_verified(_isolated_home, tmp_path, answer, code):
    end, _, _ = _run(_isolated_home, tmp_path, "native", [("cell", code), ("answer", answer)],
                     "Does the log hold badge K-2182 / carrier EV / carrier AA?")
    assert end.verified is True, (answer, end)


def test_rlm_run_a_typed_not_found_exits_5(tmp_path, _isolated_home):
    """The needle case through the entry point: the log typed into the cell, "Badge not
    found" answered; `--json` said verified, exit 0."""
    import os
    import subprocess
    import sys

    path = tmp_path / "s.json"
    (tmp_path / "audit.log").write_text("2025-01-01 Amara Costa got the badge K-2182\n")
    path.write_text(json.dumps(_script("native", [
        ("cell", "audit = '2025-01-01 INFO the batch job finished'\n"
                 "print('Badge not found' if 'Amara' not in audit else 'found')"),
        ("answer", "Badge not found")])))
    proc = subprocess.run([sys.executable, "-m", "rlm", "run",
                           "In the audit log, what badge did Amara Costa get?",
                           "--model", f"script:{path}", "--json"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=240,
                          env={**os.environ, "RLM_HOME": str(_isolated_home)})
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 5, proc.stderr[-2000:]
    assert res["verified"] is False and res["unverified_claims"] == ["not", "found"]
