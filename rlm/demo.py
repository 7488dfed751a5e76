"""`rlm demo`: a small realistic sales dataset and a short exploratory task on it.

`make_sales_dataset(path)` writes a deterministic CSV (same bytes for the same seed and row
count, on any platform: stdlib `random` with an explicit seed, fixed formatting).
`demo_answer(path)` computes the true answer with the csv module alone, so tests can check
the agent's reply without trusting pandas or the model.
"""

from __future__ import annotations

import csv
import datetime as dt
import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

DEMO_FILE = "sales.csv"
DEMO_TASK = (
    "The file sales.csv is loaded as the DataFrame `sales`. Which region had the largest "
    "total revenue, and by how much did it lead the runner-up?"
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


def make_sales_dataset(path: Path | str, seed: int = 7, rows: int = 3000) -> Path:
    """Write `rows` sales lines for 2024 to `path` (CSV with a header); return the path."""
    rng = random.Random(seed)
    path = Path(path)
    regions = list(_REGIONS)
    weights = [_REGIONS[r] for r in regions]
    start = dt.date(2024, 1, 1)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(COLUMNS)
        for i in range(rows):
            region = rng.choices(regions, weights)[0]
            store = f"{region[:3].upper()}-{rng.randint(1, _STORES_PER_REGION):02d}"
            product, category, price = rng.choice(_PRODUCTS)
            unit_price = round(price * rng.uniform(0.92, 1.08), 2)
            units = max(1, int(rng.expovariate(1 / 4)))
            discount = rng.choice(_DISCOUNTS)
            revenue = round(units * unit_price * (1 - discount), 2)
            day = start + dt.timedelta(days=rng.randrange(366))
            w.writerow([
                100001 + i, day.isoformat(), region, store, product, category,
                units, f"{unit_price:.2f}", f"{discount:.2f}", f"{revenue:.2f}",
            ])
    return path


@dataclass(frozen=True)
class DemoAnswer:
    leader: str
    runner_up: str
    lead: float  # leader total minus runner-up total, rounded to cents
    totals: dict[str, float]


def demo_answer(path: Path | str) -> DemoAnswer:
    """The true answer to DEMO_TASK for the CSV at `path`."""
    totals: dict[str, float] = defaultdict(float)
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            totals[row["region"]] += float(row["revenue"])
    ranked = sorted(totals.items(), key=lambda kv: kv[1], reverse=True)
    (leader, top), (second, nxt) = ranked[0], ranked[1]
    return DemoAnswer(leader, second, round(top - nxt, 2), {k: round(v, 2) for k, v in ranked})
