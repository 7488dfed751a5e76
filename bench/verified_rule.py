"""How often "verified" is wrong, before and after the every-claim rule (issue 25).

No session logs of earlier benchmark runs are kept on disk, so the cases are built from
the task suite (bench/tasks): each item is generated, the cells a model would run are
executed here on its real input files (pandas), and answers are written against those
real outputs, as the models of the suite answer: right ones (a bare value, prose citing
printed figures, `final(<computed>)`) and wrong or invented ones (a figure or a name no
output holds, a literal typed into `final("...")`, arithmetic done in the reply, the
wrong month of a table printed by number). Each case is labelled by hand with
`invented`: the answer asserts a claim that no output of the run shows and no cell
computed. Two error rates:

  invented but verified   verified among the invented cases (should be 0)
  shown but flagged       unverified among right answers whose every claim a cell showed

The old rule is the code at commit b261352 (rlm/agent/nudge.py, read with `git show`),
called as the loop called it: fenced-code models passed the outputs, native-tool models
and final()/final_var() did not (always verified after a successful last cell). The new
rule is rlm.agent.policy.verify.verify, called as AnswerPolicy.judge calls it.

    .venv/bin/python -m bench.verified_rule            # the table for bench/RESULTS.md
    .venv/bin/python -m bench.verified_rule --cases    # and each case with both verdicts
"""

from __future__ import annotations

import argparse
import contextlib
import io
import subprocess
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from bench.tasks.families import Task, make
from rlm.agent.nudge import error_text
from rlm.agent.policy.verify import Shown, verify

OLD_COMMIT = "b261352"
ROOT = Path(__file__).resolve().parents[1]
SIZE = 20_000


@dataclass
class Case:
    task: str
    answer: str
    source: str  # text | reply | final
    cells: list[str]  # code run in this run, in order (the last one calls final for "final")
    invented: bool  # the answer asserts a claim no output shows and no cell computed
    right: bool = False  # set from the task's scorer
    outputs: list[str] = field(default_factory=list)
    prompts: list[str] = field(default_factory=list)


def run_cells(task: Task, cells: list[str]) -> list[str]:
    """Run `cells` in one namespace holding the task's inputs (as rlm loads them: a CSV as
    a DataFrame, other files as text); the printed output of each."""
    ns: dict = {"pd": pd, "final": lambda v: ns.__setitem__("_final", v)}
    for name, text in task.files.items():
        stem = name.rsplit(".", 1)[0]
        ns[stem] = pd.read_csv(io.StringIO(text)) if name.endswith(".csv") else text
    outs = []
    for code in cells:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(code, ns)  # noqa: S102 - our own cells over generated data
        outs.append(buf.getvalue())
    return outs


def cases() -> list[Case]:
    out: list[Case] = []

    def add(task: Task, cells: list[str], answers: list[tuple[str, str, bool]],
            prompts: list[str] | None = None) -> None:
        outputs = run_cells(task, cells)
        for answer, source, invented in answers:
            out.append(Case(f"{task.family}/{task.seed}", answer, source, cells, invented,
                            bool(task.score(answer)), outputs,
                            [*(prompts or []), task.question]))

    for seed in (1, 2):
        t = make("needle", seed, SIZE)
        import re

        name = re.search(rf"badge {t.answer} issued to (\w+ \w+)", t.files["audit.log"]).group(1)
        grep = f"print([l for l in audit.splitlines() if {name!r} in l])"
        add(t, [grep], [
            (t.answer, "text", False),
            (f"The badge issued to {name} is {t.answer}.", "reply", False),
            (f"{t.answer}, issued on 2025-03-09", "reply", True),  # a date no line holds
            ("K-1000", "text", True),
        ])
        add(t, [grep, "import re\nm = re.search(r'badge (\\S+) issued to ' + " + repr(name)
                + ", audit)\nfinal(m.group(1))"], [(t.answer, "final", False)])
        add(t, [grep, f"final({t.answer!r})"], [(t.answer, "final", False)])  # typed, but shown

    for seed in (1, 2):
        t = make("count", seed, SIZE)
        words = t.question.replace("?", "").split()
        status = next(w for w in words if w in ("returned", "cancelled"))
        city = next(w for w in words if w[0].isupper() and w not in ("How", "Count", "What"))
        cell = ("import json\nrows = [json.loads(l) for l in orders.splitlines()]\n"
                f"print(sum(r['city'] == {city!r} and r['status'] == {status!r} for r in rows))")
        n = int(t.answer)
        add(t, [cell], [
            (t.answer, "text", False),
            (f"There were {n} {status} orders in {city}.", "reply", False),
            (f"{n} {status} orders, out of 2400 orders in total", "reply", True),
            (str(n + 7), "text", True),
        ])
        add(t, [cell.rsplit("\n", 1)[0] + "\nfinal(str(sum(r['city'] == " + repr(city)
                + " and r['status'] == " + repr(status) + " for r in rows)))"],
            [(t.answer, "final", False)])

    for seed in (1, 2):
        t = make("groupby", seed, SIZE)
        cell = ("sales['rev'] = sales.units * sales.unit_price\n"
                "r = sales[sales.date.str.startswith('2025')].groupby('category').rev.sum()\n"
                "print(r.sort_values(ascending=False).round(2))")
        table = run_cells(t, [cell])[0]
        top_rev = table.splitlines()[1].split()[-1]
        second = table.splitlines()[2].split()[0]
        add(t, [cell], [
            (t.answer, "text", False),
            (f"{t.answer}, with {top_rev} in revenue", "reply", False),
            (f"{t.answer}, with revenue of 99,999.50", "reply", True),
            (f"The {t.answer} category leads with {float(top_rev) * 1.1:.2f}", "reply", True),
        ])
        add(t, [cell, "final(r.idxmax())"], [(t.answer, "final", False)])
        add(t, [cell, f"final({second!r})"], [(second, "final", False)])  # wrong, but shown

    for seed in (1, 2):
        t = make("join", seed, SIZE)
        cell = ("m = orders.merge(customers, on='customer_id')\n"
                "print(m.groupby('city').amount.sum().sort_values().round(2))")
        table = run_cells(t, [cell])[0]
        top_total = table.strip().splitlines()[-2].split()[-1]
        add(t, [cell], [
            (t.answer, "text", False),
            (f"Customers from {t.answer} spent the most: {top_total} in total.", "reply", False),
            (f"{t.answer} ({top_total}), ahead of Oslo", "reply", True),  # a city not in the data
        ])
        add(t, [cell], [(t.answer, "text", False)], prompts=[
            f"Look at the customers of {t.answer} first."])  # an earlier prompt names it

    for seed in (1, 2):
        t = make("timeseries", seed, SIZE)
        station = next(s for s in ("north", "south", "east", "west") if s in t.question)
        by_number = (f"s = readings[readings.station == {station!r}].copy()\n"
                     "s['m'] = pd.to_datetime(s.timestamp).dt.month\n"
                     "print(s.groupby('m').temp_c.mean().round(2))")
        by_name = by_number.replace(".dt.month", ".dt.strftime('%B')")
        add(t, [by_number], [
            (t.answer, "text", True),  # the month's name: only its number was printed
            (f"{t.answer} ({t.answer[:3]} mean highest)", "reply", True),
        ])
        add(t, [by_name], [
            (t.answer, "text", False),
            (f"{t.answer} was the warmest month at the {station} station.", "reply", False),
            (f"{t.answer}, at 31.7 degrees on average", "reply", True),
        ])

    for seed in (1, 2):
        t = make("dedupe", seed, SIZE)
        cell = ("import re\nv = vendors.vendor.str.strip().str.lower()\n"
                "v = v.str.replace(r'\\b(inc|incorporated|ltd|limited|gmbh)\\.?$', '', regex=True)"
                ".str.strip()\nprint(v.nunique(), len(vendors))")
        add(t, [cell], [
            (t.answer, "text", False),
            (f"{t.answer} distinct vendors", "reply", False),
            (f"{t.answer} distinct vendors after merging 57 spelling variants", "reply", True),
        ])

    for seed in (1, 2):
        t = make("multistep", seed, SIZE)
        cell = ("med = orders.groupby('region').value.median()\nmean = orders.value.mean()\n"
                "print(med.round(2)); print(round(mean, 2))\n"
                "print((med - mean).abs().idxmin())")
        outs = run_cells(t, [cell])[0].split()
        mean = outs[-2]
        add(t, [cell], [
            (t.answer, "text", False),
            (f"{t.answer}: its median is closest to the overall mean of {mean}", "reply", False),
            (f"{t.answer}, median 142.07", "reply", True),
        ])

    for seed in (1, 2):
        t = make("farapart", seed, SIZE)
        project = next(p for p in ("Halcyon", "Juniper", "Meridian", "Basalt", "Kestrel", "Orchid")
                       if p in t.question)
        grep = f"print([l for l in project.splitlines() if {project!r} in l])"
        compute = ("import re\nls = [l for l in project.splitlines() if " + repr(project)
                   + " in l]\nb = int(re.search(r'at (\\d+) EUR', ls[0]).group(1))\n"
                   "p = int(re.search(r'by (\\d+)%', ls[1]).group(1))\nprint(b * (100 + p) / 100)")
        add(t, [grep], [
            (t.answer, "text", True),  # the arithmetic was done in the reply, not in a cell
        ])
        add(t, [grep, compute], [
            (t.answer, "text", False),
            (f"{t.answer} EUR", "reply", False),
        ])
    out.extend(prose())
    return out


def prose() -> list[Case]:
    """Answers as chatty native-tool models write them, on the outputs above: sentence
    openers, units, markdown, rounding."""
    out: list[Case] = []

    def add(task: Task, cells: list[str], answers: list[tuple[str, bool]]) -> None:
        outputs = run_cells(task, cells)
        for answer, invented in answers:
            out.append(Case(f"{task.family}/{task.seed}", answer, "reply", cells, invented,
                            bool(task.score(answer)), outputs, [task.question]))

    import re

    t = make("needle", 3, SIZE)
    name = re.search(rf"badge {t.answer} issued to (\w+ \w+)", t.files["audit.log"]).group(1)
    add(t, [f"print([l for l in audit.splitlines() if {name!r} in l])"], [
        (f"Looking at the audit log, {name} received badge **{t.answer}**.", False),
        (f"Answer: `{t.answer}` (issued 2025-03-04 at 11:12:13).", False),
        (f"{name} got {t.answer}; the near miss was {name.split()[0]} Brandt.", True),
    ])
    t = make("groupby", 3, SIZE)
    cell = ("sales['rev'] = sales.units * sales.unit_price\n"
            "r = sales[sales.date.str.startswith('2025')].groupby('category').rev.sum()\n"
            "print(r.sort_values(ascending=False).round(2))")
    top = float(run_cells(t, [cell])[0].splitlines()[1].split()[-1])
    add(t, [cell], [
        (f"In 2025 the top category was {t.answer}, bringing in about {top:,.0f}.", False),
        (f"**{t.answer}** leads with roughly {top / 1000:.1f}k of revenue.", False),
        (f"{t.answer} (${top:,.2f}), about 18% of the year's revenue.", True),
    ])
    t = make("farapart", 3, SIZE)
    project = next(p for p in ("Halcyon", "Juniper", "Meridian", "Basalt", "Kestrel", "Orchid")
                   if p in t.question)
    compute = ("import re\nls = [l for l in project.splitlines() if " + repr(project)
               + " in l]\nprint(ls)\nb = int(re.search(r'at (\\d+) EUR', ls[0]).group(1))\n"
               "p = int(re.search(r'by (\\d+)%', ls[1]).group(1))\nprint(b * (100 + p) / 100)")
    final = float(t.answer)
    add(t, [compute], [
        (f"Following the review, the budget now stands at {final:,.0f} EUR.", False),
        (f"The budget is {final / 1e6:g} million EUR after the raise.", False),
        (f"{final:,.0f} EUR, approved by the steering board in November.", True),
    ])
    t = make("dedupe", 3, SIZE)
    cell = ("v = vendors.vendor.str.strip().str.lower()\n"
            "v = v.str.replace(r'\\b(inc|incorporated|ltd|limited|gmbh)\\.?$', '', regex=True)"
            ".str.strip()\nprint(v.nunique())")
    add(t, [cell], [
        (f"After merging case, spacing and legal-form variants there are {t.answer} vendors.",
         False),
        (f"There are {t.answer} distinct vendors; Rossi Labs appears most often.", True),
    ])
    return out


def old_rule() -> types.ModuleType:
    src = subprocess.run(["git", "show", f"{OLD_COMMIT}:rlm/agent/nudge.py"], cwd=ROOT,
                         check=True, capture_output=True, text=True).stdout
    mod = types.ModuleType("old_nudge")
    exec(compile(src, f"{OLD_COMMIT}:rlm/agent/nudge.py", "exec"), mod.__dict__)  # noqa: S102
    return mod


def old_verified(old: types.ModuleType, c: Case, native: bool) -> bool:
    source = "final" if c.source == "final" else c.source
    why = old.unverified_why(source=source, cells_run=len(c.cells), last_cell_ok=True,
                             error_like=error_text(c.answer), answer=c.answer,
                             prompt=c.prompts[-1],
                             outputs=None if source == "final" or native else c.outputs)
    return why is None


def new_verified(c: Case) -> bool:
    shown = [Shown(f"e{i}", o) for i, o in enumerate(c.outputs)]
    v = verify(c.answer, source=c.source, shown=shown, codes=c.cells, prompts=c.prompts,
               cells_run=len(c.cells), last_cell_ok=True, error_like=error_text(c.answer),
               final_entry=f"e{len(c.cells) - 1}")
    return v.verified


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", action="store_true", help="print every case with both verdicts")
    args = ap.parse_args(argv)
    old = old_rule()
    all_cases = cases()
    rules = {"old, fenced-code model": lambda c: old_verified(old, c, native=False),
             "old, native-tool model": lambda c: old_verified(old, c, native=True),
             "new (both kinds)": new_verified}
    invented = [c for c in all_cases if c.invented]
    shown_right = [c for c in all_cases if not c.invented and c.right]
    print(f"{len(all_cases)} cases from {len({c.task for c in all_cases})} task items: "
          f"{len(invented)} invented, {len(shown_right)} right and shown, "
          f"{len(all_cases) - len(invented) - len(shown_right)} wrong but shown\n")
    print("| rule | invented but verified | right and shown, flagged unverified |")
    print("|---|---|---|")
    for name, rule in rules.items():
        bad = sum(rule(c) for c in invented)
        flagged = sum(not rule(c) for c in shown_right)
        print(f"| {name} | {bad}/{len(invented)} ({bad / len(invented):.0%}) | "
              f"{flagged}/{len(shown_right)} ({flagged / len(shown_right):.0%}) |")
    if args.cases:
        print("\n| task | answer | source | invented | right | old fenced | old native | new |")
        print("|---|---|---|---|---|---|---|---|")
        for c in all_cases:
            marks = ["v" if rule(c) else "-" for rule in rules.values()]
            print(f"| {c.task} | {c.answer[:60]} | {c.source} | {'yes' if c.invented else ''} | "
                  f"{'yes' if c.right else ''} | " + " | ".join(marks) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
