"""Issue 14.2: setup errors fail at once with one line naming the fix, before a session
exists; missing credentials are never retried; retries say so; --json always answers."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from rlm.errors import AuthError, ConfigError, RateLimited, RlmError
from rlm.llm.errormap import normalize_error
from rlm.llm.inproc_models import ScriptedLLM
from rlm.llm.providers import preflight
from rlm.llm.seam import retry_notices
from tests import rlmcli
from tests.rlmcli import call, script


def rlm(*args: str, cwd: Path, extra_path: Path | None = None,
        stdin: str | None = None) -> subprocess.CompletedProcess:
    """`rlm ARGS` through main() in this process; with `extra_path` on PYTHONPATH (a fake
    package that must shadow the real one) in a new process, the only one that imports it."""
    if extra_path is None:
        return rlmcli.rlm(*args, cwd=cwd, stdin=stdin)
    pythonpath = os.pathsep.join([str(extra_path), os.environ.get("PYTHONPATH", "")])
    return rlmcli.rlm(*args, cwd=cwd, stdin=stdin, env={"PYTHONPATH": pythonpath},
                      process=True)


def sessions(home: Path) -> list[Path]:
    root = home / "sessions"
    return sorted(root.iterdir()) if root.is_dir() else []


def poisoned_litellm(tmp_path: Path) -> Path:
    """A PYTHONPATH dir whose `litellm` cannot be imported: proves a check never got that
    far (the import alone takes seconds; a provider call would retry for 19 s)."""
    d = tmp_path / "poison"
    (d / "litellm").mkdir(parents=True)
    (d / "litellm" / "__init__.py").write_text("raise ImportError('litellm was imported')\n")
    return d


# ------------------------------------------------------------------- the check itself
def test_a_missing_key_is_one_line_naming_the_variable(monkeypatch):
    with pytest.raises(AuthError) as e:
        preflight("openai/gpt-4o-mini")
    assert str(e.value) == "OPENAI_API_KEY is not set: export it, or use --model local"
    with pytest.raises(AuthError, match="GEMINI_API_KEY \\(or GOOGLE_API_KEY\\)"):
        preflight("gemini/gemini-2.0-flash")
    monkeypatch.setenv("GOOGLE_API_KEY", "g-123")
    preflight("gemini/gemini-2.0-flash")  # either variable will do
    preflight("ollama/llama3")  # a local server needs no key


def test_scripts_are_parsed_and_local_files_checked(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        preflight(f"script:{tmp_path}/nope.json")
    (tmp_path / "bad.json").write_text("[not json")
    with pytest.raises(ConfigError, match="bad.json"):
        preflight(f"script:{tmp_path}/bad.json")
    (tmp_path / "x.gguf").write_bytes(b"NOPE" + b"\0" * 16)
    with pytest.raises(ConfigError, match="not a GGUF"):
        preflight(f"local:{tmp_path}/x.gguf")
    with pytest.raises(ConfigError, match="does not exist"):
        preflight(f"local:{tmp_path}/missing.gguf")


# ------------------------------------------------------------------ through the CLI
def test_a_run_without_its_key_fails_before_a_session_or_litellm(tmp_path, _isolated_home):
    poison = poisoned_litellm(tmp_path)
    proc = rlm("run", "hello", "--model", "openai/gpt-4o-mini", cwd=tmp_path, extra_path=poison)
    assert proc.returncode == 2
    assert proc.stderr == "rlm: error: OPENAI_API_KEY is not set: export it, or use --model local\n"
    assert sessions(_isolated_home) == []

    proc = rlm("run", "hello", "--model", "openai/gpt-4o-mini", "--json", cwd=tmp_path,
               extra_path=poison)
    out = json.loads(proc.stdout)
    assert proc.returncode == 2 and out["reason"] == "error" and out["session_id"] is None
    assert "OPENAI_API_KEY is not set" in out["error"]
    assert proc.stderr.count("OPENAI_API_KEY") == 1

    for args in (["run", "hello", "--detach"], ["chat"], ["demo"]):
        proc = rlm(*args, "--model", "anthropic/claude-3-5-haiku-latest", cwd=tmp_path,
                   extra_path=poison, stdin="")
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.strip().splitlines() == [
            "rlm: error: ANTHROPIC_API_KEY is not set: export it, or use --model local"], args
    assert sessions(_isolated_home) == []


def test_resume_checks_the_model_before_a_turn(tmp_path, _isolated_home):
    from rlm.session.store import SessionStore

    s = SessionStore.create(_isolated_home, model="openai/gpt-4o-mini", task="t")
    before = s.path.read_bytes()
    s.close()
    proc = rlm("resume", s.id, "more", cwd=tmp_path, extra_path=poisoned_litellm(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("rlm: error: OPENAI_API_KEY is not set: export it, or use "
                                   "--model local")
    assert s.path.read_bytes() == before  # nothing appended


def test_local_without_llama_cpp_fails_before_copying_the_model(tmp_path, _isolated_home):
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['llama_cpp'] = None\n")
    proc = rlm("run", "hello", "--model", "local", cwd=tmp_path, extra_path=hide)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "llama_cpp is not installed" in lines[0] and "pip install" in lines[0]
    assert sessions(_isolated_home) == []
    assert not list(_isolated_home.rglob("*.gguf*"))  # the 1.1 GB file was never joined


def test_an_auth_error_mid_run_is_told_once_and_json_still_answers(tmp_path, _isolated_home):
    model = script(tmp_path / "s.json", [{"error": "auth", "message": "Incorrect API key sk-x"}])
    proc = rlm("run", "hello", "--model", model, "--json", cwd=tmp_path)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["reason"] == "error" and "authentication failed" in out["error"]
    assert proc.returncode == 3
    assert proc.stderr.count("authentication failed") == 1  # told once, not twice
    assert "retrying" not in proc.stderr

    proc = rlm("run", "hello", "--model", model, cwd=tmp_path)
    assert (proc.stdout + proc.stderr).count("authentication failed") == 1


def test_retries_say_so(tmp_path):
    model = script(tmp_path / "s.json", [{"error": "rate_limit", "message": "slow down"},
                                         call("print(open('ok.txt').read())\nfinal('ok')")])
    (tmp_path / "ok.txt").write_text("ok")  # the task's data: the answer rests on it
    proc = rlm("run", "hello", "--model", model, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "rate limited; retrying" in proc.stdout and "(2/5)" in proc.stdout


def test_json_carries_tokens_duration_model_and_images(tmp_path, _isolated_home):
    png = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQ"
           "AAAABJRU5ErkJggg==")
    code = (f"import base64\nfrom IPython.display import Image, display\n"
            f"display(Image(data=base64.b64decode({png!r}), format='png'))")
    model = script(tmp_path / "s.json", [call(code),
                                         call("print(open('drawn.txt').read())\nfinal('drawn')")])
    (tmp_path / "drawn.txt").write_text("drawn")  # the task's data: the answer rests on it
    proc = rlm("run", "draw", "--model", model, "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in ("session_id", "session_path", "final", "turns", "reason", "cells"):
        assert key in out  # the old keys stay
    assert out["model"] == model and out["final"] == "drawn"
    t = out["tokens"]
    assert t["prompt"] > 0 and t["completion"] > 0 and t["total"] == t["prompt"] + t["completion"]
    assert isinstance(out["duration_s"], float) and "error" not in out
    assert len(out["images"]) == 1
    image = Path(out["images"][0])
    assert image.is_absolute() and image.read_bytes().startswith(b"\x89PNG")


def test_a_start_that_fails_before_its_first_turn_leaves_no_session(tmp_path, _isolated_home):
    model = script(tmp_path / "s.json", ["never asked"])
    proc = rlm("run", "t", "--model", model, "--context", str(tmp_path / "missing.csv"),
               cwd=tmp_path)
    assert proc.returncode != 0 and "missing.csv" in proc.stderr
    assert sessions(_isolated_home) == []


# --------------------------------------------------------------------------- the seam
def test_missing_credentials_are_an_auth_error_never_retried():
    import litellm

    exc = litellm.InternalServerError(
        message="OpenAIException - Missing credentials. Please pass an `api_key`, or set the "
                "`OPENAI_API_KEY` environment variable.", model="gpt-4o-mini", llm_provider="openai")
    err, transient = normalize_error(exc, "openai/gpt-4o-mini")
    assert isinstance(err, AuthError) and not transient and "OPENAI_API_KEY" in str(err)
    exc2 = litellm.APIConnectionError(message="Missing Gemini API key. Set GEMINI_API_KEY",
                                      model="g", llm_provider="gemini")
    assert isinstance(normalize_error(exc2, "gemini/g")[0], AuthError)

    waits: list[float] = []
    llm = ScriptedLLM([{"error": "auth", "message": "Missing credentials"}], sleep=waits.append)
    with pytest.raises(AuthError):
        llm.complete([{"role": "user", "content": "hi"}])
    assert waits == []


def test_retries_are_told_to_the_listener():
    told: list[str] = []
    waits: list[float] = []
    limited = {"error": "rate_limit", "message": "slow down"}
    llm = ScriptedLLM([limited, limited, "ok"], sleep=waits.append, base_delay=4.0)
    with retry_notices(told.append):
        assert llm.complete([{"role": "user", "content": "hi"}]).content == "ok"
    assert len(told) == 2 and len(waits) == 2
    assert told[0] == f"rate limited; retrying in {waits[0]:.0f} s (2/5)"
    assert told[1].startswith("rate limited; retrying in ") and told[1].endswith("(3/5)")
    llm.enqueue(*[limited] * 5)
    with pytest.raises(RateLimited, match="gave up after 5 attempts"):
        llm.complete([{"role": "user", "content": "hi"}])  # no listener: nothing told, no error


def test_local_finds_the_joined_model_in_the_shared_cache_not_in_rlm_home(tmp_path, monkeypatch):
    """The joined model lives in the user cache ($RLM_MODEL_CACHE), whatever RLM_HOME is:
    with the parts gone but the model joined, preflight passes, and it creates nothing
    (before: it looked in RLM_HOME, refused, and made RLM_HOME as a side effect)."""
    import importlib.util

    from rlm.config import Config
    from rlm.errors import ModelError
    from rlm.llm import modelfile

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "llama_cpp" else real_find_spec(name, *a))

    def no_parts():
        raise ModelError("the model parts are not installed")

    monkeypatch.setattr(modelfile, "part_paths", no_parts)
    monkeypatch.chdir(tmp_path)
    cache, home = tmp_path / "cache", tmp_path / "home"
    monkeypatch.setenv("RLM_MODEL_CACHE", str(cache))
    config = Config(home=home, model="local")
    with pytest.raises(ConfigError, match="not installed"):
        preflight("local", config)
    cache.mkdir()
    (cache / modelfile.MODEL_FILENAME).write_bytes(b"GGUF")
    preflight("local", config)
    assert not home.exists()


def test_one_table_names_the_provider_for_building_checking_and_windows(tmp_path, monkeypatch):
    """The spec's provider was decided in eight places (get_llm, preflight, the declared
    window, checkpoint rungs, the cost line, ...), each spelling `script:` / `local`. One
    table decides now, and each of those reads it."""
    from rlm.compaction.checkpoint import DEFAULT_RUNGS, default_rungs
    from rlm.llm import get_llm
    from rlm.llm.providers import PROVIDERS, declared_window, provider

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    path = tmp_path / "s.json"
    path.write_text('{"window": 4321, "replies": ["FINAL(1)"]}')
    assert [provider(s).name for s in (f"script:{path}", "local", "local:/m.gguf",
                                       "openai/gpt-4o-mini", "ollama/llama3")] == \
        ["script", "local", "local", "litellm", "litellm"]
    assert PROVIDERS[-1].matches("anything at all")  # litellm takes what no other claims
    assert type(get_llm(f"script:{path}")).__name__ == "ScriptedLLM"
    assert declared_window(f"script:{path}") == 4321
    assert declared_window("openai/gpt-4o-mini") is None
    assert default_rungs(f"script:{path}") == () and default_rungs("local") == ()
    assert default_rungs("openai/gpt-4o-mini") == DEFAULT_RUNGS
    with pytest.raises(RlmError, match="OPENAI_API_KEY"):
        preflight("openai/gpt-4o-mini")
    with pytest.raises(RlmError):
        preflight(f"script:{tmp_path / 'missing.json'}")
