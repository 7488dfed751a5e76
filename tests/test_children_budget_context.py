"""Children's budgets and children's contexts (issue 58, items 7 and 8), through the CLI.

`rlm run --model script:PARENT --sub-model script:CHILD`: every child replays the child
script from its start (each has its own model instance). Real kernels, one per child.

Budgets: the tree never promises more than it has (what the parent used + what its running
children were promised + its reserve <= the budget), a child it cannot promise a useful
budget is refused where the parent's cell sees it, the parent keeps enough to answer, and a
child that stops on its promise says what it was promised and used of which budget.

Contexts: `context=` reaches the child as the object itself (a DataFrame as a DataFrame
with equal values, an ndarray with its dtype and shape, a Series, a dict with a tuple and
an int key), and past the bound or unpicklable the parent's cell gets a clear error.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.rlmcli import call, rlm, script

pytestmark = pytest.mark.timeout(300)

FOUR = ("hs = [rlm_spawn('count to three', name=f'c{i}') for i in range(4)]\n"
        "rlm_gather(hs)\n"
        "for h in hs:\n"
        "    print('STATUS', json.dumps(h.status()))\n")


def used(tokens: int) -> dict:
    return {"input_tokens": tokens - tokens // 10, "output_tokens": tokens // 10}


def run_json(tmp_path: Path, parent: list, child: list, *args: str) -> dict:
    p = script(tmp_path / "parent.json", parent)
    c = script(tmp_path / "child.json", child)
    proc = rlm("run", "go", "--model", p, "--sub-model", c, *args, "--json", cwd=tmp_path)
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def log(session_path: str) -> list[dict]:
    return [json.loads(line) for line in Path(session_path).read_text().splitlines()]


def tool_outputs(session_path: str) -> list[str]:
    """What the parent's model was shown of each cell."""
    out = []
    for e in log(session_path):
        msg = e.get("message") or {}
        if e.get("type") == "message" and msg.get("role") == "tool":
            content = msg.get("content")
            out.append(content if isinstance(content, str) else json.dumps(content))
    return out


def statuses(session_path: str) -> dict[str, dict]:
    text = "\n".join(tool_outputs(session_path))
    rows = [json.loads(line.split("STATUS ", 1)[1]) for line in text.splitlines()
            if line.startswith("STATUS ")]
    return {r["name"]: r for r in rows}


def test_four_children_under_a_turn_budget_are_promised_only_what_remains(
        tmp_path, _isolated_home):
    """--turn-budget 20, four children of five turns each: before, each was promised half
    of what remained when it started (9 each, 36 in all), the tree ran out and the parent
    ended with no answer. Now the promises add up to at most what the parent can lend (20,
    less its one turn, less its reserve of 2), the children that could not finish say what
    they were promised and used of the tree's budget, and the parent answers."""
    out = run_json(tmp_path,
                   [call("import json\n" + FOUR), call("final('done')")],
                   [call(f"print({i})") for i in range(4)] + [call("final('counted')")],
                   "--turn-budget", "20")
    assert out["reason"] == "final" and out["final"] == "done", out
    st = statuses(out["session_path"])
    assert len(st) == 4
    promised = {n: s["promised"]["turns"] for n, s in st.items()}
    assert sum(promised.values()) <= 20 - 1 - 2, promised
    assert sum(s["turns"] for s in st.values()) + 2 <= 20
    assert any(s["state"] == "done" for s in st.values())
    for s in st.values():
        assert s["turns"] <= s["promised"]["turns"]
        if s["state"] != "done":  # stopped on its promise: the reason says so, truly
            n = s["promised"]["turns"]
            assert s["error_kind"] == "budget"
            assert (f"limit:turn_budget: {s['turns']} of the {n} turns the tree's "
                    f"--turn-budget 20 promised this child used") in s["error"], s["error"]


def test_four_children_under_a_token_budget_and_the_tree_never_passes_it(
        tmp_path, _isolated_home):
    """--token-budget 12000 with children whose calls cost 1,500 tokens each: a child's call
    can pass its promise (its tokens are known when it returns), and its reason says by how
    much and why; the reserve absorbs it, so the tree stays inside the budget and the
    parent answers."""
    out = run_json(tmp_path,
                   [{**call("import json\n" + FOUR), "usage": used(100)},
                    {**call("final('done')"), "usage": used(100)}],
                   [{**call("print(1)"), "usage": used(1500)},
                    {**call("print(2)"), "usage": used(1500)},
                    {**call("final('counted')"), "usage": used(1500)}],
                   "--token-budget", "12000")
    assert out["reason"] == "final" and out["final"] == "done", out
    assert out["tokens"]["total"] <= 12000, out["tokens"]
    st = statuses(out["session_path"])
    promised = {n: s["promised"]["tokens"] for n, s in st.items()}
    assert sum(promised.values()) <= 12000 - 100 - 1200, promised
    stopped = [s for s in st.values() if s["state"] != "done"]
    assert stopped and any(s["state"] == "done" for s in st.values())
    for s in stopped:
        n = s["promised"]["tokens"]
        assert s["error_kind"] == "budget"
        assert (f"limit:token_budget: {s['tokens']:,} of the {n:,} tokens the tree's "
                f"--token-budget 12,000 promised this child used ({s['tokens'] - n:,} over: "
                "a model call's tokens are known only when it returns)") in s["error"], \
            s["error"]


def test_a_run_past_the_token_budget_says_the_overrun_and_why(tmp_path, _isolated_home):
    """One call of 1,500 tokens under --token-budget 1000: its tokens were known only when
    it returned. The run's limit says so, never a bare "1500 of 1000"."""
    out = run_json(tmp_path, [{**call("print(1)"), "usage": used(1500)}, call("final('x')")],
                   [call("final('x')")], "--token-budget", "1000")
    assert out["reason"] == "limit:token_budget"
    assert out["limit"] == ("1,500 of the tree's --token-budget 1,000 tokens used (500 over: "
                            "a model call's tokens are known only when it returns)")


def test_the_bounds_are_checked_where_the_user_sets_them():
    from rlm.config import Config
    from rlm.errors import ConfigError

    with pytest.raises(ConfigError, match="child_context_max_bytes must be at most"):
        Config(child_context_max_bytes=64 * 1024 * 1024)
    with pytest.raises(ConfigError, match="budget_reserve must be a number in"):
        Config(budget_reserve=1.5)
    assert Config().child_context_max_bytes == 8 * 1024 * 1024


def test_a_child_the_tree_cannot_promise_anything_is_refused_in_the_cell(
        tmp_path, _isolated_home):
    """--turn-budget 3: after the parent's first turn only its reserve is left; the spawn is
    refused with the figures (before: the child started on a one-turn sliver)."""
    out = run_json(tmp_path,
                   [call("try:\n    rlm_spawn('anything')\nexcept Exception as e:\n"
                         "    print('REFUSED', e)"), call("final('done alone')")],
                   [call("final('x')")], "--turn-budget", "3")
    assert out["final"] == "done alone", out
    shown = tool_outputs(out["session_path"])[0]
    assert ("rlm_spawn refused: --turn-budget 3 cannot promise a new child the 1 turns it "
            "needs (0 free to lend): of the tree's budget of 3 turns, 1 are used, 0 "
            "promised to 0 running children and 2 kept for this agent to read their "
            "results and answer") in " ".join(shown.split()), shown
    assert not (Path(out["session_path"]).parent / "children").exists() or not any(
        (Path(out["session_path"]).parent / "children").iterdir())


CHECK = """\
import numpy as np, pandas as pd
df = pd.DataFrame({"a": range(50), "b": [f"row {i}" for i in range(50)]})
arr = np.arange(120, dtype=np.float32).reshape(30, 4)
s = pd.Series(np.linspace(0, 1, 40), name="x")
if isinstance(context, pd.DataFrame):
    ok = context.equals(df)
elif isinstance(context, pd.Series):
    ok = context.equals(s) and context.name == "x"
elif isinstance(context, np.ndarray):
    ok = (context.dtype == arr.dtype and context.shape == arr.shape
          and bool((context == arr).all()) and context.flags.writeable)
else:
    ok = context == {"t": (1, 2), 3: "x"} and isinstance(context["t"], tuple)
final(f"{type(context).__name__} {bool(ok)}")
"""


def test_a_childs_context_is_the_object_itself(tmp_path, _isolated_home):
    parent = [call(CHECK.split("if isinstance")[0]
                   + "hs = [rlm_spawn('check it', context=v) for v in "
                   "(df, arr, s, {'t': (1, 2), 3: 'x'})]\n"
                   "print('GOT', rlm_gather(hs))\n"
                   "print('Q', rlm_query('check it', context=df))"),
              call("final('ok')")]
    out = run_json(tmp_path, parent, [call(CHECK)])
    shown = tool_outputs(out["session_path"])[0]
    assert "GOT ['DataFrame True', 'ndarray True', 'Series True', 'dict True']" in shown, shown
    assert "Q DataFrame True" in shown, shown
    # what each child's model was told of its `context` is true: the kind and its shape
    told = []
    for path in (Path(out["session_path"]).parent / "children").glob("*/session.jsonl"):
        told += [e["content"] for e in log(str(path)) if e.get("custom_type") == "context_vars"]
    assert len(told) == 5
    frames = [t for t in told if "DataFrame" in t]
    assert len(frames) == 2 and all("context: pandas.DataFrame, 50 rows x 2 columns" in t
                                    for t in frames), told
    assert any("ndarray" in t and "30" in t and "4" in t for t in told), told


def test_a_context_past_the_bound_or_unpicklable_is_a_clear_error_in_the_cell(
        tmp_path, _isolated_home):
    parent = [call("import numpy as np\nbig = np.zeros(1_200_000)\n"
                   "try:\n    rlm_spawn('sum it', context=big)\nexcept Exception as e:\n"
                   "    print('BIG', type(e).__name__, e)\n"
                   "gen = (i for i in range(3))\n"
                   "try:\n    rlm_query('read it', context=gen)\nexcept Exception as e:\n"
                   "    print('GEN', type(e).__name__, e)\n"
                   "print('KEPT', big.shape, next(gen))"),
              call("final('ok')")]
    out = run_json(tmp_path, parent, [call("final('x')")])
    shown = " ".join(tool_outputs(out["session_path"])[0].split())
    assert ("BIG ValueError context= is a numpy.ndarray of about 9.2 MiB pickled, over the "
            "8.0 MiB a child's context may be (child_context_max_bytes in the rlm config): "
            "write it to a file") in shown, shown
    assert "GEN TypeError context= is a generator that cannot be moved to the child" in shown
    assert "nothing was sent, your value is unchanged" in shown
    assert "KEPT (1200000,) 0" in shown
