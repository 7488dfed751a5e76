"""What each column of a table holds (kernel_ext.columns), as the model reads it before its
first cell (`describe_value`) and in the one-line summary (`<ipython_state>`): levels of
few-valued columns, counts and examples of many-valued ones, ranges, missing values; at a
bounded size on wide tables and a bounded cost on long ones; never raising."""

from __future__ import annotations

import pytest

from kernel_ext import columns
from kernel_ext.describe import LEVELS_MARK, SUMMARY_CHARS, describe_value, frame_levels, summary
from rlm.agent.notices import frame_dtypes

pd = pytest.importorskip("pandas")
np = pytest.importorskip("numpy")


def _penguins():
    n = 344
    return pd.DataFrame({
        "species": ["Adelie"] * 152 + ["Gentoo"] * 124 + ["Chinstrap"] * 68,
        "island": (["Biscoe"] * 168 + ["Dream"] * 124 + ["Torgersen"] * 52),
        "bill_length_mm": [np.nan, np.nan] + [32.1 + i * 0.08 for i in range(n - 2)],
        "sex": [None] * 11 + ["male", "female"] * 166 + ["male"],
        "year": [2007, 2008, 2009, 2009] * 86,
        "name": [f"bird {i}" for i in range(n)],
        "seen": pd.date_range("2007-11-09", periods=n, freq="D").strftime("%Y-%m-%d"),
        "when": pd.date_range("2007-11-09", periods=n, freq="D"),
    })


def test_a_table_lists_levels_ranges_and_missing():
    lines = columns.column_lines(_penguins())
    assert lines == [
        "  species (str): 3 values: 'Adelie', 'Gentoo', 'Chinstrap'",
        "  island (str): 3 values: 'Biscoe', 'Dream', 'Torgersen'",
        "  bill_length_mm (float64): 32.1 .. 59.38; some values missing (NaN)",
        "  sex (str): 2 values: 'male', 'female'; some values missing (NaN)",
        "  year (int64): 2007 .. 2009; 3 values: 2009, 2007, 2008",
        "  name (str): 344 distinct, e.g. 'bird 0', 'bird 1', 'bird 2'",
        "  seen (str): dates as text, '2007-11-09' .. '2008-10-17', 344 distinct",
        "  when (datetime64[us]): 2007-11-09 .. 2008-10-17",
    ]
    d = describe_value("penguins", _penguins())
    assert d["columns"] == "\n".join(lines) and d["size"] == "344 rows x 8 columns"
    assert d["preview"].splitlines()[0].split()[:2] == ["species", "island"]  # first rows


def test_a_wide_table_stays_within_its_cap_and_counts_the_rest():
    wide = pd.DataFrame({f"col_{i}": ["level " + "x" * 80 + str(i % 3)] * 5 for i in range(300)})
    lines = columns.column_lines(wide)
    text = "\n".join(lines)
    assert len(text) <= columns.BLOCK_CHARS
    assert lines[-1].startswith("  ... and ") and "more columns" in lines[-1]
    shown = sum(1 for x in lines if x.startswith("  col_"))
    assert lines[-1].startswith(f"  ... and {300 - shown} more columns: col_{shown} (")
    # a long value is cut outside its quotes: never a complete-looking wrong literal
    assert "'level xxxx" in lines[0] and lines[0].endswith("x'...")
    d = describe_value("wide", wide)
    assert len(d["columns"]) + len(d["preview"]) < 3000


class _Unhashable:
    def __hash__(self):
        raise RuntimeError("no hash")

    def __repr__(self):
        return "U()"


def test_odd_columns_are_described_not_raised():
    odd = pd.DataFrame({
        "lists": [[1], [2, 3], [1], [4]],
        "dicts": [{"a": 1}, {}, {"b": 2}, {"a": 1}],
        "objs": [_Unhashable()] * 4,
        "mixed": [1, "a", 2.5, None],
        "nan": [np.nan] * 4,
        "none": [None] * 4,
        "cat": pd.Categorical(["a", "b", "a", "a"], categories=["a", "b", "zzz"]),
        "flag": [True, False, True, True],
        "inf": [1.0, np.inf, -np.inf, 2.0],
    })
    odd["dup"] = 1
    odd.insert(0, "dup", "x", allow_duplicates=True)  # two columns of one name
    lines = columns.column_lines(odd)
    by = {x.split(" (")[0].strip(): x for x in lines}
    assert by["lists"].startswith("  lists (object): 3 values: [1], ")  # pandas hashes these
    assert "{'a': 1}" in by["dicts"]
    assert by["objs"] == "  objs (object): (not described: RuntimeError)"
    assert by["nan"].endswith("all missing (NaN)") and by["none"].endswith("all missing (NaN)")
    assert "'a', 'b'" in by["cat"] and "zzz" not in by["cat"]  # unused level
    assert "True, False" in by["flag"]
    assert "-inf .. inf" in by["inf"]
    assert "; some values missing (NaN)" in by["mixed"]
    assert len(lines) == odd.shape[1]
    for v in (odd, odd.set_index(["flag", "inf"], drop=False)):
        summary(v), describe_value("odd", v)  # no raise

    class Fake:  # shaped like a DataFrame, but nothing works
        shape = (3, 2)
        columns = ["a", "b"]

        def head(self, n):
            raise RuntimeError("no")

        @property
        def dtypes(self):
            raise RuntimeError("no")

    assert columns.column_lines(Fake()) == ["  (columns not described: RuntimeError)"]
    assert "preview failed" in describe_value("fake", Fake())["preview"]


def test_a_long_table_is_read_on_a_sample_and_says_so():
    n = 400_000
    rng = np.random.default_rng(3)
    big = pd.DataFrame({"id": np.arange(n).astype(str), "x": rng.normal(size=n)}
                       | {f"kind{i}": rng.choice(["a", "b"], n) for i in range(4)})
    lines = columns.column_lines(big)
    assert lines[0].startswith("  (too many rows to read all: facts marked ~ or 'in the sample'")
    kind = next(x for x in lines if x.startswith("  kind0"))
    assert "2 values in the sample: " in kind and "(" not in kind.split(":", 1)[1]
    assert "distinct in the sample, e.g." in next(x for x in lines if x.startswith("  id"))
    # numbers are cheap: read in full
    assert next(x for x in lines if x.startswith("  x")).count("in the sample") == 0


def test_the_summary_line_carries_levels_within_its_cap():
    df = _penguins()
    line = summary(df)
    head, mark, levels = line.partition(LEVELS_MARK)
    assert head.startswith("DataFrame 344 rows x 8 cols: species str, island str")
    assert levels == ("species 'Adelie'|'Gentoo'|'Chinstrap', island 'Biscoe'|'Dream'|'Torgersen', "
                      "sex 'male'|'female'")
    assert frame_levels(line) == {"species": ["'Adelie'", "'Gentoo'", "'Chinstrap'"],
                                  "island": ["'Biscoe'", "'Dream'", "'Torgersen'"],
                                  "sex": ["'male'", "'female'"]}
    assert frame_dtypes(line)[-1] == ("when", "datetime64[us]")  # the dtypes still parse
    # many few-valued columns: whole entries only, within the budget
    many = pd.DataFrame({f"c{i}": [f"val{i}_a", f"val{i}_b"] * 5 for i in range(60)})
    line = summary(many)
    levels = line.partition(LEVELS_MARK)[2]
    assert len(levels) <= columns.BRIEF_CHARS and levels.endswith("'")
    assert len(line) <= SUMMARY_CHARS + len(LEVELS_MARK) + columns.BRIEF_CHARS
    assert all(len(v) == 2 for v in frame_levels(line).values())
    # a frame with no few-valued text column: no mark
    assert LEVELS_MARK not in summary(pd.DataFrame({"x": range(50), "id": [str(i) for i in range(50)]}))


def test_where_a_value_is_found_in_text_and_category_columns_only():
    """kernel_ext.columns.where_value: after `KeyError: 'F9'` the kernel names the text
    column holding the value, exactly or but for case and spaces; numbers, private names
    and objects that are not frames are not searched."""
    from kernel_ext.columns import where_value

    frame = pd.DataFrame({"code": [f"C{i}" for i in range(5000)] + [" f9 "],
                          "n": range(5001), "kind": pd.Categorical(["x"] * 5000 + ["Jet"])})
    found = where_value("F9", {"airlines": frame, "_hidden": frame, "s": frame["code"]})
    assert found == [{"table": "airlines", "column": "code", "value": "' f9 '"}]
    assert where_value("jet", {"t": frame}) == [{"table": "t", "column": "kind",
                                                 "value": "'Jet'"}]
    assert where_value("4999", {"t": frame}) == []  # a number is a label, not this search
    assert where_value("C17", {"t": frame})[0]["value"] == "'C17'"
