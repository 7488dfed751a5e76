"""Why a `grep -q` gate failed (rlm.longrun.gate_why): a gate that prints nothing is read
against the file it greps, and the model is told which line nearly matched. Real gate
processes (rlm.longrun.gates.run_gate), real files."""

from __future__ import annotations

import os

import pytest

from rlm.longrun.gate_why import grep_misses
from rlm.longrun.gates import gate_message, run_gate

GATE = "grep -q '^store: S[0-9]*, quarter: Q[1-4]' best_store.txt"


def test_a_line_that_matches_once_case_is_ignored_is_named(tmp_path):
    """The long-run quarters run: the right store and quarter, 'q3' for 'Q3'."""
    (tmp_path / "best_store.txt").write_text("store: S07, quarter: q3\n")
    r = run_gate(GATE, tmp_path, 30)
    assert not r.passed
    assert "its line 'store: S07, quarter: q3' does once case is ignored" in gate_message(r)


@pytest.mark.parametrize("command, text, want", [
    (GATE, "S07 in Q3\n", "No line of best_store.txt matches `^store: S[0-9]*, quarter: "
                          "Q[1-4]` (its first lines: 'S07 in Q3')"),
    (GATE, "", "(its first lines: it is empty)"),
    # one part of a chain that fails: the other is said nothing about
    ("grep -q '^EWR' best_store.txt && grep -q '^JFK' best_store.txt", "EWR: 7\n",
     "No line of best_store.txt matches `^JFK`"),
    ("grep -qi '^store' best_store.txt", "x\n", "No line of best_store.txt matches `^store`"),
])
def test_what_is_missing_is_said(tmp_path, command, text, want):
    (tmp_path / "best_store.txt").write_text(text)
    got = grep_misses(command, tmp_path)
    assert want in got and got.count("\n") == 0


@pytest.mark.parametrize("command", [
    GATE.replace("Q[1-4]", "Q[1-4"),  # a pattern Python cannot compile
    "grep -c '^x' best_store.txt",  # not -q
    "head -1 best_store.txt | grep -q '^x'",  # reads its input, not a file
    "grep -qP '^x' best_store.txt",  # a flag not known here
    "grep -q '^x' missing.txt",
    "grep -q '^store' best_store.txt",  # it matches: nothing to say
])
def test_nothing_is_said_where_the_gate_is_not_read(tmp_path, command):
    (tmp_path / "best_store.txt").write_text("store: S07, quarter: q3\n")
    assert grep_misses(command, tmp_path) == ""


def test_a_link_the_kernel_planted_is_not_followed(tmp_path):
    secret = tmp_path.parent / f"{tmp_path.name}-secret.txt"
    secret.write_text("store: S01, quarter: q9 TOKEN\n")
    os.symlink(secret, tmp_path / "best_store.txt")
    assert grep_misses(GATE, tmp_path) == ""
