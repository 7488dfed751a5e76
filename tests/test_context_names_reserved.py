"""Issue 15.9: a --context file never shadows a builtin, a keyword or the kernel's API."""

from __future__ import annotations

import builtins
import json
from pathlib import Path

from rlm.agent.context_files import KERNEL_API, load_context_files, variable_name
from rlm.app import build_agent
from rlm.config import Config
from rlm.llm import ScriptedLLM
from rlm.session.store import SessionStore
from tests.rlmcli import call


def test_reserved_names_get_their_extension():
    taken: set[str] = set()
    got = [variable_name(Path(n), taken) for n in
           ("final.csv", "print.txt", "open.txt", "compact.json", "llm_query.txt", "list", "sales.csv")]
    assert got == ["final_csv", "print_txt", "open_txt", "compact_json", "llm_query_txt",
                   "list_data", "sales"]
    assert not set(got) & (set(dir(builtins)) | KERNEL_API)


def test_the_host_list_matches_the_kernel_api():
    from kernel_ext.api import NAMES

    assert set(NAMES) == KERNEL_API


def test_files_named_like_the_api_load_and_final_still_works(_isolated_home, tmp_path):
    (tmp_path / "final.csv").write_text("a,b\n1,2\n3,4\n")
    (tmp_path / "print.txt").write_text("printed text")
    (tmp_path / "open.txt").write_text("open text")
    llm = ScriptedLLM([call("print(final_csv.shape, print_txt, open_txt, callable(open))"),
                       call("final(str(final_csv.a.sum()))")])
    session = SessionStore.create(_isolated_home, model="script:inline", task="t")
    agent = build_agent(session, Config(home=_isolated_home, model="script:inline", cell_timeout=60),
                  llm=llm)
    with agent:
        names = load_context_files(agent, [tmp_path / n for n in ("final.csv", "print.txt", "open.txt")])
        events = list(agent.run("sum column a"))
    assert names == ["final_csv", "print_txt", "open_txt"]
    assert events[-1].reason == "final" and events[-1].final == "4"
    cells = [e for e in session.branch() if e.type == "message" and e.message["role"] == "tool"]
    assert "(2, 2) printed text open text True" in cells[0].message["content"]
    ctx = next(e for e in session.branch() if e.type == "custom" and e.custom_type == "context_vars")
    assert "final.csv -> final_csv" in ctx.content and "print.txt -> print_txt" in ctx.content
    assert json.dumps(ctx.data["names"]) == '["final_csv", "print_txt", "open_txt"]'
