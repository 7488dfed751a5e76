"""Issue 14.6: where rlm keeps things when nothing is configured. Sessions go to the
user's data directory (not ./.rlm in every working directory), the offline model to the
user's cache; RLM_HOME and RLM_MODEL_CACHE override. conftest points XDG_* at tmp_path,
so platformdirs resolves inside the test's folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rlm.paths import model_cache, rlm_home
from tests.rlmcli import ANSWERED


def test_defaults_are_the_user_dirs_not_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.delenv("RLM_HOME")
    monkeypatch.delenv("RLM_MODEL_CACHE")
    assert rlm_home() == tmp_path / "xdg" / "xdg_data_home" / "rlm"
    assert model_cache() == tmp_path / "xdg" / "xdg_cache_home" / "rlm" / "models"


def test_env_vars_override(tmp_path, monkeypatch):
    monkeypatch.setenv("RLM_HOME", str(tmp_path / "h"))
    monkeypatch.setenv("RLM_MODEL_CACHE", str(tmp_path / "m"))
    assert rlm_home() == tmp_path / "h"
    assert model_cache() == tmp_path / "m"


def test_rlm_run_without_rlm_home_leaves_the_working_directory_clean(tmp_path, monkeypatch):
    """Through the real entry point: the session lands in the data dir, nothing in cwd."""
    monkeypatch.delenv("RLM_HOME")
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([{"content": "", "tool_calls": [
        {"name": "python", "arguments": {"code": "final('ok')"}}]}]))
    work = tmp_path / "project"
    work.mkdir()
    out = subprocess.run([sys.executable, "-m", "rlm", "run", "hi", "--model", f"script:{script}",
                          "--json"], cwd=work, capture_output=True, text=True, timeout=120)
    assert out.returncode in ANSWERED, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    data_home = tmp_path / "xdg" / "xdg_data_home" / "rlm"
    assert Path(result["session_path"]).is_relative_to(data_home / "sessions")
    assert list(work.iterdir()) == []
