"""A search of a text that found nothing is followed by the lines that hold the names the
question gives, read from the real kernel (rlm.agent.searched, kernel_ext.texts)."""

from __future__ import annotations

import pytest

from kernel_ext.texts import LINE_CHARS, where_text
from rlm.agent import searched
from rlm.agent.context_files import question_names
from tests.fenced import cell, run_on_input

NOISE = "\n".join(f"2025-01-{d % 28 + 1:02d} 0{d % 10}:00:00 INFO job {d} finished #{d * 7}"
                  for d in range(400))
LOG = (NOISE + "\n2025-03-04 10:00:00 NOTE project Halcyon: initial budget approved at "
       "4000000 EUR\n" + NOISE + "\n2025-07-01 09:30:00 NOTE budget of project halcyon raised "
       "by 14%\n" + NOISE + "\n2025-08-02 11:00:00 NOTE access badge Q-7781 issued to "
       "Tanaka, Ilse\n")


@pytest.fixture
def log(tmp_path):
    path = tmp_path / "project.log"
    path.write_text(LOG)
    return path


def test_a_guessed_pattern_that_found_nothing_is_shown_the_lines_that_hold_the_name(
        _isolated_home, log):
    _, seen = run_on_input(_isolated_home, log, "What is project Halcyon's budget now, in EUR?", [
        cell("import re\nm = re.search(r'Halcyon:\\s*(\\d+\\.\\d+) EUR', project)\n"
             "print(m.group(1))"),
        cell("i = project.find('Halcyon budget')\nprint(i)"),
        cell("print(project.count('Halcyon'))"),  # it found something: no note
        cell("lines = [l for l in project.splitlines() if 'Halcyon' in l]\nprint(lines[:1])"),
        "FINAL(done)"])
    first = seen[0]
    assert "AttributeError" in first and "Your search found nothing, but `project` holds " \
        "'Halcyon' (2 lines):" in first
    assert "NOTE project Halcyon: initial budget approved at 4000000 EUR" in first
    assert "NOTE budget of project halcyon raised by 14%" in first  # any case
    assert "Your search found nothing" in seen[1]  # printed -1
    assert "Your search found nothing" not in seen[2] and "Your search" not in seen[3]


def test_a_name_written_the_other_way_round_is_found_by_its_longest_word(_isolated_home, log):
    _, seen = run_on_input(_isolated_home, log, "In the log, what badge did Ilse Tanaka get?", [
        cell("hit = next(l for l in project.splitlines() if 'Ilse Tanaka' in l)\nprint(hit)"),
        "FINAL(done)"])
    assert "StopIteration" in seen[0]
    assert "holds 'Tanaka' (1 line):\n    2025-08-02 11:00:00 NOTE access badge Q-7781 issued " \
        "to Tanaka, Ilse" in seen[0]


def test_no_note_when_the_text_does_not_hold_the_name_or_the_cell_did_not_search(
        _isolated_home, log):
    _, seen = run_on_input(_isolated_home, log, "What did project Orchid cost?", [
        cell("import re\nprint(re.search('Orchid', project))"),  # None: the text lacks it
        "FINAL(done)"])
    assert "None" in seen[0] and "Your search" not in seen[0]
    _, seen = run_on_input(_isolated_home, log, "What is project Halcyon's budget?", [
        cell("x = None\nprint(x)"),  # no search: None is only a value
        "FINAL(done)"])
    assert "Your search" not in seen[0]


@pytest.mark.parametrize("question, want", [
    ("Which badge code was issued to Bruno Brandt?", ["Bruno Brandt", "Brandt"]),
    ("Find the access badge that Mei Lindqvist received. Reply with the code.",
     ["Mei Lindqvist", "Lindqvist"]),
    ("how many lines mention 'disk full' after Tuesday?", ["disk full", "Tuesday"]),
    ("What is the total of all orders?", []),
    ("Where did “Zephyr-9” ship from?", ["Zephyr-9"]),
])
def test_the_names_a_question_gives(question, want):
    assert question_names(question) == want


@pytest.mark.parametrize("code, ok, out, want", [
    ("m = re.match('x', t)\nprint(m.groups())", False,
     "AttributeError: 'NoneType' object has no attribute 'groups'", True),
    ("print(re.findall('x', t)[0])", False, "IndexError: list index out of range", True),
    ("print(t.find('x'))", True, "-1\n", True),
    ("print([l for l in t.splitlines() if 'x' in l])", True, "[]\n", True),
    ("print(df[df.c.str.contains('x')])", True, "No badge found for x\n", True),
    ("print(t.find('x'))", True, "1042\n", False),
    ("print(len(t))", True, "None\n", False),  # no search
    ("print(t[0:9])", False, "IndexError: string index out of range", False),
])
def test_what_counts_as_a_search_that_found_nothing(code, ok, out, want):
    assert searched.missed(code, ok, out) is want


def test_the_kernel_side_is_bounded_and_reads_only_texts():
    long_line = "x" * 1000 + " Halcyon " + "y" * 1000
    hits = where_text(["halcyon", "absent"], {"t": "pad\n" * 60 + long_line, "short": "Halcyon",
                                              "_hidden": "Halcyon " * 100, "n": 3})
    assert [(h["name"], h["term"], h["count"]) for h in hits] == [("t", "halcyon", 1)]
    assert len(hits[0]["lines"][0]) == LINE_CHARS


def test_an_answer_before_looking_is_asked_for_the_search_its_input_description_showed(
        _isolated_home, log):
    """Told only "you have not looked at the data", the 1.5B model typed the log into a
    literal, then answered an invented badge: the refusal carries the search as a cell."""
    _, seen = run_on_input(_isolated_home, log, "In the log, what badge did Ilse Tanaka get?", [
        "FINAL(Badge: K-4347)",
        cell("i = project.find('Tanaka')\nprint(project[max(0, i-300):i+300])"),
        "FINAL(Q-7781)"])
    assert "You have not looked at the data yet" in seen[0]
    assert "For this question:\n```python\ni = project.find('Tanaka')\n" \
        "print(project[max(0, i-300):i+300])\n```" in seen[0]
    assert "Q-7781" in seen[1]
