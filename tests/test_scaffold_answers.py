"""Issue 13 (a scaffold that holds on unseen tasks) and 14.1 (verified answers).

Scripted fenced-code model (like the local one), real kernels; assertions on what reached
the model, the events and the session log.
"""

from __future__ import annotations

import json
from pathlib import Path

from rlm.agent.context_files import load_context_files
from rlm.agent.nudge import NUDGE_FAILED, error_text
from rlm.agent.result import RunResult
from rlm.app import build_agent
from rlm.config import Config
from rlm.events import RunEnded
from rlm.llm import ScriptedLLM
from rlm.outcome import decide
from rlm.session.entries import CustomEntry
from rlm.session.store import SessionStore


class _Fenced(ScriptedLLM):
    native_tools = False  # like the small local model: fenced code, text FINAL


# the task's data, a file the grounded cells read: since issue 58 a figure is verified only
# when code that depends on the task's data printed it (rlm.agent.policy.dataflow)
FACTS = {"six": 6, "vals": [3, 9, 27], "temps": {"June": 21.5, "July": 19.0},
         "row": [1800, "West", 2253.4400000001], "cols": ["date", "category"],
         "words": ["bath", "sports"]}
D = "import json\nD = json.load(open('facts.json'))\n"


def _agent(home, llm):
    (Path.cwd() / "facts.json").write_text(json.dumps(FACTS))
    config = Config(home=home, model="script:small", cell_timeout=60)
    session = SessionStore.create(home, model="script:small", task="t")
    return build_agent(session, config, llm=llm), session


def _cell(code: str) -> str:
    return f"```python\n{code}\n```"


def _read_after_cells(home, path, replies: list[str], question: str) -> list[str]:
    """Run the scripted replies on the input file `path`: what the model read after each
    reply (the last message of each later model call)."""
    llm = _Fenced(replies)
    agent, _ = _agent(home, llm)
    with agent:
        load_context_files(agent, [path])
        list(agent.run(question))
    return [call[-1]["content"] for call in llm.calls[1:]]


def test_a_name_error_lists_the_names_that_exist_inputs_first(_isolated_home, tmp_path):
    (tmp_path / "notes.txt").write_text("filler line\n" * 50 + "the code is 4711\n")
    llm = _Fenced([_cell("helper = [1, 2, 3]\nprint(len(helper))"),
                   _cell("print(context_variables['context'][:100])"),
                   _cell("print(notes.find('code'))"), "FINAL(4711)"])
    agent, _ = _agent(_isolated_home, llm)
    with agent:
        load_context_files(agent, [tmp_path / "notes.txt"])
        list(agent.run("What is the code?"))
    after_error = llm.calls[2][-1]["content"]
    assert "NameError" in after_error
    listing = after_error[after_error.index("`context_variables` does not exist"):]
    # the input first, with its type and size; then the model's own names
    assert listing.index("- notes: str") < listing.index("- helper: list")
    assert "chars" in listing.split("- notes:")[1].splitlines()[0]


def test_a_module_used_without_its_import_gets_the_import_line(_isolated_home, tmp_path):
    """The task suite's 1.5B model wrote `pd.read_csv(...)` three times in a row after
    "`pd` does not exist ... use one of these names". A module alias (or a stdlib module)
    used without its import is named as a module, with the line that fixes it, and the
    inputs that already hold the data; a real variable name still gets the listing."""
    (tmp_path / "audit.log").write_text("2025-01-01 badge T-1 issued to Ana\n" * 20)
    # (`pd`, `np`, `plt` are defined at kernel start now: kernel_ext.aliases; `sns` is not)
    llm = _Fenced([_cell("df = sns.load_dataset('audit')"), _cell("print(re.findall('T-1', audit)[:1])"),
                   _cell("import re\nprint(re.findall('T-1', audit)[:1])"), "FINAL(T-1)"])
    agent, _ = _agent(_isolated_home, llm)
    with agent:
        load_context_files(agent, [tmp_path / "audit.log"])
        events = list(agent.run("Which badge went to Ana?"))
    first, second = llm.calls[1][-1]["content"], llm.calls[2][-1]["content"]
    assert "NameError: name 'sns' is not defined" in first
    assert "start the cell with `import seaborn as sns`" in first
    assert "Use one of these names" not in first
    assert "- audit: str" in first.split("already in these variables")[1]
    assert "`import re`" in second
    assert events[-1].final == "T-1"


def test_import_line_knows_aliases_and_modules_only():
    from rlm.agent.notices import import_line

    assert import_line("np") == "import numpy as np"
    assert import_line("plt") == "import matplotlib.pyplot as plt"
    assert import_line("json") == "import json"
    assert import_line("context_variables") is None
    assert import_line("orders") is None


def test_a_key_error_says_where_the_column_is_or_which_columns_exist(_isolated_home, tmp_path):
    """The task suite's 1.5B model wrote `orders["value"].groupby("region")`, read
    `KeyError: 'region'` as "no such column", and repeated or guessed other names for
    the rest of its turns. The result says where the column is, or lists the columns."""
    (tmp_path / "orders.csv").write_text("order_id,region,value\n1,Lyon,3.5\n2,Nice,4.0\n")
    first, second, _ = _read_after_cells(
        _isolated_home, tmp_path / "orders.csv",
        [_cell("print(orders['value'].groupby('region').median())"),
         _cell("print(orders['city'])"), _cell("print(len(orders))"), "FINAL(2)"],
        "median per region?")
    assert "KeyError: 'region'" in first
    assert "`'region'` is a column of the DataFrame `orders`" in first
    assert "`orders.groupby('region')`" in first
    assert "`'city'` is not a column of any DataFrame" in second
    # the columns, each few-valued text one with its values
    assert "- orders: order_id, region ('Lyon'|'Nice'), value" in second


def test_a_key_error_on_a_value_says_which_column_holds_it(_isolated_home, tmp_path):
    """A small model takes a value for a column or a label (`df['Dream']`,
    `groupby('species').get_group('adelie')`): the note names the column that holds it,
    spelled as the data spells it, and the filter that selects its rows."""
    (tmp_path / "orders.csv").write_text("order_id,region,value\n1,Lyon,3.5\n2,Nice,4.0\n")
    [note] = _read_after_cells(
        _isolated_home, tmp_path / "orders.csv",
        [_cell("print(orders.groupby('region').get_group('lyon'))"), "FINAL(none)"],
        "orders from lyon?")
    assert "KeyError: 'lyon'" in note
    assert ("`'lyon'` is not a column: 'Lyon' is a value of the column `region` of the "
            "DataFrame `orders` (its values: 'Lyon', 'Nice')") in note
    assert "`orders[orders['region'] == 'Lyon']`" in note


def test_a_key_error_on_a_value_of_a_many_valued_column_is_found_in_the_frame(
        _isolated_home, tmp_path):
    """The everyday suite's flights question: `airlines.loc['F9', 'name']` on a table of 16
    carriers (too many for the listing to show their values) failed with `KeyError: 'F9'`
    and the model sent it again until its turns ran out. The kernel searches its frames'
    text columns for the value (any case, spaces around) and the note names the column."""
    codes = [f"{a}{b}" for a in "ABCDEFGH" for b in "XYZ"]  # 24 carriers
    rows = "\n".join(f"{c},Airline {c}" for c in codes)
    (tmp_path / "airlines.csv").write_text("carrier,name\n" + rows + "\n")
    first, second = _read_after_cells(
        _isolated_home, tmp_path / "airlines.csv",
        [_cell("print(airlines.loc['CY', 'name'])"), _cell("print(airlines['gx'])"),
         "FINAL(none)"], "what is the name of carrier CY?")
    assert "KeyError: 'CY'" in first
    assert ("`'CY'` is not a column or an index label: 'CY' is a value of the column "
            "`carrier` of the DataFrame `airlines`") in first
    assert "`airlines[airlines['carrier'] == 'CY']`" in first
    assert "`airlines.set_index('carrier').loc['CY']`" in first
    assert "'GX' is a value of the column `carrier`" in second  # the data's spelling


def test_a_merge_on_a_column_one_side_lacks_names_that_side(_isolated_home, tmp_path):
    """issue 33's flights run: `flights.merge(worst, on=['origin', 'month'])` where `worst`
    had no `month`. The note said "use flights['month']" (flights has it), and the model
    sent the same merge again. It now names the DataFrame of the failing line without it."""
    (tmp_path / "flights.csv").write_text("origin,month,dep_delay\nEWR,1,3.0\nJFK,2,5.0\n")
    cell = ("worst = flights.groupby('origin')['dep_delay'].max().reset_index()\n"
            "both = flights.merge(worst, on=['origin', 'month'])")
    [note] = _read_after_cells(_isolated_home, tmp_path / "flights.csv",
                               [_cell(cell), "FINAL(none)"], "worst month per origin?")
    assert "KeyError: 'month'" in note
    assert "`'month'` is a column of the DataFrame `flights`, but not of every" in note
    assert "`worst` has origin, dep_delay" in note
    assert "Use the DataFrame itself" not in note


def test_a_groupby_on_a_missing_column_names_the_column_not_pandas_wording(_isolated_home, tmp_path):
    """pandas says `KeyError: 'Column not found: amount'` for `groupby(...)['amount']`; the
    note named "'Column not found: amount'" as the missing column."""
    (tmp_path / "sales.csv").write_text("region,revenue\nNorth,3.5\nSouth,4.0\n")
    [note] = _read_after_cells(
        _isolated_home, tmp_path / "sales.csv",
        [_cell("print(sales.groupby('region')['amount'].sum())"), "FINAL(none)"],
        "total per region?")
    assert "Column not found: amount" in note  # pandas' own error, kept
    assert "`'amount'` is not a column of any DataFrame" in note
    assert "- sales: region ('North'|'South'), revenue" in note


def test_a_position_read_as_a_label_says_iloc(_isolated_home, tmp_path):
    """issue 33's survey run: `rows.idxmin(axis=1)[0]` on a filtered DataFrame raised
    `KeyError: 0` (its labels no longer start at 0); the 1.5B model guarded against an
    empty result three times. The note says `[0]` is a label and names `.iloc[0]`; a
    KeyError on a line without `[0]` gets no such note."""
    (tmp_path / "survey.csv").write_text(
        "region,q1,q2\nnorth,3,4\neast,2,5\neast,4,1\n")
    note, other, _ = _read_after_cells(
        _isolated_home, tmp_path / "survey.csv",
        [_cell("east = survey[survey['region'] == 'east']\nprint(east[['q1', 'q2']].mean()[0:1])"
               "\nprint(east['q1'][0])"),
         _cell("print({5: 'a'}.get(1), {5: 'a'}.pop(0))"),
         _cell("print(east['q1'].iloc[0])"), "FINAL(2)"],
        "What is the first east q1?")
    assert "KeyError: 0" in note
    assert "`[0]` looks up the label 0, not the position" in note and "`.iloc[0]`" in note
    assert "KeyError: 0" in other and ".iloc" not in other


def test_a_mean_over_text_columns_says_which_columns_are_numbers(_isolated_home, tmp_path):
    """issue 33's sensors run: `resample('D').mean()` on a table with a text column gave
    pandas' "dtype 'str' does not support operation 'mean'"; the 1.5B model read it as an
    index problem and converted the index three times. The result names the text and the
    number columns, with a line that works."""
    (tmp_path / "sensors.csv").write_text(
        "station,timestamp,temp_c\nS1,2024-06-01 00:00,18.5\nS2,2024-06-01 02:00,19.0\n")
    note, after = _read_after_cells(
        _isolated_home, tmp_path / "sensors.csv",
        [_cell("print(sensors.groupby('timestamp').mean())"),
         _cell("print(sensors.groupby('station')['temp_c'].mean())"), "FINAL(S2)"],
        "Which station is warmer?")
    assert "does not support operation 'mean'" in note or "Cannot perform reduction" in note
    assert "`mean()` cannot use text columns" in note
    assert "`sensors.groupby('station')['temp_c'].mean()`" in note
    assert "- sensors: text station, timestamp; numbers temp_c" in note
    assert "cannot use text columns" not in after


def test_a_file_name_written_as_an_attribute_of_its_variable_is_explained(_isolated_home,
                                                                          tmp_path):
    """issue 33's logs run: app.log loads as `app`; the model wrote `re.findall(..., app.log)`,
    read "'str' object has no attribute 'log'" as "app is not loaded", and re-read the file
    into a DataFrame. The result says `app` already holds the file."""
    (tmp_path / "app.log").write_text("[ERROR] auth: boom\n[INFO] auth: ok\n")
    note, after = _read_after_cells(
        _isolated_home, tmp_path / "app.log",
        [_cell("import re\nprint(re.findall(r'ERROR', app.log))"),
         _cell("print(app.count('ERROR'))"), "FINAL(1)"], "How many errors?")
    assert "AttributeError: 'str' object has no attribute 'log'" in note
    assert "`app` is the variable that already holds the content of app.log" in note
    assert "already holds" not in after


def test_text_reduction_reads_pandas_2_and_3_wording():
    from rlm.agent.notices import text_reduction

    assert text_reduction("TypeError: dtype 'str' does not support operation 'mean'") == "mean"
    assert text_reduction("x\nTypeError: Cannot perform reduction 'sum' with string dtype") == "sum"
    assert text_reduction("TypeError: agg function failed [how->median,dtype->object]") == "median"
    assert text_reduction("TypeError: unsupported operand") is None


def test_a_final_that_is_an_error_message_is_refused_once_with_the_reason(_isolated_home):
    llm = _Fenced([_cell("import pandas as pd\ndf = pd.read_csv('sales.csv')"),
                   "FINAL(FileNotFoundError: sales.csv does not exist)",
                   _cell(D + "print(D['six'] * 7)"), "FINAL(42)"])
    agent, _ = _agent(_isolated_home, llm)
    with agent:
        # not "total?": the refusal is the host's words, so that question would still
        # ask for a sum no cell computes (QuestionOperation)
        events = list(agent.run("six times seven?"))
    refusal = llm.calls[2][-1]
    assert refusal["role"] == "user" and "Not accepted" in refusal["content"]
    assert "FileNotFoundError:" in refusal["content"]
    end = events[-1]
    assert isinstance(end, RunEnded) and end.final == "42" and end.verified is True


def test_an_error_answer_is_refused_only_once_and_then_marked_unverified(_isolated_home):
    llm = _Fenced([_cell("print(undefined_thing)"), "FINAL(NameError: name is not defined)",
                   "FINAL(NameError: name is not defined)"])
    agent, _ = _agent(_isolated_home, llm)
    with agent:
        events = list(agent.run("go"))
    end = events[-1]
    assert end.reason == "final" and end.verified is False and "error message" in end.why


def test_error_text_patterns():
    for bad in ("NameError: name 'x' is not defined", "Traceback (most recent call last):",
                "Error: no such column", "sales.csv does not exist in the current directory",
                "KeyError: 'amount'", "KeyError, the 'region' column is missing",
                "No module named 'sklearn'"):
        assert error_text(bad), bad
    for good in ("Lyon, with 431 orders", "not found", "4711", "The error rate is 3%"):
        assert error_text(good) is None, good


def test_a_final_before_any_cell_ran_is_refused_once(_isolated_home):
    llm = _Fenced(["FINAL(123)",  # a guess, no data attached, no cell run
                   _cell(D + "print(D['six'] * 7)"), "FINAL(42)"])
    agent, _ = _agent(_isolated_home, llm)
    with agent:
        events = list(agent.run("What is six times seven?"))
    assert "before running any code" in llm.calls[1][-1]["content"]
    assert events[-1].final == "42" and events[-1].verified is True


def test_a_second_answer_without_a_cell_is_accepted_but_unverified(_isolated_home):
    llm = _Fenced(["FINAL(123)", "FINAL(123)"])
    agent, session = _agent(_isolated_home, llm)
    with agent:
        events = list(agent.run("guess"))
    end = events[-1]
    assert end.final == "123" and end.verified is False and "no cell ran" in end.why
    final = [e for e in SessionStore.open(session.path).branch()
             if isinstance(e, CustomEntry) and e.custom_type == "final"]
    assert final[-1].data["verified"] is False


def test_an_answer_after_a_failed_cell_is_unverified_and_the_nudge_invites_no_answer(
        _isolated_home):
    assert "FINAL" not in NUDGE_FAILED
    llm = _Fenced([_cell("print({}['missing'])"), "It is 7.", "It is 7."])
    agent, _ = _agent(_isolated_home, llm)
    with agent:
        events = list(agent.run("what is it?"))
    assert "Your last cell failed" in llm.calls[2][-1]["content"]
    end = events[-1]
    assert end.final == "It is 7." and end.verified is False and "failed" in end.why


def test_final_from_the_kernel_is_verified_and_json_and_exit_code_follow(_isolated_home):
    llm = ScriptedLLM([{"content": "", "tool_calls": [
        {"name": "python", "arguments": {"code": D + "final(D['six'] * 7)"}}]}])
    agent, session = _agent(_isolated_home, llm)
    with agent:
        events = list(agent.run("6*7"))
    result = RunResult.from_events(session, events)
    out = json.loads(json.dumps(result.to_json()))
    assert result.verified is True and out["verified"] is True
    assert result.exit_code == out["exit_code"] == 0 and out["status"] == "answered"
    result.outcome = decide("final", None, False, "no cell ran in this run", [])
    result.verified, result.why = False, "no cell ran in this run"
    out = result.to_json()
    assert out["verified"] is False and out["unverified_why"] == "no cell ran in this run"
    assert result.exit_code == out["exit_code"] == 5 and out["status"] == "unverified"


def test_the_search_example_uses_the_questions_words_or_none():
    from rlm.agent.context_files import question_words, with_question_example

    assert question_words("Which vendor shipped the 'blue crate' last?", set()) == "blue crate"
    assert question_words("What did the lighthouse keeper record?", set()) == "lighthouse"
    assert question_words("What is in it?", set()) is None
    # a name before a longer common word: "issued" found another person's badge
    assert question_words("Which badge code was issued to Bruno Brandt?", set()) == "Brandt"
    assert question_words("What did project Orion's log say?", {"Orion"}) == "project"
    entry = CustomEntry(custom_type="context_vars", data={"names": ["log"], "long_texts": ["log"]},
                        content="Input: ...")
    assert "log.find('lighthouse')" in with_question_example(
        entry, "What did the lighthouse keeper record?").content
    assert with_question_example(entry, "What is in it?").content == "Input: ..."


def test_the_terminal_shows_an_unverified_answer_in_yellow_with_why():
    import io

    from rich.console import Console

    from rlm.cli.render import Renderer
    from rlm.events import RunEnded as End

    buf = io.StringIO()
    r = Renderer(console=Console(file=buf, width=200, color_system="standard", force_terminal=True))
    r(End(reason="final", turns=2, final="7", verified=False, why="the last cell failed"))
    out = buf.getvalue()
    assert "unverified: the last cell failed" in out and "\x1b[33m" in out  # yellow
    buf.truncate(0)
    r(End(reason="final", turns=2, final="7", verified=True))
    assert "unverified" not in buf.getvalue() and "✓ verified" in buf.getvalue()


def test_a_text_answer_must_be_grounded_in_this_runs_output(_isolated_home):
    """Before: any text answer after a successful cell counted as verified, so a made-up
    figure or a garbled reply ended the run with exit 0."""
    cases = {
        "FINAL(1,800 words)": None,                  # the printed figure, with a separator
        "FINAL(about 2253.44 more)": None,            # 2253.4400000001 at the answer's precision
        "FINAL(4242)": "figures (4242)",              # a figure no cell printed
        "FINAL(xyzzy plugh)": "words",                # nothing of it was printed
        "FINAL(West leads)": None,                    # a word the output shows
    }
    for answer, why in cases.items():
        # an ungrounded answer is refused once (see below); given again, it is accepted
        llm = _Fenced([_cell(D + "print(*D['row'])"), answer, answer])
        agent, _ = _agent(_isolated_home, llm)
        with agent:
            ended = [e for e in agent.run("count?") if isinstance(e, RunEnded)][-1]
        assert ended.verified is (why is None), (answer, ended.why)
        assert len(llm.calls) == (3 if why == "figures (4242)" else 2)  # figures: refused once
        if why is not None:
            assert why in ended.why and "output of this run" in ended.why, ended.why


def test_an_ungrounded_answer_is_refused_once_while_a_turn_is_left(_isolated_home):
    """The task suite's 1.5B model wrote answers its cells never computed (a badge number
    nobody printed, the prompt example's "Lyon, with 431 orders"). Refused once with the
    reason while a turn is left, the model computes it and answers from the output."""
    llm = _Fenced([_cell(D + "import statistics\nvals = D['vals']\nprint(len(vals))"),
                   "FINAL(Lyon, with 431 orders)",
                   _cell("print(statistics.median(vals))"), "FINAL(9)"])
    agent, session = _agent(_isolated_home, llm)
    with agent:
        ended = [e for e in agent.run("median?") if isinstance(e, RunEnded)][-1]
    refusal = llm.calls[2][-1]["content"]
    assert refusal.startswith("Not accepted yet: none of the answer's figures (431)")
    assert ended.reason == "final" and ended.final == "9" and ended.verified is True
    # not on the last turn: no turn is left to fix it, so it is accepted, unverified
    llm = _Fenced([_cell("vals = [3, 9, 27]\nprint(len(vals))"), "FINAL(431)"])
    agent, _ = _agent(_isolated_home, llm)
    agent.config = Config(home=_isolated_home, model="script:small", cell_timeout=60,
                          max_turns=2)
    with agent:
        ended = [e for e in agent.run("median?") if isinstance(e, RunEnded)][-1]
    assert ended.final == "431" and ended.verified is False and len(llm.calls) == 2


def test_an_answer_naming_what_no_output_shows_is_refused_once(_isolated_home):
    """The task suite's 1.5B model printed one mean over all rows and answered "September,
    with an average temperature of 9.95...": the figure was printed, the month never was.
    A name in the answer that neither the prompt nor any output holds is refused once."""
    llm = _Fenced([_cell(D + "temps = D['temps']\nprint(sum(temps.values()) / 2)"),
                   "FINAL(September, with an average temperature of 20.25 at the south station)",
                   _cell("print(max(temps, key=temps.get))"), "FINAL(June)"])
    agent, _ = _agent(_isolated_home, llm)
    with agent:
        ended = [e for e in agent.run("Which month was warmest at the South station?")
                 if isinstance(e, RunEnded)][-1]
    refusal = llm.calls[2][-1]["content"]
    assert refusal.startswith("Not accepted yet: the answer names September, which no output")
    assert ended.final == "June" and ended.verified is True


def test_a_figure_the_question_holds_is_not_the_answers_claim(_isolated_home):
    """The task suite's model printed `bath` and answered "bath, with the highest total
    sales value in 2025" to a question about 2025: refused for the unseen figure 2025, it
    ran the same cell again. A figure the prompt holds is the question's, not a claim. (Its
    cell computes the totals: one that printed a word alone was refused by
    QuestionOperation, rightly, for computing no total.)"""
    llm = _Fenced([_cell(D + "totals = {w: sum(D['vals']) / (i + 1) for i, w in "
                             "enumerate(D['words'])}\nprint(max(totals, key=totals.get))"),
                   "FINAL(bath, with the highest total sales value in 2025)"])
    agent, _ = _agent(_isolated_home, llm)
    with agent:
        ended = [e for e in agent.run("In 2025, what category had the highest total sales value?")
                 if isinstance(e, RunEnded)][-1]
    assert len(llm.calls) == 2
    assert ended.final.startswith("bath") and ended.verified is True


def test_a_final_when_no_cell_succeeded_is_refused_once(_isolated_home):
    """After a resample the task suite's model answered `FINAL(Audio)` although its only
    cell had failed: nothing it ran showed an answer. Refused once, like unseen figures."""
    llm = _Fenced([_cell("print({}['missing'])"), "FINAL(Audio)", _cell(D + "print(D['words'][1])"),
                   "FINAL(sports)"])
    agent, _ = _agent(_isolated_home, llm)
    with agent:
        ended = [e for e in agent.run("which category?") if isinstance(e, RunEnded)][-1]
    assert "no cell of this run has succeeded yet" in llm.calls[2][-1]["content"]
    assert ended.final == "sports" and ended.verified is True


def test_unseen_names_only_counts_new_capitalised_words():
    from rlm.agent.nudge import unseen_names

    assert unseen_names("July", "month 7: 21.5", "Which month?") == (
        "the answer names July, which no output of this run shows")
    assert unseen_names("Lyon, with 1493.88", "city\nlyon 1493.88", "Which city?") is None
    assert unseen_names("160 returned orders from Lyon", "160", "returned orders in Lyon?") is None
    assert unseen_names("The answer is 42", "42", "?") is None  # stopwords are not names
    assert unseen_names("Based on the output, Turin leads", "Turin 1200", "?") is None
    assert unseen_names("yes", "", "?") is None


def test_the_last_turn_the_limit_allows_asks_for_an_answer_from_the_cells(_isolated_home):
    """Small models plan more cells than they have turns: before the last allowed turn the
    model is told it is the last one, and its FINAL from the printed output ends the run
    (before: the limit ended it with no answer)."""
    llm = _Fenced([_cell("x = sum(range(10))\nprint(x)"), _cell("print(x * 2)"), "FINAL(90)"])
    agent, session = _agent(_isolated_home, llm)
    agent.config = Config(home=_isolated_home, model="script:small", cell_timeout=60,
                          max_turns=3)
    with agent:
        events = list(agent.run("twice the sum of 0..9?"))
    assert "last turn (3 of 3)" in llm.calls[2][-1]["content"]
    assert all("last turn" not in m["content"] for call in llm.calls[:2] for m in call
               if isinstance(m.get("content"), str))
    end = events[-1]
    assert isinstance(end, RunEnded) and end.reason == "final" and end.final == "90"
    notes = [json.loads(line) for line in (session.dir / "session.jsonl").read_text().splitlines()]
    assert any(n.get("origin") == "nudge" and "last turn" in str(n.get("message"))
               for n in notes)


def test_no_last_turn_note_without_a_cell_or_a_limit(_isolated_home):
    from rlm.agent.nudge import last_turn_note
    assert last_turn_note(3, 3, native_tools=False, cells_run=2)
    assert last_turn_note(3, 3, native_tools=False, cells_run=0) is None
    assert last_turn_note(3, 3, native_tools=True, cells_run=2) is None
    assert last_turn_note(2, 3, native_tools=False, cells_run=2) is None
    assert last_turn_note(1, 1, native_tools=False, cells_run=0) is None
    assert last_turn_note(5, None, native_tools=False, cells_run=2) is None


def test_fences_after_one_that_showed_output_wait_for_the_next_reply(_isolated_home):
    """The task suite's model wrote `print(sales.columns)` and, in the same reply, a guess
    for what to do "if the column is named category_name": both ran, the guess failed, and
    the model looped on it. Fences run in order until one prints or fails; the rest are
    recorded as not run, and the model is told why. Silent setup fences still chain.
    (Fences that surely show output are cut from the reply as it streams: tests/
    test_reply_end.py; these show theirs only when run.)"""
    reply = (_cell(D + "cols = D['cols']") + "\n\n" + _cell("sorted(cols, reverse=True)") +
             "\nIf 'category' is missing, try this:\n" + _cell("cols.index('category_name')")
             + "\n" + _cell("len(cols)") + _cell("cols.count('date')"))
    llm = _Fenced([reply, "FINAL(date and category)"])
    agent, session = _agent(_isolated_home, llm)
    with agent:
        ended = [e for e in agent.run("which columns?") if isinstance(e, RunEnded)][-1]
    tools = [e.message for e in session.branch() if getattr(e, "role", None) == "tool"]
    assert [t["content"].strip()[:40] for t in tools[:2]] == ["(no output)", "['date', 'category']"]
    assert tools[2]["content"].startswith("Not run: this block comes after a block whose output")
    assert [t["content"] for t in tools[3:]] == ["Not run.", "Not run."]  # the reason once
    assert "category_name" not in "".join(str(m.get("content")) for m in llm.calls[1]
                                          if m.get("role") != "assistant")  # never ran
    assert ended.final == "date and category" and ended.verified is True


def test_an_answer_that_nothing_was_found_is_refused_once_while_a_turn_is_left(_isolated_home):
    """Seeds 1 and 2 of the task suite's farapart item ended with "No budget information
    found" and FINAL(None) after one guessed regex matched nothing."""
    from rlm.agent.nudge import non_answer_refusal

    kw = dict(native_tools=False, turn=2, limit=6, refused=set(), cells_run=1)
    for said in ("None", "not found", "No budget information found in the log.", "N/A",
                 "The value could not be found", "unknown.", "cannot be determined"):
        assert non_answer_refusal(said, **kw), said
    for said in ("4920000", "Lyon", "None of the regions: all grew", "found 3 matches",
                 "no-show rate is 12%"):
        assert non_answer_refusal(said, **kw) is None, said
    assert non_answer_refusal("None", **{**kw, "turn": 6}) is None  # the last turn: accepted
    assert non_answer_refusal("None", **{**kw, "cells_run": 0}) is None  # the no-cell nudge

    llm = _Fenced([_cell("print('Budget information not found in the log records.')"),
                   "FINAL(None)", _cell(D + "print(D['six'] - 2)"), "FINAL(4)"])
    agent, _ = _agent(_isolated_home, llm)
    with agent:
        ended = [e for e in agent.run("budget?") if isinstance(e, RunEnded)][-1]
    assert llm.calls[2][-1]["content"].startswith("Not accepted yet: your answer says nothing "
                                                  "was found (None)")
    assert ended.final == "4" and ended.verified is True


def test_a_reply_repeating_the_failing_cell_is_sampled_again_not_run(_isolated_home):
    """The task suite's 1.5B model sent one failing groupby four times in a row whatever
    the notes said: each copy in the context made the next more likely. A reply whose first
    cell is the cell that just failed is not run and never reaches the model: it is logged
    hidden and sampled again at RESAMPLE_TEMPERATURE."""
    from rlm.agent.loop import RESAMPLE_TEMPERATURE

    bad = _cell("print({}['missing'])")
    llm = _Fenced([bad, bad, _cell(D + "print(D['six'] - 4)"), "FINAL(2)"])
    agent, session = _agent(_isolated_home, llm)
    with agent:
        events = list(agent.run("go"))
    ended = events[-1]
    temps = [r["temperature"] for r in llm.requests]
    configured = agent.config.temperature
    assert temps == [configured, configured, RESAMPLE_TEMPERATURE, configured]
    # the rejected reply is not in the context, and the resample is drawn without the
    # failed exchange: a note of what failed in its place (rlm.agent.policy.retry)
    assert llm.calls[2][:-1] == llm.calls[1][:-2]
    assert llm.calls[2][-1]['content'].startswith('A cell you sent failed')
    assert ended.final == "2" and ended.verified is True
    branch = SessionStore.open(session.path).branch()
    resampled = [e for e in branch if isinstance(e, CustomEntry) and e.custom_type == "resampled"]
    assert len(resampled) == 1 and resampled[0].content is None
    assert "['missing']" in resampled[0].data["content"]
    cells = [e for e in branch if getattr(e, "role", None) == "tool"]
    assert len(cells) == 2  # the failing cell ran once, then the new one
    assert any("sampling a new reply" in getattr(e, "text", "") for e in events)


def test_a_cell_repeated_through_every_resample_runs_and_raises_the_temperature(_isolated_home):
    """When every resample repeats the failing cell too, it runs once more with the note
    that it repeats, and the next call samples at LOOP_BREAK_TEMPERATURE."""
    from rlm.agent.loop import LOOP_BREAK_TEMPERATURE, RESAMPLE_TEMPERATURE, RESAMPLES
    from rlm.agent.modelcall import RESAMPLE_SEED_BASE

    bad = _cell("print({}['missing'])")
    llm = _Fenced([bad] * (RESAMPLES + 2) + [_cell("print(1 + 1)"), "FINAL(2)"])
    agent, _ = _agent(_isolated_home, llm)
    with agent:
        ended = [e for e in agent.run("go") if isinstance(e, RunEnded)][-1]
    temps = [r["temperature"] for r in llm.requests]
    c = agent.config.temperature
    assert temps == [c, c] + [RESAMPLE_TEMPERATURE] * RESAMPLES + [LOOP_BREAK_TEMPERATURE, c]
    # each resample draws with a seed of its own (with the provider's one seed the second
    # resample was the first again); the turn's own calls keep the provider's
    seeds = [r["seed"] for r in llm.requests]
    assert seeds == [None, None] + [RESAMPLE_SEED_BASE + i for i in range(1, RESAMPLES + 1)] \
        + [None, None]
    assert "exactly the same code" in llm.calls[-2][-1]["content"]
    assert ended.final == "2"


def test_a_cell_that_already_ran_twice_is_sampled_again_not_run(_isolated_home):
    """`rlm run "find which region grew fastest in sales.csv"` on the local model sent one
    successful cell (printing a row label, 340) sixteen times in a row: its output could
    not change. The first repeat of a successful cell runs, with a note (after a refusal
    the model re-runs its cell to read the output again); a further repeat is sampled
    again; if every resample repeats it, it runs with the note and the temperature rises."""
    from rlm.agent.loop import LOOP_BREAK_TEMPERATURE, RESAMPLE_TEMPERATURE, RESAMPLES

    same = _cell("x = 6 * 7\nprint(x)")
    llm = _Fenced([same, same, same] + [same] * RESAMPLES + ["FINAL(42)"])
    agent, session = _agent(_isolated_home, llm)
    with agent:
        events = list(agent.run("go"))
    c = agent.config.temperature
    temps = [r["temperature"] for r in llm.requests]
    assert temps == [c, c, c] + [RESAMPLE_TEMPERATURE] * RESAMPLES + [LOOP_BREAK_TEMPERATURE]
    branch = SessionStore.open(session.path).branch()
    resampled = [e for e in branch if isinstance(e, CustomEntry) and e.custom_type == "resampled"]
    assert len(resampled) == RESAMPLES
    assert all("already ran twice in this run" in e.data["why"] for e in resampled)
    cells = [e for e in branch if getattr(e, "role", None) == "tool"]
    assert len(cells) == 3  # the first run, the first repeat, the one that outlasted resamples
    assert "same as one you already ran" not in cells[0].message["content"]
    assert all("same as one you already ran" in e.message["content"] for e in cells[1:])
    assert events[-1].final == "42"
