"""A text of records whose fields the task quotes (rlm.agent.policy.records, rule
RecordFields): the cell that reads it into a table is shown before the first turn, only
once it ran on a fork with every field found. Unit cases for the reading; a scripted
fenced-code model, a real kernel and the agent built by the composition root for the
note; assertions on what reached the model."""

from __future__ import annotations

import pytest

from rlm.agent.policy.records import program
from tests.fenced import cell, run_fenced

TEXT = "- contracts: str, 9,000 chars\n  preview: 'AGREEMENT 1'"


@pytest.mark.parametrize("task, sep, fields", [
    ("contracts.txt holds agreements separated by lines of '---'. Each has a 'Contract ID:' "
     "line and a 'Term: N months' line.", "---",
     [("contract_id", r"Contract\ ID:\s*(\S.*)", False), ("term", r"Term:\s*(\d+)\s+months", True)]),
    ('Tickets are separated by "***"; each has "Priority: ..." and "Owner:".', "***",
     [("priority", r"Priority:\s*(.+?)", False), ("owner", r"Owner:\s*(\S.*)", False)]),
])
def test_the_records_are_read_from_the_tasks_quotes(task, sep, fields):
    p = program(task, [TEXT])
    assert p is not None and p.separator == sep
    assert [(f.name, f.pattern, f.number) for f in p.fields] == fields


@pytest.mark.parametrize("task, desc", [
    ("Each has a 'Contract ID:' line.", TEXT),  # no separator: no records
    ("Records are separated by '---'.", TEXT),  # no field
    ("Separated by '---'; each has 'Term: N months'.",  # a table, not a text
     "- contracts: pandas.DataFrame, 3 rows x 2 columns"),
])
def test_no_records_without_a_separator_a_field_or_a_text(task, desc):
    assert program(task, [desc]) is None


def _contracts(tmp_path):
    parts = []
    for i, months in enumerate([6, 36, 12, 48, 30]):
        body = ["Payment is due within thirty days.", f"Contract ID: C-{100 + i}",
                "Either party may terminate.", f"Term: {months} months from the effective date."]
        parts.append(f"AGREEMENT {i + 1}\n" + "\n".join(body[i % 2:] + body[:i % 2]))
    path = tmp_path / "contracts.txt"
    path.write_text("\n---\n".join(parts) + "\n")
    return path


TASK = ("contracts.txt holds 5 agreements separated by lines of '---'. Each has a 'Contract "
        "ID:' line and a 'Term: N months' line. Which contracts have a term longer than 24 "
        "months?")


def test_the_table_of_records_is_shown_before_the_first_turn(_isolated_home, tmp_path):
    path = _contracts(tmp_path)
    llm, end, _ = run_fenced(_isolated_home, path, TASK, ["FINAL(x)"])
    first = "\n".join(str(m["content"]) for m in llm.calls[0])
    assert "contracts is a text of records separated by lines of '---'" in first
    offered = first.split("a text of records", 1)[1].split("```python\n", 1)[1].split(
        "\n```", 1)[0]
    # the cell shown, sent, gives the table the question is a filter of
    llm, end, _ = run_fenced(_isolated_home, path, TASK, [
        cell(offered + "\nprint(contracts_table[contracts_table['term'] > 24]"
             "['contract_id'].tolist())"), "FINAL(C-101, C-103, C-104)"])
    out = str(llm.calls[1][-1]["content"])
    assert "5 records" in out and "['C-101', 'C-103', 'C-104']" in out


def test_no_table_when_a_quoted_field_is_not_in_the_records(_isolated_home, tmp_path):
    """The trial checks every field in at least half the records: 'Owner:' is in none,
    nothing is shown (the guard off, the cell would give a column of None)."""
    path = _contracts(tmp_path)
    task = TASK.replace("a 'Term: N months' line", "an 'Owner:' line")
    llm, end, _ = run_fenced(_isolated_home, path, task, ["FINAL(x)"])
    first = "\n".join(str(m["content"]) for m in llm.calls[0])
    assert "text of records" not in first


def test_the_records_and_the_steps_are_both_shown_before_the_first_turn(_isolated_home,
                                                                         tmp_path):
    task = ("contracts.txt holds agreements separated by lines of '---'. Each has a 'Contract "
            "ID:' line and a 'Term: N months' line. First find the contracts longer than 24 "
            "months, then count them.")
    llm, end, _ = run_fenced(_isolated_home, _contracts(tmp_path), task, ["FINAL(x)"])
    first = "\n".join(str(m["content"]) for m in llm.calls[0])
    assert "a text of records" in first and "This task has 2 steps" in first


def test_an_answer_before_any_cell_is_shown_the_records_cell_again(_isolated_home, tmp_path):
    """The long-run contracts run of stop 71: shown the cell, the model answered at once;
    the nudge to look at the data offered a search of the text, not the cell."""
    llm, end, _ = run_fenced(_isolated_home, _contracts(tmp_path), TASK, ["FINAL(3)", "FINAL(3)"])
    nudge = str(llm.calls[1][-1]["content"])
    assert "You have not looked at the data yet" in nudge
    assert "contracts_table = pd.DataFrame(rows)" in nudge
