"""Eight families of data tasks that users of rlm bring, generated with seeds and scored
automatically. Not tuned to any prompt: each family's question is phrased the way an
analyst would ask it, and several phrasings are drawn per family.

Every generator returns a `Task`: the question, the input files (name -> text), the true
answer and a scorer. Sizes are approximate total characters of the inputs (100k, 1M).

Families:
  needle        a fact hidden in a long log among near-miss distractors
  count         counting records that match a condition among thousands of short records
  groupby       group-by / aggregate over a large CSV
  join          a join of two CSV files, then an aggregate
  timeseries    resample a daily series and find the extreme period
  dedupe        distinct entities after merging spelling variants
  multistep     several dependent steps with intermediate results reused
  farapart      an answer that needs two statements far apart in a long text
"""

from __future__ import annotations

import random
import re
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, timedelta

FIRST = ["Ilse", "Marco", "Priya", "Tomas", "Yuki", "Amara", "Lena", "Oskar", "Nadia", "Felix",
         "Sanna", "Diego", "Ines", "Rafael", "Mei", "Jonas", "Aylin", "Kofi", "Elena", "Bruno"]
LAST = ["Brandt", "Okafor", "Lindqvist", "Moreau", "Tanaka", "Silva", "Novak", "Haddad",
        "Kowalski", "Fischer", "Duarte", "Rossi", "Berg", "Costa", "Ivanova", "Nakamura"]
CITIES = ["Lyon", "Porto", "Graz", "Tartu", "Ghent", "Malmo", "Turin", "Split", "Cork", "Brno"]
CATEGORIES = ["garden", "kitchen", "toys", "office", "sports", "books", "audio", "bath"]
FILLER = ["the batch job finished", "cache warmed for region", "user session renewed",
          "nightly export queued", "sensor heartbeat received", "backup verified",
          "report regenerated", "config reloaded", "index compacted", "queue drained"]


@dataclass
class Task:
    family: str
    size: int
    seed: int
    question: str
    files: dict[str, str]
    answer: str
    score: Callable[[str], bool] = field(repr=False)

    @property
    def chars(self) -> int:
        return sum(len(v) for v in self.files.values())


# ------------------------------------------------------------------ scoring helpers
def _norm(text: str) -> str:
    """Lowercase words and numbers; a dot survives only inside a number."""
    text = re.sub(r"(?<!\d)\.|\.(?!\d)", " ", str(text).lower())
    return re.sub(r"[^a-z0-9.\- ]+", " ", text).strip()


def _numbers(text: str) -> list[float]:
    out = []
    for m in re.finditer(r"-?\d[\d,]*(?:\.\d+)?", str(text)):
        try:
            out.append(float(m.group().replace(",", "")))
        except ValueError:
            pass
    return out


def exact_word(truth: str, wrong: list[str] | None = None) -> Callable[[str], bool]:
    """The true word appears and none of the listed wrong candidates does."""
    t = _norm(truth)
    bad = [_norm(w) for w in (wrong or []) if _norm(w) != t]

    def score(answer: str) -> bool:
        a = f" {_norm(answer)} "
        return f" {t} " in a and not any(f" {b} " in a for b in bad)
    return score


def number(truth: float, rel: float = 0.0, abs_tol: float = 0.0) -> Callable[[str], bool]:
    """Some number in the answer equals the truth within tolerance."""
    def score(answer: str) -> bool:
        return any(abs(x - truth) <= max(abs_tol, rel * abs(truth)) for x in _numbers(answer))
    return score


def _log_line(rng: random.Random, day: date) -> str:
    t = f"{rng.randrange(24):02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}"
    return f"{day.isoformat()} {t} INFO {rng.choice(FILLER)} #{rng.randrange(10**5)}\n"


def _fill_lines(rng: random.Random, size: int) -> list[str]:
    lines, total, day = [], 0, date(2025, 1, 1)
    while total < size:
        if rng.random() < 0.01:
            day += timedelta(days=1)
        line = _log_line(rng, day)
        lines.append(line)
        total += len(line)
    return lines


# ------------------------------------------------------------------------- families
def needle(seed: int, size: int) -> Task:
    rng = random.Random(seed)
    lines = _fill_lines(rng, size)
    first, last = rng.choice(FIRST), rng.choice(LAST)
    code = f"{rng.choice('KMRTZ')}-{rng.randrange(1000, 9999)}"
    near = [(first, last[:-1] + rng.choice("aeiou")), (rng.choice(FIRST), last),
            (first, rng.choice([x for x in LAST if x != last]))]
    for f, l_ in near:  # near misses: similar names with other codes
        other = f"{rng.choice('KMRTZ')}-{rng.randrange(1000, 9999)}"
        lines.insert(rng.randrange(len(lines)),
                     f"2025-03-0{rng.randrange(1, 9)} 09:00:00 AUDIT badge {other} issued to "
                     f"{f} {l_}\n")
    lines.insert(rng.randrange(len(lines)),
                 f"2025-03-04 11:12:13 AUDIT badge {code} issued to {first} {last}\n")
    q = rng.choice([
        f"Which badge code was issued to {first} {last}?",
        f"Find the access badge that {first} {last} received. Reply with the code.",
        f"In the audit log, what badge did {first} {last} get?",
    ])
    return Task("needle", size, seed, q, {"audit.log": "".join(lines)}, code,
                lambda a, c=code: c.lower() in str(a).lower())


def count(seed: int, size: int) -> Task:
    rng = random.Random(seed)
    city, status = rng.choice(CITIES), rng.choice(["returned", "cancelled"])
    rows, total, n = [], 0, 0
    while total < size:
        c, s = rng.choice(CITIES), rng.choices(["delivered", "returned", "cancelled"], [8, 1, 1])[0]
        row = (f'{{"order": {len(rows) + 1}, "city": "{c}", "status": "{s}", '
               f'"items": {rng.randrange(1, 6)}}}\n')
        rows.append(row)
        total += len(row)
        n += c == city and s == status
    q = rng.choice([
        f"How many orders shipped to {city} were {status}?",
        f"Count the {status} orders whose city is {city}.",
        f"What is the number of {status} orders in {city}?",
    ])
    return Task("count", size, seed, q, {"orders.jsonl": "".join(rows)}, str(n), number(n))


def groupby(seed: int, size: int) -> Task:
    rng = random.Random(seed)
    weights = {c: rng.uniform(0.5, 1.5) for c in CATEGORIES}
    rows, total, rev = ["date,category,units,unit_price\n"], 0, Counter[str]()
    while total < size:
        c = rng.choice(CATEGORIES)
        units, price = rng.randrange(1, 20), round(rng.uniform(2, 60) * weights[c], 2)
        d = date(2024, 1, 1) + timedelta(days=rng.randrange(730))
        row = f"{d.isoformat()},{c},{units},{price}\n"
        rows.append(row)
        total += len(row)
        if d.year == 2025:
            rev[c] += units * price
    best = rev.most_common(1)[0][0]
    q = rng.choice([
        "Which product category brought in the most revenue (units times unit price) in 2025?",
        "In 2025, what category had the highest total sales value? Revenue is units * unit_price.",
    ])
    return Task("groupby", size, seed, q, {"sales.csv": "".join(rows)}, best,
                exact_word(best, CATEGORIES))


def join(seed: int, size: int) -> Task:
    rng = random.Random(seed)
    n_customers = max(50, size // 400)
    customers = ["customer_id,name,city\n"]
    city_of = {}
    for i in range(1, n_customers + 1):
        city_of[i] = rng.choice(CITIES)
        customers.append(f"{i},{rng.choice(FIRST)} {rng.choice(LAST)},{city_of[i]}\n")
    bias = {c: rng.uniform(0.6, 1.4) for c in CITIES}
    orders, total, spend = ["order_id,customer_id,amount\n"], len("".join(customers)), Counter[str]()
    while total < size:
        cid = rng.randrange(1, n_customers + 1)
        amount = round(rng.uniform(5, 200) * bias[city_of[cid]], 2)
        row = f"{len(orders)},{cid},{amount}\n"
        orders.append(row)
        total += len(row)
        spend[city_of[cid]] += amount
    best = spend.most_common(1)[0][0]
    q = rng.choice([
        "Customers live in cities (customers.csv); orders are in orders.csv. Which city's "
        "customers spent the most in total?",
        "Using both files, find the city with the largest total order amount.",
    ])
    return Task("join", size, seed, q, {"customers.csv": "".join(customers),
                                        "orders.csv": "".join(orders)}, best,
                exact_word(best, CITIES))


def timeseries(seed: int, size: int) -> Task:
    rng = random.Random(seed)
    station = rng.choice(["north", "south", "east", "west"])
    rows, total = ["timestamp,station,temp_c\n"], 0
    peak_month = rng.randrange(1, 13)
    start = date(2025, 1, 1)
    temps: dict[int, list[float]] = defaultdict(list)
    i = 0
    while total < size:
        day = start + timedelta(days=(i // 24) % 365)
        hour = i % 24
        st = rng.choice(["north", "south", "east", "west"])
        base = 10 + 8 * (1 if day.month == peak_month else 0) * (st == station)
        t = round(base + rng.gauss(0, 3), 1)
        row = f"{day.isoformat()}T{hour:02d}:00,{st},{t}\n"
        rows.append(row)
        total += len(row)
        if st == station:
            temps[day.month].append(t)
        i += 1
    means = {m: sum(v) / len(v) for m, v in temps.items() if v}
    best = max(means, key=lambda m: means[m])
    name = date(2025, best, 1).strftime("%B")
    q = rng.choice([
        f"Which month had the highest average temperature at the {station} station?",
        f"Resample the {station} station's readings by month: in which month was it warmest "
        "on average?",
    ])
    months = [date(2025, m, 1).strftime("%B") for m in range(1, 13)]
    return Task("timeseries", size, seed, q, {"readings.csv": "".join(rows)}, name,
                exact_word(name, months))


_SUFFIX = [("Inc", "Inc.", "Incorporated"), ("Ltd", "Ltd.", "Limited"), ("GmbH", "GmbH", "GmbH")]


def dedupe(seed: int, size: int) -> Task:
    rng = random.Random(seed)
    stems = sorted({f"{rng.choice(LAST)} {rng.choice(['Foods', 'Metals', 'Logistics', 'Labs', 'Textiles', 'Energy'])}"
                    for _ in range(60)})
    n = rng.randrange(15, min(40, len(stems)))
    companies = [(s, rng.choice(_SUFFIX)) for s in rng.sample(stems, n)]
    lines, total = ["vendor\n"], 0
    used = set()
    while total < size:
        stem, suf = rng.choice(companies)
        name = f"{stem} {rng.choice(suf)}"
        name = rng.choice([name, name.upper(), name.lower(), "  " + name, name + " "])
        lines.append(name + "\n")
        total += len(name) + 1
        used.add(stem)
    k = len(used)
    q = rng.choice([
        "vendors.csv lists vendor names with inconsistent spelling (case, spacing, 'Inc' vs "
        "'Inc.' vs 'Incorporated', 'Ltd' vs 'Limited'). How many distinct vendors are there?",
        "After merging spelling variants of the same vendor (case, extra spaces, legal-form "
        "abbreviations), how many different vendors does vendors.csv contain?",
    ])
    return Task("dedupe", size, seed, q, {"vendors.csv": "".join(lines)}, str(k), number(k))


def multistep(seed: int, size: int) -> Task:
    rng = random.Random(seed)
    regions = rng.sample(CITIES, 5)
    rows, total, values = ["order_id,region,value\n"], 0, defaultdict(list)
    shift = {r: rng.uniform(-30, 30) for r in regions}
    while total < size:
        r = rng.choice(regions)
        v = round(max(1.0, rng.gauss(100 + shift[r], 25)), 2)
        row = f"{len(rows)},{r},{v}\n"
        rows.append(row)
        total += len(row)
        values[r].append(v)
    import statistics

    overall = statistics.fmean(x for v in values.values() for x in v)
    med = {r: statistics.median(v) for r, v in values.items()}
    best = min(med, key=lambda r: abs(med[r] - overall))
    q = ("First compute the median order value of each region, then the mean order value over "
         "all orders. Which region's median is closest to that overall mean?")
    return Task("multistep", size, seed, q, {"orders.csv": "".join(rows)}, best,
                exact_word(best, regions))


def farapart(seed: int, size: int) -> Task:
    rng = random.Random(seed)
    lines = _fill_lines(rng, size)
    project = rng.choice(["Halcyon", "Juniper", "Meridian", "Basalt", "Kestrel", "Orchid"])
    budget = rng.randrange(20, 90) * 100_000
    pct = rng.choice([10, 15, 20, 25, 30])
    final = budget * (100 + pct) / 100
    early = rng.randrange(len(lines) // 20 + 1)
    late = len(lines) - 1 - rng.randrange(len(lines) // 20 + 1)
    lines.insert(late, f"2025-11-02 16:00:00 NOTE project {project}: the budget was raised by "
                       f"{pct}% after the review\n")
    lines.insert(early, f"2025-01-03 10:00:00 NOTE project {project}: initial budget approved "
                        f"at {budget} EUR\n")
    # a distractor: another project's budget
    other = rng.choice([p for p in ["Halcyon", "Juniper", "Meridian", "Basalt", "Kestrel",
                                    "Orchid"] if p != project])
    lines.insert(rng.randrange(len(lines)), f"2025-06-01 12:00:00 NOTE project {other}: initial "
                                            f"budget approved at {rng.randrange(20, 90) * 100_000} EUR\n")
    q = rng.choice([
        f"What is project {project}'s budget in EUR after all changes recorded in the log?",
        f"The log records project {project}'s budget and a later change to it. What is the "
        "budget now, in EUR?",
    ])
    return Task("farapart", size, seed, q, {"project.log": "".join(lines)}, f"{final:.0f}",
                number(final, abs_tol=0.5))


FAMILIES: dict[str, Callable[[int, int], Task]] = {
    "needle": needle, "count": count, "groupby": groupby, "join": join,
    "timeseries": timeseries, "dedupe": dedupe, "multistep": multistep, "farapart": farapart,
}


def make(family: str, seed: int, size: int) -> Task:
    return FAMILIES[family](seed, size)
