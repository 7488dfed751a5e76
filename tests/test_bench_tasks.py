"""The task suite's generators and scorers agree with each other and with an independent
computation of each answer (pandas / plain Python over the generated files), so a score in
bench/RESULTS.md means what it says."""

from __future__ import annotations

import io
import json
import re

import pandas as pd
import pytest

from bench.tasks.families import FAMILIES, make

SIZE = 100_000


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_generators_are_seeded_sized_and_scored(family):
    a, b, c = make(family, 1, SIZE), make(family, 1, SIZE), make(family, 2, SIZE)
    assert (a.question, a.files, a.answer) == (b.question, b.files, b.answer)
    assert a.files != c.files
    assert SIZE * 0.9 <= a.chars <= SIZE * 1.3
    assert a.score(a.answer) and a.score(f"The answer is {a.answer}.")
    assert not a.score("I could not find it") and not a.score("")


def _independent_answer(task) -> str:
    f = task.files
    if task.family == "needle":
        who = re.search(r"(?:to|did|that) ([A-Z][a-z]+ [A-Z][a-z]+)", task.question).group(1)
        (code,) = re.findall(rf"badge (\S+) issued to {who}\n", f["audit.log"])
        return code
    if task.family == "count":
        city = next(c for c in ("Lyon", "Porto", "Graz", "Tartu", "Ghent", "Malmo", "Turin",
                                "Split", "Cork", "Brno") if c in task.question)
        status = "returned" if "returned" in task.question else "cancelled"
        rows = [json.loads(line) for line in f["orders.jsonl"].splitlines()]
        return str(sum(r["city"] == city and r["status"] == status for r in rows))
    if task.family == "groupby":
        df = pd.read_csv(io.StringIO(f["sales.csv"]), parse_dates=["date"])
        df = df[df.date.dt.year == 2025]
        return str((df.units * df.unit_price).groupby(df.category).sum().idxmax())
    if task.family == "join":
        cust = pd.read_csv(io.StringIO(f["customers.csv"]))
        orders = pd.read_csv(io.StringIO(f["orders.csv"]))
        return str(orders.merge(cust, on="customer_id").groupby("city").amount.sum().idxmax())
    if task.family == "timeseries":
        station = next(s for s in ("north", "south", "east", "west") if s in task.question)
        df = pd.read_csv(io.StringIO(f["readings.csv"]), parse_dates=["timestamp"])
        df = df[df.station == station]
        return df.groupby(df.timestamp.dt.month_name()).temp_c.mean().idxmax()
    if task.family == "dedupe":
        names = pd.read_csv(io.StringIO(f["vendors.csv"])).vendor.str.strip().str.lower()
        names = names.str.replace(r"\s+(inc\.?|incorporated|ltd\.?|limited|gmbh)$", "", regex=True)
        return str(names.nunique())
    if task.family == "multistep":
        df = pd.read_csv(io.StringIO(f["orders.csv"]))
        med = df.groupby("region").value.median()
        return str((med - df.value.mean()).abs().idxmin())
    if task.family == "farapart":
        project = re.search(r"project (\w+)'s", task.question).group(1)
        log = f["project.log"]
        budget = int(re.search(rf"project {project}: initial budget approved at (\d+)", log).group(1))
        pct = int(re.search(rf"project {project}: the budget was raised by (\d+)%", log).group(1))
        return f"{budget * (100 + pct) / 100:.0f}"
    raise AssertionError(task.family)


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_true_answer_is_what_an_analyst_would_compute(family, seed):
    task = make(family, seed, SIZE)
    independent = _independent_answer(task)
    assert task.score(independent), (family, seed, task.answer, independent)


def test_near_misses_and_far_apart_facts_are_really_there():
    t = make("needle", 4, SIZE)
    assert t.files["audit.log"].count("AUDIT badge") == 4  # the needle and three near misses
    t = make("farapart", 4, SIZE)
    log = t.files["project.log"]
    first = log.index("initial budget approved")
    raised = log.index("the budget was raised")
    assert raised - first > SIZE * 0.8  # the two facts are far apart


# ---------------------------------------------------------------- the everyday suite
def test_everyday_questions_name_their_files_and_scorers_read_answers_as_written():
    from bench.tasks.everyday import QUESTIONS, numbers, score

    assert len(QUESTIONS) >= 30 and len({q.id for q in QUESTIONS}) == len(QUESTIONS)
    for q in QUESTIONS:  # a user names the file: `rlm run "... in penguins.csv"`
        assert all(f in q.question for f in q.files), q.id
    by = {q.id: q for q in QUESTIONS}
    assert numbers("929.5 million, 1,234 and -3.5") == [929.5e6, 1234.0, -3.5]
    assert score(by["gap-africa-pop"], 929539692, "About 929.5 million people")
    assert not score(by["gap-africa-pop"], 929539692, "6187585961")
    assert score(by["penguins-count"], 344, "344 penguins") and not score(by["penguins-count"], 344, "343")
    assert score(by["penguins-chinstrap-flipper"], 195.8, "195.82 mm")
    assert not score(by["penguins-chinstrap-flipper"], 195.8, "195.9")
    assert score(by["flights-worst-airline"], "Frontier Airlines Inc.", "Frontier Airlines (F9)")
    assert not score(by["flights-worst-airline"], "Frontier Airlines Inc.", "Frontier")
    assert score(by["seattle-wettest-month-2014"], 3, "March 2014") and score(
        by["seattle-wettest-month-2014"], 3, "month 3")
    assert not score(by["seattle-wettest-month-2014"], 3, "December")
    assert score(by["seattle-coldest-day"], "2013/12/07", "It was December 7, 2013.")
    assert score(by["seattle-coldest-day"], "2013/12/07", "2013-12-07")
    assert not score(by["seattle-coldest-day"], "2013/12/07", "2012-01-03")
    assert not score(by["penguins-count"], 344, None)
