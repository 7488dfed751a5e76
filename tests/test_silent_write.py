"""A silent cell that wrote the file the question asks for: its output is the file, so
an answer after it is not refused as "your last cell printed nothing" (rule NoCodeNudge,
rlm.agent.policy.rules._wrote_asked); a silent cell that wrote anything else still is.
Scripted fenced-code model like the local one, a real kernel, through the root."""

from __future__ import annotations

import pytest

from rlm.agent.nudge import NUDGE_EMPTY
from tests.fenced import cell, run_fenced


@pytest.fixture
def flights(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "flights.csv"
    path.write_text("origin,dep_delay\nEWR,10\nJFK,30\nEWR,20\n")
    return path


WRITE = ("m = flights.groupby('origin')['dep_delay'].mean()\n"
         "with open('{name}', 'w') as f:\n"
         "    for o, v in m.items():\n"
         "        f.write(f'{{o}}: {{v}}\\n')")


def test_an_answer_after_writing_the_asked_file_is_not_sent_back_to_print(_isolated_home,
                                                                         flights):
    """The long-run staff task: the first cell wrote a right salaries.md and printed
    nothing; told it printed nothing, the model ran it again until the run stopped."""
    llm, end, _ = run_fenced(_isolated_home, flights,
                             "Write means.md with the mean dep_delay of each origin.",
                             [cell(WRITE.format(name="means.md")), "FINAL(means.md written)"])
    sent = [str(c[-1]["content"]) for c in llm.calls]
    assert not any(s.startswith(NUDGE_EMPTY[:40]) for s in sent)
    assert (flights.parent / "means.md").read_text() == "EWR: 15.0\nJFK: 30.0\n"
    assert end.final == "means.md written" and len(llm.calls) == 2


def test_a_silent_cell_that_wrote_another_file_is_still_sent_back(_isolated_home, flights):
    llm, end, _ = run_fenced(_isolated_home, flights,
                             "Write means.md with the mean dep_delay of each origin.",
                             [cell(WRITE.format(name="scratch.txt")), "FINAL(means.md written)",
                              cell("print(open('scratch.txt').read())"), "FINAL(EWR: 15.0)"])
    assert str(llm.calls[2][-1]["content"]).startswith(NUDGE_EMPTY[:40])
