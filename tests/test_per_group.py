"""A step of the shape "the X with the highest Y in each Z" (rlm.agent.policy.per_group):
read from the step's words against the input's columns, offered by the rule that shows
the step (Steps) only after it ran on a fork. Unit cases for the reading; a scripted
fenced-code model, a real kernel and the agent built by the composition root for the
offer; assertions on what reached the model and what is on disk."""

from __future__ import annotations

import pandas as pd
import pytest

from rlm.agent.policy.decisions import Facts
from rlm.agent.policy.per_group import program
from rlm.agent.policy.steps import _program
from tests.fenced import cell, run_fenced

SALES = """- sales: pandas.DataFrame, 12 rows x 4 columns
  columns (dtype: values):
  order_id (int64): 1 .. 12
  region (str): 2 values: 'East', 'West'
  product (str): 3 values: 'a', 'b', 'c'
  amount (float64): 1.0 .. 90.0
"""
FLIGHTS = """- flights: pandas.DataFrame, 40 rows x 3 columns
  columns (dtype: values):
  month (int64): 1 .. 12; 12 values: 1, 2, 3
  origin (str): 3 values: 'EWR', 'JFK', 'LGA'
  dep_delay (float64): -10.0 .. 300.0
"""

STORES = """- shops: pandas.DataFrame, 9 rows x 5 columns
  columns (dtype: values):
  store (str): 3 values: 'A', 'B', 'C'
  city (str): 2 values: 'X', 'Y'
  revenue (float64): 1.0 .. 9.0
  score (int64): 1 .. 5
  delay (float64): 0.0 .. 3.0
"""


@pytest.mark.parametrize("step, desc, want", [
    ("Compute the product with the highest total amount in each region, then write s.csv",
     SALES, ("product", "region", "amount", "sum", "max")),
    ("For each origin airport, find the month with the worst average departure delay",
     FLIGHTS, ("month", "origin", "dep_delay", "mean", "max")),  # a delay's worst: largest
    ("Find the store with the best total revenue in each city",
     STORES, ("store", "city", "revenue", "sum", "max")),
    ("Find the store with the worst mean score in each city",
     STORES, ("store", "city", "score", "mean", "min")),
    ("Find the store with the best average delay in each city",
     STORES, ("store", "city", "delay", "mean", "min")),
    ("List the products with the fewest orders per region", SALES,
     ("product", "region", None, "size", "min")),
    ("Which region has the lowest median amount for every product?", SALES,
     ("region", "product", "amount", "median", "min")),
    ("Find the month with the highest dep_delay within each origin", FLIGHTS,
     ("month", "origin", "dep_delay", "", "max")),
])
def test_the_shape_is_read_in_the_inputs_columns(step, desc, want):
    p = program(step, [desc])
    assert p is not None
    assert (p.label.name, p.by.name, p.value.name if p.value else None, p.agg, p.extreme) == want


@pytest.mark.parametrize("step, desc", [
    ("In that region, find the product with the lowest mean amount", SALES),  # no group
    ("Find the product with the highest total amount", SALES),
    ("Find the city with the highest total amount in each region", SALES),  # no city column
    ("Find the product with the highest total amount in each country", SALES),
    ("Find the region with the highest total amount in each region", SALES),  # X is Z
    ("Find the product with the highest in each region", SALES),  # no value, not "most"
    ("Find the product with the highest total amount in each region", FLIGHTS),
])
def test_no_program_where_the_words_do_not_name_the_columns(step, desc):
    assert program(step, [desc]) is None


def test_the_program_is_offered_only_when_it_ran():
    facts = Facts(steps=["Count rows", "Compute the product with the highest total amount in "
                         "each region"], described=lambda: [SALES])
    assert _program(facts, 1) == ""  # the default offer: no fork, nothing ran
    facts = Facts(steps=facts.steps, described=lambda: [SALES], offer=lambda rewrites: object())
    got = _program(facts, 1)
    assert "Send this cell for it first" in got and "groupby(['region', 'product'])" in got
    assert _program(facts, 1) == ""  # once per step


@pytest.fixture
def sales(tmp_path):
    rows = [(i, r, p, a) for i, (r, p, a) in enumerate(
        [("East", "a", 10), ("East", "b", 30), ("East", "a", 25), ("East", "c", 5),
         ("West", "a", 8), ("West", "c", 40), ("West", "b", 12), ("West", "c", 1)], 1)]
    path = tmp_path / "sales.csv"
    pd.DataFrame(rows, columns=["order_id", "region", "product", "amount"]).to_csv(
        path, index=False)
    return path


TASK = ("sales.csv holds orders. Compute the total amount per region, then the product with "
        "the highest total amount in each region. Write summary.csv with the columns "
        "region,total,top_product (one row per region).")


def test_the_step_is_shown_with_a_program_that_ran(_isolated_home, sales, monkeypatch):
    """The long-run sales task: after step 1, step 2 comes with the program that groups by
    region and product and keeps each region's top row, tried on a fork; sent, it prints
    each region's top product (East a: 35, West c: 41)."""
    monkeypatch.chdir(sales.parent)
    step1 = "t = sales.groupby('region')['amount'].sum()\nprint(t)"
    llm, end, _ = run_fenced(_isolated_home, sales, TASK, [cell(step1), "FINAL(x)"])
    seen = [str(c[-1]["content"]) for c in llm.calls]
    assert "Send this cell" not in seen[0]  # step 1 has no such shape
    assert "Next, step 2 of 2: Compute the product with the highest total amount in each " \
        "region, then write summary.csv" in seen[1]
    assert "Then write summary.csv from the rows it prints" in seen[1]
    offered = seen[1].split("Send this cell for it first", 1)[1].split("```python\n", 1)[1] \
        .split("\n```", 1)[0]
    assert "groupby(['region', 'product'])['amount'].sum()" in offered
    # the program the model was shown runs and says the truth
    llm, end, session = run_fenced(_isolated_home, sales, TASK, [cell(step1), cell(offered),
                                                                 "FINAL(x)"])
    out = str(llm.calls[2][-1]["content"])
    assert "East       a      35            70" in out and "West       c      41            61" in out
    assert not (sales.parent / "summary.csv").exists()  # the trial wrote nothing
