"""Long autonomous runs on the default model (issue 33): do they make progress or stop
honestly?

    python -m bench.longrun                     # every task, the default `local` model
    python -m bench.longrun --tasks flights,logs --max-turns 20
    python -m bench.longrun --transcripts bench/transcripts/longrun-stopN.jsonl --label A

Each task is a multi-step analysis that ends by writing a result file, run as a new user
would: `rlm run PROMPT --goal GOAL --autonomous --gate CHECK --max-turns N --json` in a
fresh directory holding the task's data files, no model settings (the default model is
`local`). Each run takes the local-model lock (`flock /tmp/rlm-local-model.lock`) for
itself only, so other users of the machine interleave. The data are generated with a fixed
seed; the tasks were written before any run and not tuned after.

Per task the outcome is one of
  completed-correctly      the run ended with its goal complete and the file is right
  wrong-but-claimed-done   the goal complete (or the run ended with an answer) and the
                           file is wrong or missing
  stopped-honestly         the run ended `stuck`, its goal blocked with a reason, or a gate
                           stall: nothing claimed
  ran-to-limit             --max-turns (or another limit) ended it
plus turns and seconds spent after the first repeated cell (same code or same output as an
earlier cell of the run), the turns after the stuck watch's note and how many of their cells
printed something new (`after_note`), and whether the run crossed the model's window (a
compaction). Twelve tasks: the first six since session 10, four (quarters, visits, grades,
contracts) written in stop 44 and two (survey, shipments) in stop 45, each before any run
of them.
One JSON line per task goes to bench/out/longrun-<time>.jsonl; a table is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd

OUT = Path(__file__).resolve().parent / "out"
LOCK = "/tmp/rlm-local-model.lock"
SEED = 33


@dataclass
class LongTask:
    name: str
    prompt: str
    goal: str
    gate: str
    make: Callable[[Path], dict]  # writes the data into a directory; returns the truth
    check: Callable[[Path, dict], bool]  # the result file against the truth


# ------------------------------------------------------------------------- data sets
def _rng(k: int) -> np.random.Generator:
    return np.random.default_rng(SEED * 100 + k)


def _lines(path: Path) -> list[str]:
    return [ln.strip() for ln in path.read_text().splitlines() if ln.strip()] \
        if path.is_file() else []


def make_flights(d: Path) -> dict:
    r = _rng(1)
    n = 40_000
    origin = r.choice(["EWR", "JFK", "LGA"], n)
    month = r.integers(1, 13, n)
    peak = {"EWR": 7, "JFK": 12, "LGA": 3}
    delay = r.normal(8, 20, n) + np.array([25 if m == peak[o] else 0
                                           for o, m in zip(origin, month, strict=True)])
    pd.DataFrame({"year": 2013, "month": month, "day": r.integers(1, 29, n),
                  "carrier": r.choice(["UA", "B6", "EV", "DL", "AA"], n), "origin": origin,
                  "dest": r.choice(["ATL", "ORD", "LAX", "BOS", "MIA"], n),
                  "dep_delay": delay.round(0)}).to_csv(d / "flights.csv", index=False)
    return peak


def checked(task: LongTask, work: Path, truth: dict) -> bool:
    """Whether the task's files hold the truth; a file its check cannot read (a total
    column holding region names, a header renamed over other columns) is not right."""
    try:
        return bool(task.check(work, truth))
    except (ValueError, KeyError, IndexError, TypeError, OSError, UnicodeDecodeError) as e:
        print(f"{task.name}: the output could not be read as the task asks ({type(e).__name__}: "
              f"{e}); counted as not right", file=sys.stderr)
        return False


def check_flights(d: Path, truth: dict) -> bool:
    lines = _lines(d / "report.md")
    found = {}
    for ln in lines:
        for o in truth:
            if ln.startswith(f"{o}:"):
                digits = "".join(c if c.isdigit() else " " for c in ln[4:]).split()
                found[o] = int(digits[0]) if digits else None
    return found == truth


def make_sales(d: Path) -> dict:
    r = _rng(2)
    n = 25_000
    region = r.choice(["North", "South", "East", "West"], n)
    product = r.choice(["lamp", "desk", "chair", "shelf", "rug"], n)
    amount = r.gamma(2.0, 30.0, n).round(2)
    df = pd.DataFrame({"order_id": np.arange(1, n + 1), "date": pd.date_range(
        "2024-01-01", periods=n, freq="20min").strftime("%Y-%m-%d"), "region": region,
        "product": product, "amount": amount})
    df.to_csv(d / "sales.csv", index=False)
    totals = df.groupby("region")["amount"].sum().round(2)
    top = df.groupby(["region", "product"])["amount"].sum().unstack().idxmax(axis=1)
    return {reg: {"total": float(totals[reg]), "top": top[reg]} for reg in totals.index}


def check_sales(d: Path, truth: dict) -> bool:
    try:
        df = pd.read_csv(d / "region_summary.csv")
    except Exception:  # noqa: BLE001 - missing or malformed: wrong
        return False
    cols = {c.lower().strip(): c for c in df.columns}
    if not {"region", "total", "top_product"} <= set(cols):
        return False
    got = {str(row[cols["region"]]).strip(): (float(row[cols["total"]]),
                                              str(row[cols["top_product"]]).strip().lower())
           for _, row in df.iterrows()}
    return set(got) == set(truth) and all(
        abs(got[k][0] - v["total"]) <= 1.0 and got[k][1] == v["top"] for k, v in truth.items())


def make_sensors(d: Path) -> dict:
    r = _rng(3)
    stations = ["S1", "S2", "S3", "S4", "S5", "S6"]
    rows = []
    for day in pd.date_range("2024-06-01", "2024-06-30"):
        for st in stations:
            for hour in range(0, 24, 2):
                t = 18 + 6 * np.sin((hour - 9) / 24 * 2 * np.pi) + r.normal(0, 1.5)
                if st == "S4" and day.day == 17:
                    t += 9  # the heat day
                rows.append((st, f"{day:%Y-%m-%d} {hour:02d}:00", round(float(t), 2)))
    df = pd.DataFrame(rows, columns=["station", "timestamp", "temp_c"])
    df.to_csv(d / "sensors.csv", index=False)
    df["day"] = df["timestamp"].str[:10]
    daily = df.groupby(["station", "day"])["temp_c"].mean()
    st, day = daily.idxmax()
    return {"station": st, "day": day}


def check_sensors(d: Path, truth: dict) -> bool:
    try:
        got = json.loads((d / "hottest.json").read_text())
    except Exception:  # noqa: BLE001
        return False
    return isinstance(got, dict) and str(got.get("station")) == truth["station"] \
        and str(got.get("day"))[:10] == truth["day"]


def make_logs(d: Path) -> dict:
    r = _rng(4)
    services = ["auth", "billing", "search", "upload", "mailer"]
    weights = np.array([0.02, 0.09, 0.04, 0.06, 0.01])
    lines, errors = [], dict.fromkeys(services, 0)
    for i in range(12_000):
        svc = services[int(r.integers(0, 5))]
        level = "ERROR" if r.random() < weights[services.index(svc)] else \
            r.choice(["INFO", "INFO", "DEBUG", "WARN"])
        errors[svc] += level == "ERROR"
        lines.append(f"2024-05-{1 + i // 500:02d}T{(i // 20) % 24:02d}:{i % 60:02d}:00 "
                     f"[{level}] {svc}: request {100000 + i} handled in "
                     f"{int(r.integers(3, 900))} ms")
    (d / "app.log").write_text("\n".join(lines) + "\n")
    return {k: int(v) for k, v in errors.items()}


def check_logs(d: Path, truth: dict) -> bool:
    got = {}
    for ln in _lines(d / "errors.txt"):
        name, _, num = ln.partition(":")
        digits = "".join(c for c in num if c.isdigit())
        if digits:
            got[name.strip().lower()] = int(digits)
    order = [k for k, _ in sorted(truth.items(), key=lambda kv: -kv[1])]
    listed = [ln.partition(":")[0].strip().lower() for ln in _lines(d / "errors.txt")]
    return got == truth and listed == order


def make_staff(d: Path) -> dict:
    r = _rng(5)
    depts = pd.DataFrame({"dept_id": [10, 20, 30, 40],
                          "dept_name": ["Research", "Sales", "Support", "Finance"]})
    n = 3000
    base = {10: 72000, 20: 61000, 30: 48000, 40: 66000}
    dept = r.choice([10, 20, 30, 40], n)
    staff = pd.DataFrame({"emp_id": np.arange(1, n + 1), "dept_id": dept,
                          "salary": [int(base[x] + r.normal(0, 9000)) for x in dept]})
    depts.to_csv(d / "departments.csv", index=False)
    staff.to_csv(d / "employees.csv", index=False)
    m = staff.merge(depts, on="dept_id").groupby("dept_name")["salary"].mean().round(0)
    return {k: float(v) for k, v in m.items()}


def check_staff(d: Path, truth: dict) -> bool:
    got = {}
    for ln in _lines(d / "salaries.md"):
        ln = ln.lstrip("-*| ").strip()
        for name in truth:
            if ln.lower().startswith(name.lower()):
                nums = [float(x.replace(",", "")) for x in
                        __import__("re").findall(r"\d[\d,]*\.?\d*", ln[len(name):])]
                if nums:
                    got[name] = nums[0]
    return set(got) == set(truth) and all(abs(got[k] - v) <= 1.0 for k, v in truth.items())


def make_stock(d: Path) -> dict:
    r = _rng(6)
    items = [f"SKU{100 + i}" for i in range(12)]
    falling = {"SKU103", "SKU107", "SKU110"}
    rows = []
    for it in items:
        level = int(r.integers(200, 400))
        for week in range(1, 13):
            if it in falling and week in (6, 7, 8, 9):
                level -= int(r.integers(15, 40))
            else:
                level += int(r.integers(-10, 25)) if week % 2 else int(r.integers(0, 20))
            rows.append((it, week, level))
    df = pd.DataFrame(rows, columns=["item", "week", "stock"])
    df.to_csv(d / "stock.csv", index=False)
    out = []
    for it, g in df.sort_values("week").groupby("item"):
        diffs = g["stock"].diff().tolist()[1:]
        run = best = 0
        for x in diffs:
            run = run + 1 if x < 0 else 0
            best = max(best, run)
        if best >= 3:
            out.append(it)
    return {"items": sorted(out)}


def check_stock(d: Path, truth: dict) -> bool:
    return sorted(_lines(d / "falling.txt")) == truth["items"]


def make_quarters(d: Path) -> dict:
    """Four wide quarterly files (14 columns each): their four previews alone take about a
    third of the local model's 8k window, so a run of a few turns crosses it."""
    r = _rng(7)
    stores = [f"S{i:02d}" for i in range(1, 13)]
    frames = []
    for q in range(1, 5):
        n = 3000
        store = r.choice(stores, n)
        units = r.integers(1, 9, n)
        boost = np.where((store == "S07") & (q == 3), 1.6, 1.0)  # S07's summer
        price = (r.gamma(3.0, 12.0, n) * boost).round(2)
        df = pd.DataFrame({
            "order_id": np.arange(q * 100_000, q * 100_000 + n),
            "date": pd.Timestamp(f"2024-{3 * q - 2:02d}-01") + pd.to_timedelta(
                r.integers(0, 90, n), unit="D"),
            "store": store, "city": r.choice(["Lyon", "Lille", "Nantes", "Metz"], n),
            "channel": r.choice(["web", "shop", "phone"], n),
            "product": r.choice(["lamp", "desk", "chair", "shelf", "rug", "sofa"], n),
            "category": r.choice(["home", "office"], n), "units": units,
            "unit_price": price, "discount": r.choice([0.0, 0.05, 0.1, 0.2], n),
            "tax_rate": 0.2, "shipping": r.choice([0.0, 4.9, 9.9], n),
            "segment": r.choice(["retail", "pro", "student"], n),
            "rating": r.integers(1, 6, n)})
        df.to_csv(d / f"q{q}.csv", index=False)
        frames.append(df.assign(quarter=f"Q{q}"))
    year = pd.concat(frames)
    year["revenue"] = year["units"] * year["unit_price"] * (1 - year["discount"])
    best = year.groupby("store")["revenue"].sum().idxmax()
    quarter = year[year["store"] == best].groupby("quarter")["revenue"].sum().idxmax()
    return {"store": best, "quarter": quarter}


def check_quarters(d: Path, truth: dict) -> bool:
    text = " ".join(_lines(d / "best_store.txt")).upper()
    stores = set(__import__("re").findall(r"\bS\d\d\b", text))
    quarters = set(__import__("re").findall(r"\bQ[1-4]\b", text))
    return stores == {truth["store"]} and quarters == {truth["quarter"]}


def make_visits(d: Path) -> dict:
    """JSON Lines, one page view each: the loader makes a DataFrame of it."""
    r = _rng(8)
    pages = ["/home", "/search", "/cart", "/help", "/account", "/blog", "/pricing"]
    reach = np.array([0.30, 0.18, 0.08, 0.05, 0.12, 0.22, 0.05])
    rows = []
    for i in range(9000):
        page = pages[int(r.choice(len(pages), p=reach))]
        user = f"u{int(r.integers(1, 400 if page != '/blog' else 1200)):04d}"
        rows.append(json.dumps({"ts": 1717200000 + 37 * i, "user": user, "page": page,
                                "ms": int(r.gamma(2.0, 900.0))}))
    (d / "visits.jsonl").write_text("\n".join(rows) + "\n")
    df = pd.read_json(d / "visits.jsonl", lines=True)
    top = df.groupby("page")["user"].nunique().sort_values(ascending=False)
    return {"top": list(top.index[:3])}


def check_visits(d: Path, truth: dict) -> bool:
    pages = [m.group(0) for ln in _lines(d / "top_pages.txt")
             if (m := __import__("re").search(r"/\w+", ln))]
    return pages == truth["top"]


def make_grades(d: Path) -> dict:
    r = _rng(9)
    n = 600
    cls = r.choice(["7A", "7B", "8A", "8B"], n)
    pd.DataFrame({"student_id": np.arange(1, n + 1), "name": [f"student{i}" for i in range(n)],
                  "class": cls}).to_csv(d / "students.csv", index=False)
    level = {"7A": 64, "7B": 58, "8A": 70, "8B": 55}
    rows = [(sid, subj, int(np.clip(r.normal(level[c], 14), 0, 100)))
            for sid, c in zip(range(1, n + 1), cls, strict=True)
            for subj in ("math", "science", "history")]
    scores = pd.DataFrame(rows, columns=["student_id", "subject", "score"])
    scores.to_csv(d / "scores.csv", index=False)
    mean = scores.groupby("student_id")["score"].mean()
    st = pd.DataFrame({"class": cls}, index=np.arange(1, n + 1))
    st["passed"] = mean.reindex(st.index) >= 60
    return {k: round(float(v), 2) for k, v in st.groupby("class")["passed"].mean().items()}


def check_grades(d: Path, truth: dict) -> bool:
    try:
        df = pd.read_csv(d / "pass_rate.csv")
    except Exception:  # noqa: BLE001
        return False
    if list(df.columns) != ["class", "pass_rate"]:
        return False
    got = {str(c): float(v) for c, v in zip(df["class"], df["pass_rate"], strict=True)}
    return set(got) == set(truth) and all(abs(got[k] - v) <= 0.011 for k, v in truth.items())


def make_contracts(d: Path) -> dict:
    """A long text (87 kB): 60 contracts of boilerplate, each with its id and term
    somewhere in its middle. Reading it in slices fills the 8k window in a few turns."""
    r = _rng(10)
    clauses = ["The Supplier shall deliver the Goods in accordance with the schedule.",
               "Payment is due within thirty days of the invoice date.",
               "Either party may terminate this agreement with written notice.",
               "All disputes are subject to the courts of the Buyer's seat.",
               "The Supplier warrants that the Goods are free from defects.",
               "Confidential information shall not be disclosed to third parties."]
    parts, long_ids = [], []
    for i in range(60):
        cid = f"C-{1000 + 7 * i}"
        months = int(r.choice([6, 12, 18, 24, 30, 36, 48]))
        if months > 24:
            long_ids.append(cid)
        body = [clauses[int(k)] for k in r.integers(0, len(clauses), 22)]
        body.insert(int(r.integers(3, 18)), f"Contract ID: {cid}")
        body.insert(int(r.integers(5, 20)), f"Term: {months} months from the effective date.")
        parts.append(f"AGREEMENT {i + 1}\n" + "\n".join(body))
    (d / "contracts.txt").write_text("\n---\n".join(parts) + "\n")
    return {"ids": sorted(long_ids)}


def check_contracts(d: Path, truth: dict) -> bool:
    found = __import__("re").findall(r"C-\d{4}", " ".join(_lines(d / "long_terms.txt")))
    return sorted(found) == truth["ids"]



def make_survey(d: Path) -> dict:
    """A wide table (17 columns) and three chained steps, each needing the last one's
    result: a run that works step by step prints a lot and crosses the 8k window."""
    r = _rng(11)
    n = 4000
    region = r.choice(["north", "south", "east", "west", "centre"], n,
                      p=[0.18, 0.17, 0.26, 0.21, 0.18])
    product = r.choice(["basic", "plus", "family", "pro"], n)
    df = pd.DataFrame({"respondent_id": np.arange(1, n + 1), "region": region,
                       "age_group": r.choice(["18-29", "30-44", "45-64", "65+"], n),
                       "gender": r.choice(["f", "m", "x"], n, p=[0.49, 0.49, 0.02]),
                       "product": product, "channel": r.choice(["app", "web", "store"], n)})
    for q in range(1, 9):
        base = r.integers(1, 6, n)
        dip = (region == "east") & (product == "family") & (q == 6)
        df[f"q{q}"] = np.where(dip, np.clip(base - 2, 1, 5), base)
    df["nps"] = np.clip(np.round(r.normal(7, 2, n) - 2.5 * ((region == "east")
                                                              & (product == "family"))), 0, 10)
    df["comment_len"] = r.integers(0, 400, n)
    df.to_csv(d / "survey.csv", index=False)
    top = df["region"].value_counts().idxmax()
    sub = df[df["region"] == top]
    prod = sub.groupby("product")["nps"].mean().idxmin()
    qs = sub[sub["product"] == prod][[f"q{q}" for q in range(1, 9)]].mean().idxmin()
    return {"region": top, "product": prod, "question": qs}


def check_survey(d: Path, truth: dict) -> bool:
    got = {}
    for ln in _lines(d / "findings.md"):
        key, _, val = ln.lstrip("-*# ").partition(":")
        got[key.strip().lower()] = val.strip().strip("'\"`*").lower()
    return all(got.get(k) == v for k, v in truth.items())


def make_shipments(d: Path) -> dict:
    """Two files joined on order_id, dates to subtract, a share per group."""
    r = _rng(12)
    n = 5000
    carriers = ["DHL", "UPS", "GLS", "DPD", "TNT"]
    late_p = {"DHL": 0.12, "UPS": 0.08, "GLS": 0.27, "DPD": 0.18, "TNT": 0.05}
    promised = pd.Timestamp("2024-03-01") + pd.to_timedelta(r.integers(0, 120, n), unit="D")
    carrier = r.choice(carriers, n)
    late = np.array([r.random() < late_p[c] for c in carrier])
    shipped = promised + pd.to_timedelta(np.where(late, r.integers(1, 6, n),
                                                  -r.integers(0, 4, n)), unit="D")
    ids = r.permutation(np.arange(10_000, 10_000 + n))
    pd.DataFrame({"order_id": ids, "customer": [f"K{int(x):04d}" for x in r.integers(1, 900, n)],
                  "promised_date": promised.strftime("%Y-%m-%d")}).to_csv(
        d / "orders.csv", index=False)
    order = r.permutation(n)
    pd.DataFrame({"order_id": ids[order], "carrier": carrier[order],
                  "shipped_date": shipped.strftime("%Y-%m-%d")[order]}).to_csv(
        d / "shipments.csv", index=False)
    share = pd.Series(late, index=carrier).groupby(level=0).mean().round(2)
    return {k: float(v) for k, v in share.sort_values(ascending=False).items()}


def check_shipments(d: Path, truth: dict) -> bool:
    try:
        df = pd.read_csv(d / "late_rate.csv")
    except Exception:  # noqa: BLE001
        return False
    if list(df.columns) != ["carrier", "late_share"]:
        return False
    got = [(str(c), float(v)) for c, v in zip(df["carrier"], df["late_share"], strict=True)]
    return [c for c, _ in got] == list(truth) and all(
        abs(v - truth[c]) <= 0.011 for c, v in got)


TASKS = [
    LongTask("flights",
             "Explore flights.csv step by step. First compute the average departure delay "
             "(dep_delay) for each origin airport in each month. Then, for each origin "
             "airport, find the month with the worst average departure delay. Finally write "
             "one line per origin airport to report.md, like 'EWR: month 7'.",
             "report.md names the worst month for each of EWR, JFK and LGA",
             "grep -q '^EWR: month' report.md && grep -q '^JFK: month' report.md && "
             "grep -q '^LGA: month' report.md", make_flights, check_flights),
    LongTask("sales",
             "sales.csv holds orders. Compute the total amount per region, then the product "
             "with the highest total amount in each region. Write region_summary.csv with "
             "the columns region,total,top_product (one row per region).",
             "region_summary.csv has one row per region with its total and top product",
             "head -1 region_summary.csv | grep -q 'region,total,top_product'",
             make_sales, check_sales),
    LongTask("sensors",
             "sensors.csv has temperature readings (temp_c) from several stations every two "
             "hours in June 2024. Compute each station's mean temperature per day, find the "
             "station and day with the highest daily mean, and write them to hottest.json as "
             "{\"station\": ..., \"day\": \"YYYY-MM-DD\"}.",
             "hottest.json names the station and the day with the highest daily mean",
             "python3 -c \"import json; d=json.load(open('hottest.json')); "
             "assert d['station'] and d['day']\"", make_sensors, check_sensors),
    LongTask("logs",
             "app.log is a server log. Count the ERROR lines per service (the word before the "
             "colon after the level), then write errors.txt with one line per service like "
             "'billing: 42', most errors first.",
             "errors.txt lists every service's ERROR count, most errors first",
             "grep -q '^[a-z]*: [0-9]' errors.txt", make_logs, check_logs),
    LongTask("staff",
             "employees.csv has salaries and a dept_id; departments.csv maps dept_id to "
             "dept_name. Join them, compute the average salary per department name rounded "
             "to whole numbers, and write salaries.md with one line per department like "
             "'Research: 71234'.",
             "salaries.md gives the average salary of every department by name",
             "grep -q '^Research: [0-9]' salaries.md", make_staff, check_staff),
    LongTask("stock",
             "stock.csv has weekly stock levels per item. For each item, sort by week and "
             "find the items whose stock fell at least three weeks in a row. Write their "
             "item codes to falling.txt, one per line.",
             "falling.txt lists every item whose stock fell three weeks in a row",
             "grep -q '^SKU' falling.txt", make_stock, check_stock),
    LongTask("quarters",
             "q1.csv, q2.csv, q3.csv and q4.csv hold a year of orders, one quarter each. "
             "Combine them, compute each order's revenue as units * unit_price * (1 - "
             "discount), find the store with the highest revenue over the year, then that "
             "store's best quarter. Write best_store.txt with one line like "
             "'store: S01, quarter: Q2'.",
             "best_store.txt names the store with the highest yearly revenue and its best "
             "quarter", "grep -q '^store: S[0-9]*, quarter: Q[1-4]' best_store.txt",
             make_quarters, check_quarters),
    LongTask("visits",
             "visits.jsonl has one page view per line (ts, user, page, ms). Count the "
             "distinct users of each page and write the three pages with the most distinct "
             "users to top_pages.txt, one page per line, most first.",
             "top_pages.txt lists the three pages with the most distinct users, most first",
             "test $(grep -c '^/' top_pages.txt) -eq 3", make_visits, check_visits),
    LongTask("grades",
             "students.csv gives each student's class; scores.csv has one score per student "
             "and subject. A student passes when the mean of their scores is at least 60. "
             "Compute each class's pass rate (the share of its students who pass, rounded to "
             "2 decimals) and write pass_rate.csv with the columns class,pass_rate.",
             "pass_rate.csv gives every class's pass rate",
             "head -1 pass_rate.csv | grep -q '^class,pass_rate'", make_grades, check_grades),
    LongTask("contracts",
             "contracts.txt holds 60 agreements separated by lines of '---'. Each has a "
             "'Contract ID:' line and a 'Term: N months' line. Write the ids of the contracts "
             "whose term is longer than 24 months to long_terms.txt, one per line.",
             "long_terms.txt lists every contract whose term is longer than 24 months",
             "grep -q '^C-[0-9]' long_terms.txt", make_contracts, check_contracts),
    LongTask("survey",
             "survey.csv holds customer survey answers (scores q1 to q8 from 1 to 5, and an "
             "nps from 0 to 10). Work step by step and print each result before the next "
             "step. 1) Find the region with the most respondents. 2) In that region, find the "
             "product with the lowest mean nps. 3) For that region and product, find the "
             "question among q1 to q8 with the lowest mean score. Write findings.md with "
             "three lines: 'region: ...', 'product: ...', 'question: ...'.",
             "findings.md names the region, the product and the question of the three steps",
             "grep -q '^region:' findings.md && grep -q '^product:' findings.md && "
             "grep -q '^question:' findings.md", make_survey, check_survey),
    LongTask("shipments",
             "orders.csv has each order's promised_date; shipments.csv has its carrier and "
             "shipped_date. An order is late when it shipped after its promised date. Compute "
             "each carrier's share of late orders, rounded to 2 decimals, and write "
             "late_rate.csv with the columns carrier,late_share, highest share first.",
             "late_rate.csv gives every carrier's share of late orders, highest first",
             "head -1 late_rate.csv | grep -q '^carrier,late_share'",
             make_shipments, check_shipments),

]


# ----------------------------------------------------------------------- one task run
def first_repeat(entries: list[dict]) -> dict | None:
    """The first cell whose code or (non-empty) output repeats an earlier cell's: its
    turn number and timestamp."""
    codes: set[str] = set()
    outputs: set[str] = set()
    turn, pending = 0, {}
    for e in entries:
        if e.get("type") != "message":
            continue
        m = e["message"]
        if m["role"] == "assistant":
            turn += 1
            pending = {c["id"]: c["function"]["arguments"] for c in m.get("tool_calls") or []}
        elif m["role"] == "tool":
            raw = pending.get(m.get("tool_call_id"), "")
            try:
                code = json.loads(raw).get("code", "").strip()
            except (ValueError, AttributeError):
                code = str(raw)
            out = " ".join(str(m.get("content") or "").split())
            if code in codes or (out and out in outputs):
                return {"turn": turn, "timestamp": e["timestamp"]}
            codes.add(code)
            if out:
                outputs.add(out)
    return None


def after_note(entries: list[dict]) -> dict | None:
    """After the stuck watch's note (`<stuck>`): the turns the model took, and how many of
    its cells succeeded with an output no earlier cell printed (progress the watch counts).
    None when no note was given."""
    outputs: set[str] = set()
    turns = fresh = 0
    noted = False
    for e in entries:
        if e.get("type") != "message":
            continue
        m = e["message"]
        text = " ".join(str(m.get("content") or "").split())
        if m["role"] == "user" and text.startswith("<stuck>"):
            noted = True
        elif m["role"] == "assistant" and noted:
            turns += 1
        elif m["role"] == "tool" and text:
            failed = "Traceback" in text or text.startswith(("Not run", "Error"))
            if noted and not failed and text not in outputs:
                fresh += 1
            outputs.add(text)
    return {"turns": turns, "fresh_outputs": fresh} if noted else None


def classify(result: dict, goal_status: str | None, correct: bool) -> str:
    reason = result.get("reason", "")
    if goal_status == "complete" or (goal_status is None and reason in ("final", "no_code")):
        return "completed-correctly" if correct else "wrong-but-claimed-done"
    # the autonomous policy's own stops: a gate still failing and nothing changed, or its
    # continuations used up (since b131a03 these end `limit:stalled` / `limit:max_continuations`)
    if reason in ("stuck", "limit:stalled", "limit:max_continuations") or goal_status == "blocked":
        return "stopped-honestly"
    if reason.startswith("limit:"):
        return "ran-to-limit"
    if reason in ("final", "no_code"):  # ended by the autonomous policy (stalled gate)
        return "stopped-honestly"
    return f"other:{reason}"


def run_task(task: LongTask, root: Path, max_turns: int, timeout: float) -> dict:
    work = root / task.name
    work.mkdir(parents=True)
    truth = task.make(work)
    # the timeout counts from when the lock is held (waiting for other users is not the
    # run's time); `timeout` sends SIGTERM, which rlm turns into a clean end of the run
    stamp = work / ".started"
    argv = ["flock", LOCK, "sh", "-c", f"date +%s.%N > {stamp}; exec \"$@\"", "sh",
            "timeout", str(int(timeout)), sys.executable, "-m", "rlm", "run", task.prompt,
            "--goal", task.goal, "--autonomous", "--gate", task.gate,
            "--max-turns", str(max_turns), "--json"]
    proc = subprocess.run(argv, cwd=work, capture_output=True, text=True)
    seconds = time.time() - float(stamp.read_text()) if stamp.is_file() else 0.0
    lines = proc.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1]) if lines else {
            "reason": "timeout" if proc.returncode == 124 else f"exit {proc.returncode}",
            "stderr": proc.stderr[-500:]}
    except json.JSONDecodeError:
        result = {"reason": "no json", "stderr": proc.stderr[-500:]}
    entries, goal = [], None
    if result.get("session_path"):
        entries = [json.loads(x) for x in Path(result["session_path"]).read_text().splitlines()[1:]]
        states = [e["data"]["goal"] for e in entries if e.get("custom_type") == "thread_goal_state"
                  and e["data"]["goal"]]
        goal = states[-1] if states else None
    correct = checked(task, work, truth)
    rep = first_repeat(entries)
    after = None
    if rep is not None and entries:
        end = datetime.fromisoformat(entries[-1]["timestamp"])
        after = {"turns": result.get("turns", 0) - rep["turn"],
                 "seconds": round((end - datetime.fromisoformat(rep["timestamp"])).total_seconds())}
    return {
        "task": task.name, "outcome": classify(result, goal and goal["status"], correct),
        "reason": result.get("reason"), "goal_status": goal and goal["status"],
        "goal_reason": goal and goal.get("last_reason"), "correct": correct,
        "turns": result.get("turns"), "seconds": round(seconds),
        "tokens": (result.get("tokens") or {}).get("total"),
        "compactions": sum(1 for e in entries if e.get("type") == "compaction"),
        "after_first_repeat": after, "after_note": after_note(entries),
        "stuck": result.get("stuck"),
        "final": (result.get("final") or "")[:200], "truth": truth,
        "session": result.get("session_path"),
    }


def transcript(session: str | None, cap: int = 2000) -> list[dict]:
    """A run's messages, each cut to `cap` characters (head and tail), for
    bench/transcripts/: the figures of every stop can be checked against what was said."""
    if not session or not Path(session).is_file():
        return []
    out = []
    for line in Path(session).read_text().splitlines()[1:]:
        e = json.loads(line)
        if e.get("type") == "message":
            text = str(e["message"].get("content") or "")
            if len(text) > cap:
                text = text[:cap // 2] + " [...] " + text[-(cap // 2 - 100):]
            out.append({"role": e["message"]["role"], "content": text})
    return out


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, cwd=Path(__file__).parent).stdout.strip()
    except OSError:
        return ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", help="comma-separated task names (default: all)")
    ap.add_argument("--max-turns", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=1800.0,
                    help="seconds per task, counted while it holds the local-model lock")
    ap.add_argument("--workdir", help="where task directories go (default: a new temp dir)")
    ap.add_argument("--transcripts", help="also append each row with its transcript (every "
                    "message, capped) and the commit to this JSON Lines file")
    ap.add_argument("--label", default="", help="the variant's name in --transcripts rows")
    args = ap.parse_args(argv)
    os.environ.pop("RLM_MODEL", None)  # the default model, as a new user has it
    chosen = [t for t in TASKS if not args.tasks or t.name in args.tasks.split(",")]
    import tempfile

    root = Path(args.workdir or tempfile.mkdtemp(prefix="rlm-longrun-"))
    OUT.mkdir(exist_ok=True)
    out = OUT / f"longrun-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.jsonl"
    rows = []
    commit = _commit()
    for task in chosen:
        row = run_task(task, root, args.max_turns, args.timeout)
        rows.append(row)
        with out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)
        if args.transcripts:
            with open(args.transcripts, "a") as f:
                f.write(json.dumps({"variant": args.label, "commit": commit, **row,
                                    "transcript": transcript(row["session"])}) + "\n")
    print(f"\n{out}\n")
    print("| task | outcome | reason | goal | turns | s | tokens | compactions | after 1st repeat |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        a = r["after_first_repeat"]
        rep = f"{a['turns']} turns, {a['seconds']} s" if a else "no repeat"
        print(f"| {r['task']} | {r['outcome']} | {r['reason']} | {r['goal_status']} | "
              f"{r['turns']} | {r['seconds']} | {r['tokens']} | {r['compactions']} | {rep} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
