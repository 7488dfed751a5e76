"""`rlm memory show|log|init` and `--no-memory` on the path a user takes."""

from __future__ import annotations

import json

from rlm.cli.common import options_from_args
from rlm.cli.main import build_parser, main
from rlm.memory import MEMORY_MARK, ProjectMemory


def test_memory_commands(tmp_path, capsys):
    assert main(["memory", "show", "--dir", str(tmp_path)]) == 1
    assert "`rlm memory init` creates it" in capsys.readouterr().err
    assert main(["memory", "init", "--dir", str(tmp_path)]) == 0
    assert "created state.md, conventions.md" in capsys.readouterr().out
    mem = ProjectMemory(tmp_path)
    mem.update("conventions", "- dates are UTC", "merge", stated_by="user")
    mem.log("fixed", "clean.py", "dates parsed as UTC")
    assert main(["memory", "--dir", str(tmp_path)]) == 0  # show is the default
    out = capsys.readouterr().out
    assert out.startswith(MEMORY_MARK) and "- dates are UTC (stated_by: user" in out
    assert main(["memory", "log", "--dir", str(tmp_path), "--json"]) == 0
    lines = json.loads(capsys.readouterr().out)["lines"]
    assert [(d["action"], d["target"]) for d in lines] == [("fixed", "clean.py")]
    assert main(["memory", "log", "--dir", str(tmp_path)]) == 0
    assert "fixed  clean.py  dates parsed as UTC" in capsys.readouterr().out


def test_no_memory_is_a_recorded_run_option():
    for argv, want in ((["run", "x", "--no-memory"], False), (["resume", "last", "--memory"], True),
                       (["chat"], None)):
        opts = options_from_args(build_parser().parse_args(argv))
        assert opts.overrides.get("memory") is want
        assert opts.config().memory is (True if want is None else want)  # default: on
