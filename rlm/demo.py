"""`rlm demo`: a small realistic sales dataset and a short exploratory task on it.

`make_sales_dataset(path, seed, rows)` writes a deterministic CSV (same bytes for the same
seed and row count, on any platform: stdlib `random` with an explicit seed, fixed
formatting). `demo_answer(seed, rows)` computes the true answer from the same rows, with
no pandas and no file (`file_answer(path)` does it for a CSV on disk), so tests and
bench/demo_seeds.py check the agent's reply without trusting pandas or the model.

Where the data lives: `rlm demo` writes nothing into the directory it is run from. The CSV
goes into `<session dir>/demo/`, and the kernel's working directory is moved there before
the file is loaded as `sales` (`RunOptions.workdir`). So the first thing a small model tries,
`pd.read_csv('sales.csv')`, reads the same data instead of failing: the user never named a
file, the task text does, and a name in the task should resolve where the code runs. (For
`rlm run --context FILE` the kernel already runs in the user's directory, so the name the
user gave resolves as given.)
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import random
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlm import safeio
from rlm.protocols import SessionLog

DEMO_FILE = "sales.csv"
DEMO_DIR = "demo"  # under the session directory; the kernel works there
DEFAULT_SEED = 7
DEFAULT_ROWS = 3000
DEMO_TASK = (
    "The DataFrame `sales` is already loaded in the kernel (one row per order, from "
    "sales.csv; columns include region and revenue). Which region had the largest total "
    "revenue, and by how much did it lead the runner-up?"
)

COLUMNS = [
    "order_id", "date", "region", "store", "product", "category",
    "units", "unit_price", "discount", "revenue",
]

# Region weights are close enough that the ranking is not obvious from a glance at head().
_REGIONS = {"North": 1.00, "South": 0.93, "East": 1.12, "West": 0.97, "Central": 0.81}
_STORES_PER_REGION = 3
_PRODUCTS = [  # product, category, list price
    ("Espresso Beans 1kg", "Coffee", 24.90),
    ("Filter Papers x100", "Supplies", 4.50),
    ("Ceramic Mug", "Homeware", 9.95),
    ("Burr Grinder", "Equipment", 129.00),
    ("French Press", "Equipment", 34.50),
    ("Oat Milk 1L", "Dairy-free", 2.79),
    ("Green Tea 50 bags", "Tea", 6.40),
    ("Travel Tumbler", "Homeware", 19.99),
    ("Descaler", "Supplies", 8.25),
    ("Decaf Beans 500g", "Coffee", 13.75),
]
_DISCOUNTS = [0.0, 0.0, 0.0, 0.05, 0.10, 0.15]


def sales_rows(seed: int = DEFAULT_SEED, rows: int = DEFAULT_ROWS) -> Iterator[list[Any]]:
    """The dataset's rows (without the header), exactly as the CSV holds them."""
    rng = random.Random(seed)
    regions = list(_REGIONS)
    weights = [_REGIONS[r] for r in regions]
    start = dt.date(2024, 1, 1)
    for i in range(rows):
        region = rng.choices(regions, weights)[0]
        store = f"{region[:3].upper()}-{rng.randint(1, _STORES_PER_REGION):02d}"
        product, category, price = rng.choice(_PRODUCTS)
        unit_price = round(price * rng.uniform(0.92, 1.08), 2)
        units = max(1, int(rng.expovariate(1 / 4)))
        discount = rng.choice(_DISCOUNTS)
        revenue = round(units * unit_price * (1 - discount), 2)
        day = start + dt.timedelta(days=rng.randrange(366))
        yield [
            100001 + i, day.isoformat(), region, store, product, category,
            units, f"{unit_price:.2f}", f"{discount:.2f}", f"{revenue:.2f}",
        ]


def make_sales_dataset(path: Path | str, seed: int = DEFAULT_SEED,
                       rows: int = DEFAULT_ROWS) -> Path:
    """Write `rows` sales lines for 2024 to `path` (CSV with a header); return the path."""
    path = Path(path)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    w.writerows(sales_rows(seed, rows))
    # the demo's folder is its kernel's working directory: nothing there is followed
    safeio.write_atomic(path.parent, path.name, buf.getvalue().encode("utf-8"), mode=0o644,
                        durable=False)
    return path


@dataclass(frozen=True)
class DemoAnswer:
    leader: str
    runner_up: str
    lead: float  # leader total minus runner-up total, rounded to cents
    totals: dict[str, float]


def _answer(pairs: Iterator[tuple[str, str]]) -> DemoAnswer:
    totals: dict[str, float] = defaultdict(float)
    for region, revenue in pairs:
        totals[region] += float(revenue)
    ranked = sorted(totals.items(), key=lambda kv: kv[1], reverse=True)
    (leader, top), (second, nxt) = ranked[0], ranked[1]
    return DemoAnswer(leader, second, round(top - nxt, 2), {k: round(v, 2) for k, v in ranked})


def demo_answer(seed: int = DEFAULT_SEED, rows: int = DEFAULT_ROWS) -> DemoAnswer:
    """The true answer to DEMO_TASK for the dataset `rlm demo --seed SEED --rows ROWS` uses."""
    r, v = COLUMNS.index("region"), COLUMNS.index("revenue")
    return _answer((row[r], row[v]) for row in sales_rows(seed, rows))


def file_answer(path: Path | str) -> DemoAnswer:
    """The true answer to DEMO_TASK for a sales CSV on disk."""
    with open(path, newline="", encoding="utf-8") as f:
        return _answer((row["region"], row["revenue"]) for row in csv.DictReader(f))


def make_demo_data(session_dir: Path | str, seed: int = DEFAULT_SEED,
                   rows: int = DEFAULT_ROWS) -> Path:
    """The demo's CSV, in its own directory under the session: `<session>/demo/sales.csv`."""
    folder = safeio.make_dirs(Path(session_dir), DEMO_DIR)
    return make_sales_dataset(folder / DEMO_FILE, seed=seed, rows=rows)


def notebook_path(session: SessionLog, output: str | None) -> Path:
    """Where `rlm demo` writes its notebook: `-o PATH`, else the session directory."""
    if output:
        return Path(output)
    assert session.dir is not None, "a demo session is on disk"
    return Path(session.dir) / f"{session.header.id}.ipynb"


def answer_is_right(text: str | None, truth: DemoAnswer) -> bool:
    """Does a reply name the right leader and the right lead? The leader must be the first
    region the reply names; the lead must appear as a number within 1% (or 1.00) of it."""
    if not text:
        return False
    named = [(m.start(), r) for r in truth.totals
             for m in re.finditer(rf"\b{re.escape(r)}\b", text, re.I)]
    if not named or min(named)[1] != truth.leader:
        return False
    numbers = [float(x.replace(",", "")) for x in re.findall(r"\d[\d,]*(?:\.\d+)?", text)]
    return any(abs(x - truth.lead) <= max(1.0, 0.01 * truth.lead) for x in numbers)
