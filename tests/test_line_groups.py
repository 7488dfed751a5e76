"""A text's lines of one value counted per the word at another position (rlm.agent.policy.
line_groups, rule LineGroups): read from the task's words and the input's line fields,
shown before the first turn once it ran on a fork. A scripted fenced-code model, a real
kernel, the agent built by the composition root; assertions on what reached the model."""

from __future__ import annotations

import pytest

from rlm.agent.policy.line_groups import program
from tests.fenced import cell, run_fenced

DESC = ("- app: str, 9,000 chars\n  preview: '2024'\n  words that take few values, by position "
        "in each line:\n  split()[1] (line word): 3 values: '[INFO]', '[WARN]', '[ERROR]'\n"
        "  split()[2] (line word): 3 values: 'upload:', 'billing:', 'auth:'\n")


@pytest.mark.parametrize("task, want", [
    ("Count the ERROR lines per service, then write e.txt with lines like 'billing: 42'.",
     (1, "[ERROR]", 2)),
    ("How many warn lines does each service have?", (1, "[WARN]", 2)),
    ("Number of lines of billing by level", (2, "billing:", 1)),
])
def test_the_count_is_read_from_the_task_and_the_line_fields(task, want):
    p = program(task, [DESC])
    assert p is not None and (p.at, p.value, p.by) == want


@pytest.mark.parametrize("task", [
    "Count the lines per service.",  # no value named
    "Which ERROR line is the longest?",  # no count per anything
    "Count the ERROR lines of billing per hour.",  # a value of each position: ambiguous
])
def test_no_count_where_the_task_does_not_say_one(task):
    assert program(task, [DESC]) is None


def _log(tmp_path):
    levels = ["[INFO]", "[ERROR]", "[WARN]", "[ERROR]", "[ERROR]", "[INFO]"]
    services = ["auth:", "billing:", "upload:", "billing:", "auth:", "billing:"]
    lines = [f"2024-05-01T00:0{i}:00 {lv} {sv} request {i} handled"
             for i, (lv, sv) in enumerate(zip(levels * 5, services * 5, strict=True))]
    path = tmp_path / "app.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_counting_cell_is_shown_before_the_first_turn(_isolated_home, tmp_path):
    task = "app.log is a server log. Count the ERROR lines per service."
    llm, end, _ = run_fenced(_isolated_home, _log(tmp_path), task, ["FINAL(x)"])
    first = "\n".join(str(m["content"]) for m in llm.calls[0])
    assert "the lines holding '[ERROR]' at word 1 counted per the word at position 2" in first
    offered = first.split("counted per the word", 1)[1].split("```python\n", 1)[1].split(
        "\n```", 1)[0]
    llm, end, _ = run_fenced(_isolated_home, _log(tmp_path), task, [cell(offered), "FINAL(x)"])
    out = str(llm.calls[1][-1]["content"])
    assert "billing: 10\nauth: 5\n" in out and "upload" not in out
