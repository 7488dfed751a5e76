"""A goal's table file against the tables the session computed (rlm.agent.policy.
agreement, asked by the goal's judge of a fork of the kernel): the same key and column
name with another value is not complete. `rlm run` with a scripted fenced-code model like
the local one, a real kernel, real files; assertions on what reached the model and the
goal's end."""

from __future__ import annotations

import json

import pytest

from rlm.agent.policy.agreement import read
from tests.test_stuck import block, entries, fenced, goal_states, rlm, user_texts

pytestmark = pytest.mark.timeout(240)

SALES = "region,product,amount\nEast,a,10\nEast,b,30\nEast,a,25\nWest,a,8\nWest,c,40\nWest,b,12\n"
TOTALS = ("import pandas as pd\nsales = pd.read_csv('sales.csv')\n"
          "totals = sales.groupby('region')['amount'].sum().reset_index()\n"
          "totals.columns = ['region', 'total']\nprint(totals)")
# the long-run sales run: the top product's amount written as the region's total
TOP = ("per = sales.groupby(['region', 'product'])['amount'].sum().reset_index()\n"
       "top = per.sort_values('amount').groupby('region').tail(1)\n"
       "top['total'] = top['amount']\ntop['top_product'] = top['product']\n"
       "top[['region', 'total', 'top_product']].to_csv('summary.csv', index=False)\nprint(top)")
RIGHT = ("out = totals.merge(top[['region', 'top_product']], on='region')\n"
         "out.to_csv('summary.csv', index=False)\nprint(out)")


def _run(tmp_path, replies):
    (tmp_path / "sales.csv").write_text(SALES)
    s = fenced(tmp_path / "s.json", replies)
    out = rlm("run", "Write summary.csv with the columns region,total,top_product.", "--model",
              s, "--goal", "summary.csv has each region's total and top product",
              "--autonomous", "--json", cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    return entries(res["session_path"])


def test_a_file_that_contradicts_a_computed_table_does_not_complete(tmp_path):
    es = _run(tmp_path, [block(TOTALS), block(TOP), "FINAL(summary.csv written.)",
                         "FINAL(summary.csv written.)", block(RIGHT),
                         "FINAL(East 65 a, West 60 c)", "FINAL(East 65 a, West 60 c)"])
    said = user_texts(es)
    refusal = next(t for t in said if "a table your cells computed" in t)
    assert refusal.startswith("Not complete: summary.csv's 'total' for East is 35, but "
                              "`totals`, a table your cells computed, holds 65 for East")
    completed = [g for g in goal_states(es) if g["status"] == "complete"]
    assert completed and "East 65" in completed[0]["last_reason"], said[-3:]


def test_a_file_that_agrees_is_not_asked_again(tmp_path):
    es = _run(tmp_path, [block(TOTALS), block(TOP), block(RIGHT), "FINAL(East 65 a, West 60 c)",
                         "FINAL(East 65 a, West 60 c)"])
    assert not any("a table your cells computed" in t for t in user_texts(es))
    assert [g for g in goal_states(es) if g["status"] == "complete"]


@pytest.mark.parametrize("printed", [
    None, "", "warning\nnot json", '[["t; rm", "k", "c", "x", 1.0, 2.0]]',  # not a name
    '[["t", "k", "c", "x", "1", 2.0]]', "[]",
])
def test_what_the_kernel_printed_is_read_as_data(printed):
    assert read(printed) is None


def test_a_table_an_earlier_version_of_the_file_was_written_from_is_not_asked(tmp_path):
    """The model's first summary.csv came from `top` (wrong); rewritten from `out`, `top`
    still contradicts it but is a superseded attempt: the goal completes."""
    es = _run(tmp_path, [block(TOTALS), block(TOP), block(RIGHT + "\ndel totals"),
                         "FINAL(East 65 a, West 60 c)", "FINAL(East 65 a, West 60 c)"])
    assert not any("a table your cells computed" in t for t in user_texts(es))
    assert [g for g in goal_states(es) if g["status"] == "complete"]


FLIGHTS = "origin,month,delay\nEWR,1,5\nEWR,2,40\nJFK,1,7\nJFK,3,41\n"
WORST = ("import pandas as pd\nf = pd.read_csv('flights.csv')\n"
         "top = f.sort_values('delay').groupby('origin').tail(1)\nprint(top)\n"
         "with open('report.md', 'w') as out:\n"
         "    for o, m in zip(top['origin'], top['month']):\n"
         "        out.write(f'{o}: month {m}\\n')")
ECHO = "FINAL(report.md names the worst month of each origin)"


def _flights(tmp_path, replies):
    (tmp_path / "flights.csv").write_text(FLIGHTS)
    s = fenced(tmp_path / "f.json", replies)
    out = rlm("run", "Write report.md.", "--model", s, "--goal",
              "report.md names the worst month of each origin", "--autonomous", "--json",
              cwd=tmp_path)
    return entries(json.loads(out.stdout.strip().splitlines()[-1])["session_path"])


def test_an_echo_after_the_file_was_shown_affirms_the_claim_before_it(tmp_path):
    """The long-run flights run of stop 71: a right report.md, the finish "LGA: month 3,
    JFK: month 12, EWR: month 7", the file shown to check, then the objective's words:
    the earlier claim completes the goal, its words the goal's reason."""
    es = _flights(tmp_path, [block(WORST), "FINAL(EWR: month 2, JFK: month 3)", ECHO, ECHO])
    said = user_texts(es)
    assert any(t.startswith("Before the goal can be complete, check report.md") for t in said)
    completed = [g for g in goal_states(es) if g["status"] == "complete"]
    assert completed and completed[0]["last_reason"] == "EWR: month 2, JFK: month 3", said


def test_an_echo_after_the_file_changed_affirms_nothing(tmp_path):
    """Guard: the file rewritten after the claim (here, emptied) is not what was claimed:
    the echo is refused."""
    wipe = "open('report.md', 'w').write('EWR: month 9\\n')\nprint('rewritten')"
    es = _flights(tmp_path, [block(WORST), "FINAL(EWR: month 2, JFK: month 3)", block(wipe),
                             ECHO, ECHO, ECHO])
    assert not [g for g in goal_states(es) if g["status"] == "complete"
                and g["last_reason"] == "EWR: month 2, JFK: month 3"]
