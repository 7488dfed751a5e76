"""Issue 26 item 7: a file's variable name is normalised as Python normalises identifiers
(NFKC) before the reserved-name check, and named files load into fresh names without
touching anything else in the user's namespace (rlm/agent/context_files.py)."""

from __future__ import annotations

import builtins
from pathlib import Path

from rlm import app
from rlm.agent.context_files import KERNEL_API, load_context_files, variable_name
from rlm.config import Config
from rlm.llm import ScriptedLLM
from rlm.session.store import SessionStore


def test_look_alikes_cannot_shadow_builtins_or_the_kernel_api():
    taken: set[str] = set()
    got = [variable_name(Path(n), taken) for n in
           ("\uff50\uff52\uff49\uff4e\uff54.txt", "\ufb01nal_var.txt", "a\u00b2b.txt",
            "\u2460\u2461.csv", "caf\u00e9.csv")]
    assert got == ["print_txt", "final_var_txt", "a2b", "data_12", "café"]
    for name in got:
        assert name.isidentifier() and name not in set(dir(builtins)) | KERNEL_API
        compile(f"{name} = 1", "<n>", "exec")  # no SyntaxError can abort a run


def test_a_later_file_gets_a_fresh_name_and_the_loader_touches_nothing_else(_isolated_home,
                                                                             tmp_path):
    (tmp_path / "result.csv").write_text("a\n1\n2\n")
    (tmp_path / "\uff50\uff52\uff49\uff4e\uff54.txt").write_text("look-alike")
    (tmp_path / "a\u00b2b.txt").write_text("superscript")
    probe = "print(result, _pd, _f, _j, callable(print), print_txt, a2b, result_2.a.sum())"
    llm = ScriptedLLM(["unused"])
    session = SessionStore.create(_isolated_home, model="script:inline", task="t")
    cfg = Config(home=_isolated_home, model="script:inline", cell_timeout=60)
    agent = app.build_agent(session, cfg, entry="run", llm=llm)
    with agent:
        agent.start()
        assert agent.executor is not None
        agent.executor.execute("result = 42\n_pd = _f = _j = 'mine'")
        names = load_context_files(agent, [tmp_path / "result.csv",
                                           tmp_path / "\uff50\uff52\uff49\uff4e\uff54.txt",
                                           tmp_path / "a\u00b2b.txt"])
        shown = agent.executor.execute(probe).shaped.strip()
    assert names == ["result_2", "print_txt", "a2b"]
    assert shown == "42 mine mine mine True look-alike superscript 3"
