"""What the model is told when something happens to its kernel. Never lies.

A restore notice lists exactly what came back and what did not; it says nothing about
names it does not know about.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

from kernel_ext.describe import LEVELS_MARK, frame_levels, listing_line, listing_lines
from rlm.kernel.types import CellResult, RestoreReport
from rlm.session.branch import custom_entries

MAX_NAMES = 200


def _names(items: list[str]) -> str:
    shown = ", ".join(items[:MAX_NAMES])
    more = len(items) - MAX_NAMES
    return shown + (f" (+{more} more)" if more > 0 else "")


def _lost(report: RestoreReport) -> list[str]:
    """Each lost name with its reason; why replay did not rebuild it is said once, on the
    "Not rebuilt by replay" line."""
    out = []
    for f in report.failed + report.skipped:
        reason = str(f.get("reason", "failed"))
        why = report.not_replayed.get(str(f.get("name")))
        if why and not report.replay_off:
            reason = reason.replace(f"; not rebuilt: {why}", "")
        out.append(f"{f['name']} ({reason})")
    return out


def restore_lines(report: RestoreReport) -> list[str]:
    if not report.snapshot_found:
        return ["No snapshot existed: the kernel starts empty; nothing was restored."]
    if report.summaries and report.restored:  # one line per name: what it is, to reuse it
        rows = [{"name": k, "summary": report.summaries.get(k)} for k in report.restored]
        lines = [f"Restored from the last snapshot ({len(rows)} names; names that shared objects"
                 " still do):"] + listing_lines(rows, budget_tokens=800)
    else:
        lines = [
            "Restored from the last snapshot: " + (_names(report.restored) if report.restored else "nothing") + "."
        ]
    if report.rebuilt:
        lines.append("Rebuilt by re-running recorded cells (they could not be snapshotted): " + ", ".join(
            f"{k} (cells {', '.join(map(str, v))})" for k, v in sorted(report.rebuilt.items())) + ".")
        if report.replayed:
            lines.append("Cells re-run: " + "; ".join(
                f"[{c.get('cell')}] {c.get('code')}" for c in report.replayed[:20]) + ".")
    if report.replay_off:
        lines.append("Replay was off for this run (--no-replay): no recorded cell was re-run.")
    elif report.not_replayed:
        lines.append("Not rebuilt by replay (only cells known to stay in the kernel are re-run; "
                     "a cell that writes files, runs commands or uses the network never is): "
                     + "; ".join(f"{k}: {v}" for k, v in sorted(report.not_replayed.items())[:MAX_NAMES]) + ".")
    lost = _lost(report)
    if lost:
        lines.append("Not restored: " + _names(lost) + ".")
    return lines


def restarted(how: str, report: RestoreReport) -> str:
    """Notice for a kernel that died or was restarted during or before a cell."""
    body = [f"The kernel {how} and was restarted."]
    body += restore_lines(report)
    body.append(
        "Snapshots are taken after each successful cell: anything the failed cell defined "
        "is gone. Check with code before relying on a name."
    )
    return "<kernel_restarted>\n" + "\n".join(body) + "\n</kernel_restarted>\n"


def restored_on_start(report: RestoreReport) -> str:
    """Notice appended when a session resumes and its kernel comes back from a snapshot."""
    body = ["This session was resumed in a new kernel."] + restore_lines(report)
    return "<ipython_state_restored>\n" + "\n".join(body) + "\n</ipython_state_restored>"


def cell_content(result: CellResult) -> str:
    """The text the model sees for a cell result."""
    # the kernel layer already ends `shaped` with a one-line status note for timeouts and
    # deaths; the model additionally gets the full restore notice first
    text = result.shaped if result.shaped.strip() else "(no output)"
    if result.restart is not None:
        how = {
            "died": f"died ({result.died_cause or 'unknown cause'})",
            "timeout": "did not stop after an interrupt (cell timeout)",
        }.get(result.status, f"was restarted ({result.status})")
        text = restarted(how, result.restart) + text
    return text


def overflow_report(err: Exception) -> str:
    return (
        f"The model's context window overflowed again after compaction ({err}). "
        "Use a model with a larger context window (--model), lower --keep-recent-tokens, "
        "or start a new session from a summary."
    )


_NAME_ERROR = re.compile(r"NameError: name '([A-Za-z_]\w*)' is not defined")
EXISTING_BUDGET_TOKENS = 500


def missing_name(shaped: str) -> str | None:
    """The name a NameError in a cell's output complains about, or None."""
    found = _NAME_ERROR.findall(shaped or "")
    return found[-1] if found else None


_KEY_ERROR = re.compile(r"^KeyError: (['\"])(.{1,200}?)\1\s*$", re.M)


# pandas 3's groupby says `KeyError: 'Column not found: amount'`: the key is the tail
_COLUMN_NOT_FOUND = re.compile(r"^Column not found: (.+)$")


def missing_key(shaped: str) -> str | None:
    """The key a `KeyError: 'x'` in a cell's output complains about, or None."""
    found = _KEY_ERROR.findall(shaped or "")
    if not found:
        return None
    key = found[-1][1]
    m = _COLUMN_NOT_FOUND.match(key)
    return m.group(1) if m else key


def frame_dtypes(summary: str) -> list[tuple[str, str]] | None:
    """(column, dtype) pairs in a DataFrame's listing summary (`DataFrame 9 rows x 2 cols: a
    int64, b str`), or None when the row is not a DataFrame."""
    head, sep, cols = summary.partition(" cols: ")
    if not head.startswith("DataFrame ") or not sep:
        return None
    cols = cols.split(LEVELS_MARK)[0].split("; index ")[0]
    return [(c.rsplit(" ", 1)[0], c.rsplit(" ", 1)[1]) for c in cols.split(", ")
            if " " in c and not c.startswith("+")]


def frame_pairs(rows: list[dict[str, Any]], inputs: set[str]) -> list[tuple[str, list[tuple[str, str]]]]:
    """The DataFrames of a namespace listing with their (column, dtype) pairs, inputs first."""
    return [(r["name"], pairs) for r in sorted(rows, key=lambda r: r.get("name") not in inputs)
            if (pairs := frame_dtypes(str(r.get("summary") or ""))) is not None]


def frame_columns(rows: list[dict[str, Any]], inputs: set[str]) -> list[tuple[str, list[str]]]:
    """The DataFrames of a namespace listing with their column names, inputs first."""
    return [(name, [c for c, _ in pairs]) for name, pairs in frame_pairs(rows, inputs)]


# a reduction over a table that still has text columns: pandas 3 (`groupby(...).mean()`,
# `df.mean()`) and pandas 2 (`agg function failed [how->mean,dtype->object]`)
_TEXT_REDUCTION = re.compile(
    r"^TypeError: (?:dtype '(?:str|string|object)' does not support operation "
    r"|Cannot perform reduction )'(\w+)'|^TypeError: agg function failed \[how->(\w+),"
    r"dtype->object\]", re.M)
_NUMERIC = ("int", "uint", "float", "Int", "UInt", "Float", "bool", "complex")


def text_reduction(shaped: str) -> str | None:
    """The reduction (`mean`, `sum`) a cell applied to text columns, or None."""
    found = _TEXT_REDUCTION.findall(shaped or "")
    return (found[-1][0] or found[-1][1]) if found else None


def reduction_note(op: str, rows: list[dict[str, Any]], inputs: set[str]) -> str:
    """After `mean()` met a text column: which columns of the tables are text and which are
    numbers, inputs first. Small models read "dtype 'str'" as an index problem and convert
    the index again and again (issue 33's sensors run)."""
    tables = []
    for table, pairs in frame_pairs(rows, inputs):
        text = [n for n, t in pairs if not t.startswith(_NUMERIC) and "datetime" not in t]
        nums = [n for n, t in pairs if t.startswith(_NUMERIC)]
        if text and nums:
            tables.append((table, text, nums))
    if not tables:
        return ""
    name, text, nums = tables[0]
    lines = [f"\n[`{op}()` cannot use text columns. Select the number columns first, e.g. "
             f"`{name}.groupby({text[0]!r})[{nums[0]!r}].{op}()`, or pass `numeric_only=True`:"]
    lines += [f"- {n}: text {', '.join(t)}; numbers {', '.join(x)}" for n, t, x in tables[:8]]
    return "\n".join(lines) + "]"


_ARROW = re.compile(r"^-+> ?\s*\d+ (.*)$", re.M)


def failing_line(shaped: str) -> str:
    """The last line a traceback points at (`---> 15 both = a.merge(b, ...)`), or ""."""
    found = _ARROW.findall(shaped or "")
    return found[-1] if found else ""


def key_note(key: str, rows: list[dict[str, Any]], inputs: set[str], shaped: str = "",
             where: Callable[[str], list[dict[str, str]]] | None = None) -> str:
    """After a KeyError on a name: where that column is, the column a value is in (from
    the listing's levels, else `where`: the kernel searches its frames), or the columns
    that exist. Small models read `KeyError: 'region'` from
    `orders['value'].groupby('region')` as "no such column" and then guess other names;
    `airlines.loc['F9', 'name']` fails on a carrier code that is a column's value."""
    frames = frame_columns(rows, inputs)
    having = [name for name, cols in frames if key in cols]
    line = failing_line(shaped)
    lacking = [(name, cols) for name, cols in frames if key not in cols
               and re.search(rf"(?<![\w.]){re.escape(name)}\b", line)]
    if having and lacking:  # `a.merge(b, on=[..., key])`: b is the one without it
        those = "; ".join(f"`{n}` has {', '.join(c)}" for n, c in lacking[:3])
        return (f"\n[`{key!r}` is a column of the DataFrame `{having[0]}`, but not of every "
                f"DataFrame the failing line uses: {those}. Give them that column or use "
                f"columns they have.]")
    if having:
        name = having[0]
        return (f"\n[`{key!r}` is a column of the DataFrame `{name}`; the object the failing "
                f"code indexed or grouped does not have it (a single column or Series, say). "
                f"Use the DataFrame itself: `{name}[{key!r}]`, `{name}.groupby({key!r})`.]")
    if not frames:
        return ""
    levels = _levels_of(rows, inputs)
    value = _value_note(key, levels) or _found_note(key, where)
    if value:
        return value
    lines = [f"\n[`{key!r}` is not a column of any DataFrame. Their columns:"]
    for name, cols in frames[:8]:
        few = levels.get(name, {})
        lines.append(f"- {name}: " + ", ".join(
            f"{c} ({'|'.join(few[c])})" if c in few else c for c in cols))
    return "\n".join(lines) + "\nUse one of these names.]"


def _levels_of(rows: list[dict[str, Any]], inputs: set[str]) -> dict[str, dict[str, list[str]]]:
    """table -> column -> the values its listing summary shows (few-valued text columns)."""
    return {r["name"]: lv for r in sorted(rows, key=lambda r: r.get("name") not in inputs)
            if (lv := frame_levels(str(r.get("summary") or "")))}


def _value_note(key: str, levels: dict[str, dict[str, list[str]]]) -> str:
    """After `KeyError: 'adelie'` where 'Adelie' (any case, spaces around) is a value of
    a column: it is a value, not a column or a label; filter the rows with it. The 1.5B
    model wrote `penguins.groupby('species').get_group('adelie')` and `df['Dream']`."""
    want = key.strip().casefold()
    for table, cols in levels.items():
        for col, values in cols.items():
            for v in values:
                if v[:1] in "'\"" and v[1:-1].strip().casefold() == want:
                    return (f"\n[`{key!r}` is not a column: {v} is a value of the column "
                            f"`{col}` of the DataFrame `{table}` (its values: "
                            f"{', '.join(values)}). Select those rows with "
                            f"`{table}[{table}[{col!r}] == {v}]`.]")
    return ""


def _found_note(key: str, where: Callable[[str], list[dict[str, str]]] | None) -> str:
    """`_value_note` for a value the listing does not show (a column of many values): where
    the kernel found it. Nothing when it cannot say (no search, a busy kernel)."""
    try:
        hits = where(key) if where is not None else []
    except Exception:  # noqa: BLE001 - the error alone still helps
        return ""
    if not hits:
        return ""
    h = hits[0]
    table, col, v = h["table"], h["column"], h["value"]
    return (f"\n[`{key!r}` is not a column or an index label: {v} is a value of the column "
            f"`{col}` of the DataFrame `{table}`. Select those rows with "
            f"`{table}[{table}[{col!r}] == {v}]` (or index by it first: "
            f"`{table}.set_index({col!r}).loc[{v}]`).]")


_LOADED_ROWS = re.compile(r"^- ([A-Za-z_]\w*): [^\n]*?, ([\d,]+) rows x \d+ columns", re.M)
_ROWS = re.compile(r"\b([\d,]+) rows\b")


def loaded_rows(branch: Sequence[Any]) -> dict[str, int]:
    """Input table -> the rows it held when loaded, as its description told the model."""
    return {m.group(1): int(m.group(2).replace(",", ""))
            for e in custom_entries(branch, "context_vars") if isinstance(e.content, str)
            for m in _LOADED_ROWS.finditer(e.content)}


def shrunk_inputs(rebound: set[str], loaded: dict[str, int], rows: list[dict[str, Any]]
                  ) -> dict[str, tuple[int, int]]:
    """The inputs of `rebound` that hold fewer rows now (the listing's summary) than when
    loaded: name -> (rows now, rows loaded)."""
    now = {str(r.get("name")): int(m.group(1).replace(",", "")) for r in rows
           if (m := _ROWS.search(str(r.get("summary") or "")))}
    return {n: (now[n], loaded[n]) for n in sorted(rebound)
            if n in loaded and n in now and now[n] < loaded[n]}


def shrunk_note(shrunk: dict[str, tuple[int, int]]) -> str:
    """Each shrunk input, said with both counts."""
    return "".join(
        f"\n[`{name}` now holds {now:,} rows; it held {was:,} when your input was loaded, and "
        f"this cell read the file again only in part (nrows=, skiprows=, a chunk). An answer "
        f"about the whole table needs all {was:,} rows: read it again in full, or keep a part "
        f"under another name.]" for name, (now, was) in shrunk.items())


_SELECTED = {"equal": ("equal", "equals"), "starts": ("starts", "starts with"),
             "contains": ("n_containing", "contains"), "ends": ("", "ends with")}


def written_note(found: list[dict[str, Any]], ops: dict[tuple[str, str, str], str]) -> str:
    """After a filter that selected nothing: how each text column it compared is written,
    and which values hold its literal (kernel_ext.columns.how_written). `ops`: (table,
    column, literal) -> how the condition compared ("equal", "starts", ...). Only for a
    condition no value meets, as far as the counts tell."""
    out = []
    for f in found[:2]:
        t, c, lit = f["table"], f["column"], f["literal"]
        count, phrase = _SELECTED.get(ops.get((t, c, lit), "equal"), ("equal", "equals"))
        if count and f.get(count, 0):
            continue  # that condition selects rows: another one emptied the result
        line = (f"\n[How `{t}[{c!r}]` is written: {', '.join(f['examples'])}. No value "
                f"{phrase} {lit!r}")
        if f["n_containing"]:
            line += (f"; {f['n_containing']:,} contain it, e.g. {', '.join(f['containing'])}.")
            if f.get("dates"):
                year = f"`pd.to_datetime({t}[{c!r}]).dt.year == {lit}`" if re.fullmatch(
                    r"\d{4}", lit) else f"`pd.to_datetime({t}[{c!r}])`"
                line += f" They are dates written as text: compare them as dates ({year})."
            else:
                line += " Write the condition the way the values are written."
        else:
            line += ", and none contains it: check the spelling and the column."
        out.append(line + "]")
    return "".join(out)


_LABEL_ERROR = re.compile(r"^KeyError: (-?\d+)\s*$", re.M)


def position_note(shaped: str) -> str:
    """After `KeyError: 0` on a line that indexes with `[0]`: pandas looks that up as a
    label, not a position. The 1.5B model wrote `rows.idxmin(axis=1)[0]` on a filtered
    DataFrame (whose labels no longer start at 0) and then guarded against an empty
    result three times (issue 33's survey run)."""
    found = _LABEL_ERROR.findall(shaped or "")
    if not found:
        return ""
    k = found[-1]
    if not re.search(rf"\[\s*{re.escape(k)}\s*\]", failing_line(shaped)):
        return ""
    return (f"\n[`KeyError: {k}` from `[{k}]`: on a pandas Series or DataFrame, `[{k}]` looks "
            f"up the label {k}, not the position; after a filter or a groupby the labels are "
            f"the original ones, so {k} is not among them. Use `.iloc[{k}]` for the item at "
            f"position {k}, or `.index[{k}]` for its label.]")


_ATTRIBUTE_ERROR = re.compile(r"^AttributeError: '\w+' object has no attribute '(\w+)'", re.M)
_FILE_EXTENSIONS = frozenset({"log", "txt", "csv", "tsv", "json", "jsonl", "ndjson", "md",
                              "parquet", "xml", "html", "yaml", "yml"})


def file_attribute_note(shaped: str, code: str, inputs: set[str]) -> str:
    """After `app.log` in a cell where `app` is the input variable loaded from app.log: the
    variable is the file's content. The 1.5B model wrote `re.findall(..., app.log)` and
    then re-read the file into a DataFrame to give it a `log` (issue 33's logs run)."""
    found = _ATTRIBUTE_ERROR.findall(shaped or "")
    if not found or found[-1] not in _FILE_EXTENSIONS:
        return ""
    ext = found[-1]
    for name in sorted(inputs):
        if re.search(rf"(?<![\w.]){re.escape(name)}\.{ext}\b", code):
            return (f"\n[`{name}` is the variable that already holds the content of "
                    f"{name}.{ext}: use `{name}` itself. `{name}.{ext}` asks that value for "
                    f"an attribute named `{ext}`.]")
    return ""


# the aliases notebooks import by habit; small models use them without the import
MODULE_ALIASES = {"pd": "pandas", "np": "numpy", "plt": "matplotlib.pyplot",
                  "sns": "seaborn", "mpl": "matplotlib"}
_THIRD_PARTY = frozenset({"pandas", "numpy", "matplotlib", "scipy", "seaborn", "sklearn"})


def import_line(name: str) -> str | None:
    """The import that defines `name` when it is a module (or a habitual alias of one) a
    cell used without importing it: `pd` -> `import pandas as pd`; else None."""
    if name in MODULE_ALIASES:
        return f"import {MODULE_ALIASES[name]} as {name}"
    if name in sys.stdlib_module_names or name in _THIRD_PARTY:
        return f"import {name}"
    return None


def existing_names(missing: str, rows: list[dict[str, Any]], inputs: set[str]) -> str:
    """After a NameError: the names that do exist, the input variables first (with type and
    size), so a small model stops inventing names from the prompt's wording. A module used
    without its import (`pd`) is named as such, with the line that fixes it: "use one of
    these names" would send the model looking for a variable."""
    first = [r for r in rows if r.get("name") in inputs]
    rest = [r for r in rows if r.get("name") not in inputs]
    imp = import_line(missing)
    if imp is not None:
        head = (f"\n[`{missing}` is a module this kernel has not imported: start the cell with "
                f"`{imp}` (nothing is imported for you).")
        if not first:
            return head + "]"
        lines = [head, "Your input is already in these variables (use them, do not read "
                 "files again):"] + [listing_line(r) for r in first]
        return "\n".join(lines) + "]"
    if not first and not rest:
        return f"\n[`{missing}` does not exist: no variables exist in the kernel yet.]"
    lines = [f"\n[`{missing}` does not exist. The variables that do exist"
             + (" (your input first):" if first else ":")]
    lines += [listing_line(r) for r in first]
    if rest:
        lines += listing_lines(rest, budget_tokens=EXISTING_BUDGET_TOKENS)
    return "\n".join(lines) + "\nUse one of these names.]"
