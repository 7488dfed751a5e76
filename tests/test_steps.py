"""A task given in steps, done one step a cell (rlm.agent.policy.steps, rule Steps): the
steps read from the task's words, the plan before the first turn, the next step after
each cell that printed, an answer with steps left refused once. Scripted fenced-code model
like the local one, a real kernel, the agent built by the composition root; the
assertions are on what reached the model."""

from __future__ import annotations

import pytest

from rlm.agent.policy.steps import steps_of
from tests.fenced import cell, run_fenced, run_on_input

FLIGHTS = ("Explore flights.csv step by step. First compute the average departure delay "
           "(dep_delay) for each origin airport in each month. Then, for each origin airport, "
           "find the month with the worst average departure delay. Finally write one line per "
           "origin airport to report.md, like 'EWR: month 7'.")


@pytest.mark.parametrize("task, steps", [
    (FLIGHTS, ["Compute the average departure delay (dep_delay) for each origin airport in "
               "each month",
               "For each origin airport, find the month with the worst average departure "
               "delay, then write one line per origin airport to report.md, like 'EWR: month "
               "7'"]),
    ("sales.csv holds orders. Compute the total amount per region, then the product with the "
     "highest total amount in each region. Write region_summary.csv with the columns "
     "region,total,top_product (one row per region).",
     ["Compute the total amount per region",
      "Compute the product with the highest total amount in each region, then write "
      "region_summary.csv with the columns region,total,top_product (one row per region)"]),
    ("Work step by step. 1) Find the region with the most rows. 2) In that region, find the "
     "product with the lowest mean nps. Write out.md with two lines: 'region: ...', "
     "'product: ...'.",
     ["Find the region with the most rows",
      "In that region, find the product with the lowest mean nps, then write out.md with two "
      "lines: 'region: ...', 'product: ...'"]),
    ("Merge a.csv and b.csv on id; drop the rows without a price. Which city has the most "
     "orders?",
     ["Merge a.csv and b.csv on id", "Drop the rows without a price",
      "Which city has the most orders?"]),
    ("First count the rows per city, then sort them by count. Save the counts to c.csv and "
     "plot them.",
     ["Count the rows per city",
      "Sort them by count, then save the counts to c.csv and plot them"]),
])
def test_the_steps_are_read_from_the_tasks_words(task, steps):
    assert steps_of(task) == steps


@pytest.mark.parametrize("task", [
    "How many penguins are in penguins.csv?",
    # one instruction and the file it is written to: one step, as the model writes it
    "A student passes when the mean of their scores is at least 60. Compute each class's "
    "pass rate (the share of its students who pass, rounded to 2 decimals) and write "
    "pass_rate.csv with the columns class,pass_rate.",
    "Which region had the highest total sales in 2020, and by how much?",
    "Write the ids of the contracts whose term is longer than 24 months to long.txt, one per "
    "line.",
    "For each item, sort by week and find the items whose stock fell three weeks in a row.",
    "Compute the mean (rounded, then sorted) price.",  # "then" inside brackets
    "sales.csv holds orders. It has a region column.",
    "",
])
def test_a_question_or_one_instruction_is_no_plan(task):
    assert steps_of(task) == []


@pytest.fixture
def flights(tmp_path):
    path = tmp_path / "flights.csv"
    worst = {"EWR": 2, "JFK": 3}
    rows = [f"{o},{m},{40 if m == worst[o] else 5 + m}" for o in worst for m in (1, 2, 3)]
    path.write_text("origin,month,dep_delay\n" + "\n".join(rows) + "\n")
    return path


STEP1 = "avg = flights.groupby(['origin', 'month'])['dep_delay'].mean().reset_index()\nprint(avg)"
STEP2 = "w = avg.loc[avg.groupby('origin')['dep_delay'].idxmax()]\nprint(w)"
STEP3 = ("with open('report.md', 'w') as f:\n    for o, m in zip(w['origin'], w['month']):\n"
         "        f.write(f'{o}: month {m}\\n')")


SHOW = "print(open('report.md').read())"


def _run(home, path, task, replies):
    """What the model read before each call (the first: the prompt and the plan)."""
    llm, end, _ = run_fenced(home, path, task, replies)
    return end, [str(call[-1]["content"]) for call in llm.calls]


def test_the_plan_then_each_next_step_reach_the_model(_isolated_home, flights, monkeypatch):
    monkeypatch.chdir(flights.parent)
    end, seen = _run(_isolated_home, flights, FLIGHTS, [
        cell(STEP1), cell(STEP2), cell(STEP3), cell(SHOW), "FINAL(EWR: month 2, JFK: month 3)"])
    assert "This task has 2 steps" in seen[0] and "\n1. Compute the average" in seen[0] \
        and "\n2. For each origin airport" in seen[0] and "Start with step 1" in seen[0]
    step2 = ("Next, step 2 of 2: For each origin airport, find the month with the worst "
             "average departure delay, then write one line per origin airport to report.md")
    assert step2 in seen[1] and "`with open('report.md', 'w') as f:`" in seen[1]
    assert step2 in seen[2]  # the rows printed, the file not written: still step 2
    assert not any("Next, step" in s for s in seen[3:])
    assert (flights.parent / "report.md").read_text() == "EWR: month 2\nJFK: month 3\n"
    assert end.final == "EWR: month 2, JFK: month 3"  # every step done: no refusal
    assert len(seen) == 5


def test_an_answer_with_steps_left_is_refused_once(_isolated_home, flights, monkeypatch):
    monkeypatch.chdir(flights.parent)
    end, seen = _run(_isolated_home, flights, FLIGHTS, [
        cell(STEP1), "FINAL(EWR: month 2)", cell(STEP2), "FINAL(EWR: month 2, JFK: month 3)"])
    refusal = seen[2]  # the answer after step 1: refused, the step left named
    assert refusal.startswith("Not finished yet: the task's step 2 is left: 2. For each "
                              "origin airport")
    # once per run: the next answer is taken, the file still not written
    assert end.final == "EWR: month 2, JFK: month 3" and len(seen) == 4


def test_a_file_the_last_step_names_written_is_every_step_done(_isolated_home, flights,
                                                               monkeypatch):
    """The model did the steps in one cell that printed and wrote the file: answered, not
    refused (the file is what the steps were for)."""
    monkeypatch.chdir(flights.parent)
    end, seen = _run(_isolated_home, flights, FLIGHTS, [
        cell(STEP1 + "\n" + STEP2 + "\n" + STEP3), "FINAL(EWR: month 2, JFK: month 3)"])
    assert end.final == "EWR: month 2, JFK: month 3" and len(seen) == 2


def test_a_question_alone_gets_no_plan_and_no_step_notes(_isolated_home, flights):
    end, seen = run_on_input(_isolated_home, flights, "Which origin has the worst delay?", [
        cell(STEP1), "FINAL(EWR)"])
    assert "step" not in seen[0].lower()
    assert end.final == "EWR"


def test_a_question_asked_last_is_done_by_the_answer(_isolated_home, flights):
    task = ("First compute the mean dep_delay of each origin, then the mean over all flights. "
            "Which origin's mean is closest to that overall mean?")
    end, seen = _run(_isolated_home, flights, task, [
        cell("m = flights.groupby('origin')['dep_delay'].mean()\nprint(m)"),
        cell("print(flights['dep_delay'].mean())"), "FINAL(EWR)"])
    assert "Next, step 2 of 3: Compute the mean over all flights" in seen[1]
    assert "Next, step 3 of 3: Which origin's mean is closest to that overall mean? Answer it " \
        "with FINAL(answer)" in seen[2]
    assert end.final == "EWR" and len(seen) == 3  # not refused: the answer is step 3


SURVEY = ("Work step by step. 1) Find the region with the most rows. 2) In that region, find "
          "the product with the lowest mean nps.")


@pytest.fixture
def survey(tmp_path):
    path = tmp_path / "survey.csv"
    rows = [("east", "plus", 3), ("east", "basic", 8), ("east", "plus", 4), ("west", "basic", 9),
            ("east", "basic", 7)]
    path.write_text("region,product,nps\n" + "".join(f"{r},{p},{n}\n" for r, p, n in rows))
    return path


@pytest.mark.parametrize("again", [
    "region = counts.idxmax()\nprint(region)",          # step 1's result printed again
    "print(counts.head(1))",                             # the same figures, another cell
    "print('Now on to the product with the lowest nps.')",  # a sentence, not from the data
])
def test_a_cell_that_shows_no_new_result_does_not_do_the_next_step(_isolated_home, survey,
                                                                    monkeypatch, again):
    """Step 1's region printed again (or a sentence of the model's own) is not step 2
    done: the model is told step 2 is still to do; the product computed then counts."""
    monkeypatch.chdir(survey.parent)
    step2 = ("m = survey[survey['region'] == 'east'].groupby('product')['nps'].mean()\n"
             "print(m.idxmin())")
    end, seen = _run(_isolated_home, survey, SURVEY, [
        cell("counts = survey['region'].value_counts()\nprint(counts.head(1))"), cell(again),
        "FINAL(east)", cell(step2), "FINAL(region: east, product: plus)"])
    assert "Next, step 2 of 2: In that region" in seen[1]
    assert "step 2 of 2 is still to do: In that region" in seen[2]
    assert seen[3].startswith("Not ")  # the answer after it: refused (by the first rule)
    assert "step" not in seen[4]  # the product printed: every step done
    assert end.final == "region: east, product: plus"


def test_a_new_result_from_the_data_does_the_step(_isolated_home, survey, monkeypatch):
    """Guard switched off by the data: a cell printing a value no output held yet (the
    product) moves on, though it repeats the region among its figures."""
    monkeypatch.chdir(survey.parent)
    end, seen = _run(_isolated_home, survey, SURVEY, [
        cell("counts = survey['region'].value_counts()\nprint(counts.head(1))"),
        cell("r = counts.idxmax()\nm = survey[survey['region'] == r].groupby('product')"
             "['nps'].mean()\nprint(r, m.idxmin())"),
        "FINAL(region: east, product: plus)"])
    assert "still to do" not in seen[2]
    assert end.final == "region: east, product: plus" and len(seen) == 3
