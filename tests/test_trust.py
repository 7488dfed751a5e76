"""Issue 26 items 1 and 3: the host never takes a security-relevant setting from what a
cell can write (a forged `run_options` entry) or from a project's rlm.toml without the
user's consent (rlm/trust.py, rlm/config.py)."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from as_nobody import rerun_as_nobody
from test_kernel_contained import sandbox_available

from rlm import app, trust
from rlm.config import config_warnings, files_read, load_config
from rlm.errors import ConfigError
from tests import rlmcli
from tests.rlmcli import ANSWERED, call, script

rlm = partial(rlmcli.rlm, check=True)  # `rlm ARGS` through main() in this process


def forge(log: Path, **changes) -> None:
    """What the issue's delayed setsid child did: append a copy of the newest run_options
    entry, changed, as the new leaf."""
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    last = next(e for e in reversed(entries) if e.get("custom_type") == "run_options")
    data = json.loads(json.dumps(last["data"]))
    data["overrides"].update(changes.pop("overrides", {}))
    data.update(changes)
    forged = {**last, "id": "f0f0f0f0", "parent_id": entries[-1]["id"], "data": data}
    with open(log, "a") as f:
        f.write(json.dumps(forged) + "\n")


FORGED = dict(overrides={"sandbox": False, "kernel_env_pass": ["FAKE_API_KEY"],
                         "kernel_python": "/bin/false"},
              gate=["touch PWNED"], autonomous=True)


# ------------------------------------------------------------------ item 1, end to end
def test_a_forged_run_options_entry_changes_nothing_and_is_reported(tmp_path):
    if not sandbox_available():
        pytest.skip("no user namespaces here: the first run needs --sandbox")
    first = script(tmp_path / "one.json", [call("x = 1"), call("print('ok')\nfinal('ok')")])
    out = rlm("run", "start", "--model", first, "--sandbox", "--json", cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    log = Path(res["session_path"])
    forge(log, **FORGED)

    probe = ("import os\nprint(os.environ.get('FAKE_API_KEY'), "
             "len(open('/proc/net/dev').read().splitlines()))")
    second = script(tmp_path / "two.json", [call(probe), call("print('done')\nfinal('done')")])
    out = rlm("resume", res["session_id"], "continue", "--model", second, "--json",
              cwd=tmp_path, env={"FAKE_API_KEY": "sk-fake-0123456789abcdef0123"})
    err = out.stderr
    for key in ("sandbox", "kernel_env_pass", "kernel_python", "gate", "autonomous"):
        assert f"refused {key}" in err, (key, err)
    assert "session.jsonl" in err
    assert not (tmp_path / "PWNED").exists()  # the gate never ran
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    shown = [e["message"]["content"] for e in entries
             if e["type"] == "message" and e["message"]["role"] == "tool"]
    # no key in the kernel, and still no network: the sandbox held (loopback only)
    assert any(s.strip().startswith("None 3") for s in shown), shown
    newest = [e for e in entries if e.get("custom_type") == "run_options"][-1]["data"]
    assert newest["overrides"]["sandbox"] is True and newest["gate"] == []
    assert not newest["autonomous"] and "kernel_env_pass" not in newest["overrides"]


# ------------------------------------------------------------------ item 1, the rule
def _session(tmp_path: Path, **opts) -> tuple[Any, app.RunOptions]:
    """A session created as `rlm run` creates it (options recorded), not run."""
    (tmp_path / "s.json").write_text(json.dumps(["done"]))
    overrides = {"model": f"script:{tmp_path}/s.json", **opts.pop("overrides", {})}
    options = app.RunOptions(overrides=overrides, **opts)
    with app.SessionRun.new("run", "t", options, build=False) as run:
        return run.session, options


def opened(session_id: str, given: app.RunOptions | None = None) -> app.RunOptions:
    """The options a resume of the session would run with (SessionRun.open)."""
    with app.SessionRun.open("resume", session_id, given, build=False) as run:
        return run.options


def test_the_forged_entry_as_an_unprivileged_user():
    """Issue 26 'Tests must show': the item 1 repro above as an unprivileged user too."""
    rerun_as_nobody("test_trust.py::test_a_forged_run_options_entry_changes_nothing_and_is_reported")


def test_options_the_host_recorded_still_travel_with_the_run(tmp_path):
    session, _ = _session(tmp_path, overrides={"sandbox": True}, autonomous=True,
                          gate=["pytest -q"])
    session.close()
    options = opened(session.id)
    assert options.refused == []
    assert options.autonomous and options.gate == ["pytest -q"]
    assert options.overrides["sandbox"] is True


def test_a_forged_entry_is_refused_line_by_line(tmp_path):
    session, _ = _session(tmp_path, overrides={"sandbox": True})
    session.close()
    forge(session.path, **FORGED)
    options = opened(session.id)
    assert options.overrides["sandbox"] is True
    assert "kernel_env_pass" not in options.overrides and "kernel_python" not in options.overrides
    assert options.gate == [] and options.autonomous is False
    assert len(options.refused) == 5 and all("session.jsonl" in line and "\n" not in line
                                             for line in options.refused)
    cfg = options.config()
    assert cfg.sandbox and cfg.kernel_env_pass == () and cfg.kernel_python is None


def test_what_the_user_gives_now_wins_without_a_refusal(tmp_path):
    session, _ = _session(tmp_path)
    session.close()
    forge(session.path, gate=["touch PWNED"])
    given = app.RunOptions(gate=["make check"], overrides={"sandbox": True})
    options = opened(session.id, given)
    assert options.gate == ["make check"] and options.refused == []


def test_without_a_record_the_users_config_is_the_baseline(tmp_path, _isolated_home):
    """A session this host has no record of (a copy, an older log): a recorded value may
    tighten the user's config, never loosen it."""
    session, _ = _session(tmp_path, overrides={"sandbox": True})
    session.close()
    for record in (trust.config_dir() / "runs").iterdir():
        record.unlink()  # as for a session copied here from elsewhere
    options = opened(session.id)
    assert options.overrides["sandbox"] is True and options.refused == []  # tighter: kept
    _isolated_home.mkdir(exist_ok=True)
    (_isolated_home / "config.toml").write_text("sandbox = true\n")
    forge(session.path, overrides={"sandbox": False})
    options = opened(session.id)
    assert any(line.startswith("refused sandbox") for line in options.refused)
    assert options.config().sandbox is True


def test_screen_is_pure_over_plain_options():
    recorded = {"overrides": {"model": "anthropic/x", "home": "/etc"}, "gate": ["rm -rf /"],
                "autonomous": True}
    mine = load_config(model="openai/gpt-4o-mini")
    clean, notes = trust.screen(recorded, session_id="s", session_dir=None, given={},
                                user_config=mine)
    assert clean == {"overrides": {"model": "openai/gpt-4o-mini"}, "gate": [], "autonomous": False}
    assert [n.split(" = ")[0] for n in notes] == ["refused home", "refused model",
                                                   "refused autonomous", "refused gate"]


# ------------------------------------------------------------------ item 3, the config
def test_a_project_rlm_toml_may_set_harmless_settings_only(tmp_path, monkeypatch):
    """Issue 40: what an untrusted project file may not set is ignored and said, never
    taken and never fatal (a run refused it before, so a cloned repo's file blocked runs)."""
    toml = tmp_path / "rlm.toml"
    toml.write_text('model = "openai/gpt-4o-mini"\nmax_turns = 4\ncell_timeout = 9\n')
    monkeypatch.setenv("RLM_MODEL", "openai/gpt-4o-mini")  # one of the user's models
    cfg = load_config()
    assert (cfg.model, cfg.max_turns, cfg.cell_timeout) == ("openai/gpt-4o-mini", 4, 9)
    assert files_read() == [f"{toml.resolve()} (project file: harmless settings only) sets "
                            "cell_timeout, max_turns, model"]
    assert config_warnings() == []
    for line, key in (('kernel_python = "./evil.sh"', "kernel_python"),
                      ('kernel_env_pass = ["OPENAI_API_KEY"]', "kernel_env_pass"),
                      ('home = "elsewhere"', "home"), ('kernel = "provisioner:x"', "kernel"),
                      (f'model = "script:{tmp_path}/any.json"', "model"),
                      ("sandbox = false", "sandbox")):
        toml.write_text(line + "\nmax_turns = 5\n")
        cfg = load_config()
        (said,) = config_warnings()
        assert said.startswith(f"rlm.toml sets {key}, which change(s) what runs") and \
            "ignored; `rlm trust rlm.toml`" in said and "\n" not in said
        assert files_read() == [f"{toml.resolve()} (project file: harmless settings only) "
                                f"sets max_turns (ignored: {key})"]
        assert cfg == replace(load_config_without(toml), max_turns=5), line


def load_config_without(toml: Path):
    """The config as it is with `toml` moved away."""
    aside = toml.with_suffix(".aside")
    toml.rename(aside)
    try:
        return load_config()
    finally:
        aside.rename(toml)


def test_a_project_file_picks_only_among_the_users_models(tmp_path, _isolated_home,
                                                          monkeypatch):
    """Issue 40 item 9: a project file may choose `model`/`sub_model`/`compaction_model`/
    `advisor` only among the models the user configured (their config, environment, flags)
    and `local`; another provider model would spend the user's keys elsewhere."""
    toml = tmp_path / "rlm.toml"
    toml.write_text('model = "openrouter/any/model"\nsub_model = "local"\n'
                    'advisor = "openai/gpt-4o"\n')
    cfg = load_config()
    assert (cfg.model, cfg.sub_model, cfg.advisor) == (None, "local", None)
    (said,) = config_warnings()
    assert said.startswith("rlm.toml names model = 'openrouter/any/model', advisor = "
                           "'openai/gpt-4o', not among your models (local): ignored")
    own = _isolated_home / "config.toml"
    own.parent.mkdir(parents=True, exist_ok=True)
    own.write_text('advisor = "openai/gpt-4o"\n')  # the user's own choice
    assert load_config().advisor == "openai/gpt-4o"
    assert load_config(model="openrouter/any/model").model == "openrouter/any/model"
    trust.allow_file(toml)  # consent: the file gives everything
    assert load_config().model == "openrouter/any/model" and config_warnings() == []


def test_a_project_file_is_layered_over_the_users_config_never_instead_of_it(
        tmp_path, _isolated_home):
    """Issue 40 item 1: a harmless ./rlm.toml (as a sandboxed cell could write) hid the
    user's config.toml, so its `sandbox = true` was not read; now both are read, the
    project's on top, key by key, and the run header names each and what it set."""
    own = _isolated_home / "config.toml"
    own.parent.mkdir(parents=True, exist_ok=True)
    own.write_text("sandbox = true\nmax_turns = 9\ncell_timeout = 50\n")
    (tmp_path / "rlm.toml").write_text("max_turns = 5\n")
    cfg = load_config()
    assert (cfg.sandbox, cfg.max_turns, cfg.cell_timeout) == (True, 5, 50)
    assert files_read() == [
        f"{own.resolve()} (your config) sets cell_timeout, max_turns, sandbox",
        f"{(tmp_path / 'rlm.toml').resolve()} (project file: harmless settings only) sets "
        "max_turns"]
    (tmp_path / "rlm.toml").write_text("sandbox = false\n")  # loosening: ignored, said
    assert load_config().sandbox is True and "sandbox" in config_warnings()[0]
    (tmp_path / "rlm.toml").write_text("sandbox = true\n")  # tightening needs no consent
    own.write_text("sandbox = false\n")
    assert load_config().sandbox is True
    s = script(tmp_path / "s.json", ["the answer"])
    out = rlm("run", "hi", "--model", s, "--no-sandbox", cwd=tmp_path, check=False)
    header = [line for line in (out.stdout + out.stderr).splitlines() if line.startswith("config: ")]
    assert header == [f"config: {own.resolve()} (your config) sets sandbox; "
                      f"{(tmp_path / 'rlm.toml').resolve()} (project file: harmless settings "
                      "only) sets sandbox"], out.stderr


def test_rlm_trust_allows_exactly_the_bytes_it_saw(tmp_path):
    toml = tmp_path / "rlm.toml"
    toml.write_text('kernel_python = "python3"\n')
    assert load_config().kernel_python is None and "kernel_python" in config_warnings()[0]
    out = rlm("trust", cwd=tmp_path)
    assert "allowed" in out.stdout and str(toml.resolve()) in out.stdout
    assert load_config().kernel_python == "python3"
    assert files_read() == [f"{toml.resolve()} (project file, allowed by `rlm trust`) sets "
                            "kernel_python"]
    toml.write_text('kernel_python = "./evil.sh"\n')  # changed: consent again
    assert load_config().kernel_python is None and "kernel_python" in config_warnings()[0]


def test_rlm_home_wins_over_any_file(tmp_path, _isolated_home, monkeypatch):
    cfg_file = tmp_path / "mine.toml"
    cfg_file.write_text(f'home = "{tmp_path}/elsewhere"\n')
    monkeypatch.setenv("RLM_CONFIG", str(cfg_file))
    assert load_config().home == _isolated_home


def test_a_home_from_a_file_must_be_under_the_users_home(tmp_path, monkeypatch):
    """`home = "/etc"` in $RLM_HOME/config.toml must not make root write /etc/sessions."""
    monkeypatch.delenv("RLM_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "me"))
    from rlm.paths import rlm_home

    own = rlm_home() / "config.toml"
    own.parent.mkdir(parents=True)
    own.write_text('home = "/etc"\n')
    with pytest.raises(ConfigError, match="outside your home directory.*RLM_HOME=/etc"):
        load_config()
    own.write_text(f'home = "{tmp_path}/me/data"\n')
    assert load_config().home == tmp_path / "me" / "data"


def test_every_run_says_which_config_files_it_read(tmp_path):
    (tmp_path / "rlm.toml").write_text("max_turns = 3\n")
    s = script(tmp_path / "s.json", ["the answer"])
    out = rlm("run", "hi", "--model", s, cwd=tmp_path, check=False)
    assert f"config: {(tmp_path / 'rlm.toml').resolve()} (project file" in out.stdout + out.stderr
    (tmp_path / "rlm.toml").unlink()
    out = rlm("run", "hi", "--model", s, cwd=tmp_path, check=False)
    assert "config: no file" in out.stdout + out.stderr


# ------------------------------------------------------------------ item 8, small ones
@pytest.mark.parametrize("flag", ["--cell-timeout", "--max-wall", "--max-depth",
                                  "--token-budget", "--context-window", "--reserve-tokens"])
def test_minus_one_is_refused_not_taken_for_the_default(flag, capsys):
    from rlm.cli.main import build_parser

    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["run", "hi", flag, "-1"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert flag in err and "'-1' must be" in err and "leave the flag out" in err


def test_bidi_overrides_never_reach_the_terminal():
    from rlm.cli.render import terminal_safe

    shown = terminal_safe("invoice_\u202egpj.exe and \u2066x\u2069 \u200fy")
    assert shown == "invoice_gpj.exe and x y"


def test_the_kernel_gets_no_name_the_secret_list_holds(monkeypatch, tmp_path):
    from rlm.config import Config
    from rlm.kernel.runtime import kernel_env
    from rlm.secrets import SECRET_ENV_SUFFIXES

    held = ("WATSONX_APIKEY", "LANGFUSE_SECRET_KEY", "GITHUB_PRIVATE_KEY", "OPENAI_API_KEY",
            "HF_TOKEN", "MY_SECRET")
    passed = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "DB_PASSWORD")
    for name in held + passed:
        monkeypatch.setenv(name, "value-0123456789")
    env = kernel_env(tmp_path, Config(home=tmp_path))
    assert [n for n in held if n in env] == []
    assert all(n in env for n in passed)
    secretish = [k for k in env if k.upper().endswith(SECRET_ENV_SUFFIXES)
                 and "PASS" not in k.upper() and k not in passed]
    assert secretish == []


def test_a_forged_sandbox_false_cannot_beat_the_users_config_either(tmp_path, _isolated_home):
    """The host's record has no sandbox key (the run gave no --sandbox); the user's
    config.toml says sandbox = true: a recorded `sandbox: false` override would win over
    the config, so it is refused too."""
    _isolated_home.mkdir(parents=True, exist_ok=True)
    (_isolated_home / "config.toml").write_text("sandbox = true\n")
    session, _ = _session(tmp_path)
    session.close()
    forge(session.path, overrides={"sandbox": False})
    options = opened(session.id)
    assert any(line.startswith("refused sandbox") for line in options.refused)
    assert options.config().sandbox is True


def test_a_forged_sandbox_false_cannot_beat_the_default_sandbox(tmp_path):
    """No --sandbox, no config: the default is the sandbox where available, so a recorded
    `sandbox: false` the user never gave loosens it and is refused; an explicit
    `--no-sandbox` given now wins (the user's own command line)."""
    session, _ = _session(tmp_path)
    session.close()
    forge(session.path, overrides={"sandbox": False})
    options = opened(session.id)
    assert any(line.startswith("refused sandbox") for line in options.refused), options.refused
    assert options.config().sandbox is None  # the default: sandboxed where available
    given = app.RunOptions(overrides={"sandbox": False})
    assert opened(session.id, given).config().sandbox is False


def test_read_only_commands_warn_about_an_untrusted_project_file_and_go_on(tmp_path,
                                                                         _isolated_home):
    """Issue 40 item 8: `rlm sessions`, `rlm log`, `rlm state`, `rlm ps` start no kernel: a
    project rlm.toml that needs `rlm trust` is ignored by them with one warning line (they
    exited 2 before); a run ignores its settings too, and says so under its header."""
    from rlm.session.store import SessionStore

    s = SessionStore.create(_isolated_home, model="script:x.json", task="listed anyway")
    s.close()
    (tmp_path / "rlm.toml").write_text('kernel_python = "/usr/bin/python3"\n')
    for args in (["sessions", "--json"], ["log", s.id], ["state", s.id, "--json"], ["ps"]):
        proc = rlm(*args, cwd=tmp_path, check=False)
        assert proc.returncode == 0, (args, proc.stderr)
        warnings = [line for line in proc.stderr.splitlines() if line.startswith("rlm: warning:")]
        assert len(warnings) == 1 and "kernel_python" in warnings[0], (args, proc.stderr)
        assert "rlm trust rlm.toml" in warnings[0]
    listed = json.loads(rlm("sessions", "--json", cwd=tmp_path).stdout)
    assert [row["id"] for row in listed] == [s.id]
    proc = rlm("run", "hi", "--model", script(tmp_path / "r.json", [call("final('hi')")]),
               cwd=tmp_path)
    said = [line for line in (proc.stdout + proc.stderr).splitlines()
            if line.startswith("warning: ")]
    assert len(said) == 1 and "kernel_python" in said[0] and "rlm trust rlm.toml" in said[0]


def test_a_forged_workdir_is_refused_and_the_kernel_stays_where_it_was(tmp_path):
    """Issue 40 item 2: a recorded `workdir` becomes the kernel's working directory (bound
    read-write by the sandbox); a forged one pointing elsewhere (here: the user's config
    dir, where the run records live) is refused with one line, and the resumed kernel
    works where the session's own runs did."""
    target = tmp_path / "elsewhere"
    target.mkdir()
    first = script(tmp_path / "one.json", [call("import os\nprint(os.getcwd())\nfinal('ok')")])
    out = rlm("run", "start", "--model", first, "--json", cwd=tmp_path)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    forge(Path(res["session_path"]), workdir=str(target))
    second = script(tmp_path / "two.json", [call("import os\nprint(os.getcwd())\nfinal('ok')")])
    out = rlm("resume", res["session_id"], "continue", "--model", second, "--json",
              cwd=tmp_path)
    refusals = [line for line in out.stderr.splitlines() if "refused workdir" in line]
    assert len(refusals) == 1 and "this host's record" in refusals[0], out.stderr
    log = Path(res["session_path"])
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    shown = [e["message"]["content"] for e in entries
             if e["type"] == "message" and e["message"]["role"] == "tool"]
    assert len(shown) == 2 and str(target) not in shown[1], shown
    assert str(tmp_path) in shown[1]


def test_the_workdir_a_host_recorded_is_kept_on_resume(tmp_path):
    """`rlm demo` records its data folder as the workdir: the host's record holds it too,
    so a resume keeps it without a refusal."""
    data = tmp_path / "data"
    data.mkdir()
    session, _ = _session(tmp_path, workdir=str(data))
    session.close()
    options = opened(session.id)
    assert options.refused == [] and options.workdir == str(data)


@pytest.mark.skipif(not sandbox_available(), reason="no user namespaces here")
def test_a_cell_writing_rlm_toml_changes_nothing_for_the_next_run_or_the_resume(
        tmp_path, _isolated_home):
    """Issue 40: a sandboxed cell writes ./rlm.toml with a harmless setting, `sandbox =
    false` and `kernel_python`. The next run in that directory and the resume of the
    session keep the user's `sandbox = true` (the kernel's network namespace is not the
    host's) and say which file they ignored and why; the harmless setting is taken."""
    _isolated_home.mkdir(parents=True, exist_ok=True)
    (_isolated_home / "config.toml").write_text("sandbox = true\n")
    host_net = os.readlink("/proc/self/ns/net")
    net = "import os\nns = os.readlink('/proc/self/ns/net')\nprint(ns)"
    write = ("open('rlm.toml', 'w').write('max_turns = 30\\nsandbox = false\\n"
             "kernel_python = \"/bin/false\"\\n')")
    first = script(tmp_path / "one.json", [call(write), call("final('written')")])
    res = json.loads(rlm("run", "write it", "--model", first, "--json", cwd=tmp_path,
                         check=False).stdout)
    assert res["final"] == "written" and (tmp_path / "rlm.toml").is_file()
    check = [call(net), call("final(ns)")]
    for args in (["run", "where am I"],
                 ["resume", res["session_id"], "and now"]):
        # answered; /proc is not the task's data, so the answer reads unverified (exit 5):
        # not this test's subject (issue 58)
        proc = rlm(*args, "--model", script(tmp_path / "two.json", check), "--json",
                   cwd=tmp_path, check=False)
        out = json.loads(proc.stdout)
        assert out["status"] in ("answered", "unverified"), out
        assert out["final"].startswith("net:[") and out["final"] != host_net, (args, out)
        said = [line for line in proc.stderr.splitlines() if line.startswith("warning: ")]
        assert len(said) == 1, proc.stderr
        assert "rlm.toml sets kernel_python, sandbox" in said[0] and "ignored" in said[0]
        header = [line for line in proc.stderr.splitlines() if line.startswith("config: ")]
        assert header[0].endswith("(project file: harmless settings only) sets max_turns "
                                  "(ignored: kernel_python, sandbox)"), header


# ------------------------------------------------------- issue 57 item 6: by construction
def recordable_keys() -> tuple[set[str], set[str]]:
    """Every key a run can record, derived from the code: any Config field can sit in a
    recorded `overrides` (RunOptions.from_dict takes what the log holds), and every
    top-level key `RunOptions.to_dict` (what `record_options` writes) writes."""
    from dataclasses import fields

    from rlm.config import Config

    top = set(app.RunOptions().to_dict()) - {"overrides"}
    return {f.name for f in fields(Config)}, top


def test_every_recordable_key_is_screened_or_never_recorded():
    overrides, top = recordable_keys()
    screened, never = set(trust.SCREENED), set(trust.NEVER_RECORDED)
    assert sorted(overrides - screened - never) == []  # a key in neither: screen it
    assert sorted(top - set(trust.RUN_FLAGS)) == []
    assert screened & never == set() and set(trust.SECURITY_FLAGS) <= screened
    # what a command line records must be screened, not refused outright (its own
    # record would be refused on every resume)
    from rlm.cli.common import CONFIG_FLAGS

    assert sorted(set(CONFIG_FLAGS) - screened) == []


def test_a_forged_key_in_no_table_and_a_higher_limit_are_refused(tmp_path):
    session, _ = _session(tmp_path, overrides={"max_turns": 7, "cell_timeout": 60,
                                               "memory_cap_bytes": 2 << 30},
                          max_continuations=5)
    session.close()
    forge(session.path, overrides={"max_turns": 10 ** 6, "cell_timeout": 10.0 ** 9,
                                   "memory_cap_bytes": 1 << 50, "output_budget_chars": 10 ** 9,
                                   "made_up": 1}, max_continuations=10 ** 6)
    options = opened(session.id)
    said = sorted(line.split(" = ")[0] for line in options.refused)
    assert said == ["refused cell_timeout", "refused made_up", "refused max_continuations",
                    "refused max_turns", "refused memory_cap_bytes",
                    "refused output_budget_chars"], options.refused
    assert all("\n" not in line for line in options.refused)
    cfg = options.config()
    assert (cfg.max_turns, cfg.cell_timeout, cfg.memory_cap_bytes) == (7, 60, 2 << 30)
    assert cfg.output_budget_chars is None and options.max_continuations == 5


def test_a_forged_snapshot_url_is_refused_and_the_kernels_names_survive(tmp_path):
    """Issue 57 item 6: a `snapshot_url` written into the log on the default path (no
    flags) turned the default sandbox off with no line, sent the kernel's state where the
    forger said, and lost the kernel's names on later resumes. Now it is refused with one
    line, nothing goes there, `rlm state` does not read it, and the names come back."""
    elsewhere = tmp_path / "forged-snaps"
    (tmp_path / "kept.txt").write_text("41")  # the task's data (a verified answer reads it)
    first = script(tmp_path / "one.json", [call("kept = int(open('kept.txt').read())"),
                                           call("final('ok')")])
    res = json.loads(rlm("run", "start", "--model", first, "--json", cwd=tmp_path).stdout)
    log = Path(res["session_path"])
    forge(log, overrides={"snapshot_url": f"file://{elsewhere}"})

    state = rlmcli.rlm("state", res["session_id"], "--json", cwd=tmp_path)
    assert state.returncode == 0, state.stderr
    said = [line for line in state.stderr.splitlines() if "refused snapshot_url" in line]
    assert len(said) == 1 and "file://" in said[0], state.stderr
    assert "kept" in state.stdout

    for n in (1, 2):  # the resume refuses it; the one after still has the names
        again = script(tmp_path / f"r{n}.json", [call("print(kept + 1)"), call("final('42')")])
        out = rlm("resume", res["session_id"], "go on", "--model", again, "--json",
                  cwd=tmp_path)
        refused = [line for line in out.stderr.splitlines() if "refused snapshot_url" in line]
        assert len(refused) == (1 if n == 1 else 0), out.stderr
        entries = [json.loads(line) for line in log.read_text().splitlines()]
        shown = [e["message"]["content"] for e in entries
                 if e["type"] == "message" and e["message"]["role"] == "tool"]
        assert shown[-2].strip() == "42", shown
    assert not elsewhere.exists()
    newest = [e for e in entries if e.get("custom_type") == "run_options"][-1]["data"]
    assert "snapshot_url" not in newest["overrides"]


# ------------------------------------------------------- issue 57 item 7: project config
def _broken_project_file(tmp_path: Path, kind: str) -> None:
    toml = tmp_path / "rlm.toml"
    if kind == "malformed":
        toml.write_text("max_turns = \n")
    elif kind == "symlink":  # a link a cell planted, to a file that looks harmless
        (tmp_path / "elsewhere.toml").write_text("max_turns = 3\n")
        toml.symlink_to(tmp_path / "elsewhere.toml")
    elif kind == "fifo":  # reading it would block the host
        os.mkfifo(toml)
    elif kind == "directory":
        toml.mkdir()
    elif kind == "bad value":
        toml.write_text("max_turns = 0\ncell_timeout = 'soon'\n")


@pytest.mark.parametrize("kind", ["malformed", "symlink", "fifo", "directory", "bad value"])
def test_a_broken_project_file_never_locks_the_user_out(tmp_path, kind):
    """Issue 57 item 7: a malformed, symlinked or non-regular ./rlm.toml (a cell can write
    one) made every command exit 2, `resume`, `sessions` and `log` included. Now every
    command ignores it with one warning line and goes on."""
    first = script(tmp_path / "one.json", [call("final('ok')")])
    res = json.loads(rlm("run", "start", "--model", first, "--json", cwd=tmp_path).stdout)
    sid = res["session_id"]
    _broken_project_file(tmp_path, kind)
    again = script(tmp_path / "two.json", [call("final('ok')")])
    for args in (["run", "hi", "--model", again, "--json"],
                 ["resume", sid, "go on", "--model", again, "--json"],
                 ["sessions", "--json"], ["log", sid], ["state", sid, "--json"]):
        proc = rlmcli.rlm(*args, cwd=tmp_path)
        assert proc.returncode in ANSWERED, (kind, args, proc.stderr[-2000:])
        said = [line for line in proc.stderr.splitlines() if "rlm.toml" in line
                and "warning: " in line]
        assert len(said) == 1 and "ignored" in said[0], (kind, args, proc.stderr)


def test_the_users_own_broken_config_is_still_an_error_naming_file_and_line(
        tmp_path, _isolated_home):
    _isolated_home.mkdir(parents=True, exist_ok=True)
    (_isolated_home / "config.toml").write_text("max_turns = 4\nsandbox = \n")
    proc = rlmcli.rlm("sessions", cwd=tmp_path)
    assert proc.returncode == 2
    assert "config.toml" in proc.stderr and "line 2" in proc.stderr, proc.stderr


def test_every_project_safe_setting_is_a_limit_or_a_choice():
    from rlm.config import PROJECT_CHOICES, PROJECT_LIMITS, PROJECT_SAFE

    assert sorted(PROJECT_SAFE - set(PROJECT_LIMITS) - PROJECT_CHOICES) == []
    assert set(PROJECT_LIMITS) & PROJECT_CHOICES == set()


def test_a_project_file_may_lower_limits_never_raise_the_users(tmp_path, _isolated_home):
    """Issue 57 item 7: a project rlm.toml raised the user's own limits (memory cap, cell
    timeout, max turns) with no warning. Now a limit from a project file is taken only
    when it is stricter than defaults + the user's config, else ignored with one line."""
    _isolated_home.mkdir(parents=True, exist_ok=True)
    (_isolated_home / "config.toml").write_text(
        "max_turns = 2\ncell_timeout = 50\nmemory_cap_bytes = 2147483648\n")
    (tmp_path / "rlm.toml").write_text(
        "max_turns = 1000\ncell_timeout = 20\nmemory_cap_bytes = 109951162777600\n"
        "max_children = 0\nmax_depth = 1\n")
    loop = script(tmp_path / "s.json", [call(f"print({n})") for n in range(4)]
                  + [call("final('3')")])
    proc = rlmcli.rlm("run", "count", "--model", loop, "--json", cwd=tmp_path)
    out = json.loads(proc.stdout)
    assert out["turns"] == 2 and out["reason"].startswith("limit"), out  # the user's 2
    said = [line for line in proc.stderr.splitlines() if line.startswith("warning: ")]
    assert len(said) == 1, proc.stderr
    for key in ("max_turns", "memory_cap_bytes", "max_children"):
        assert key in said[0]
    assert "cell_timeout" not in said[0] and "max_depth" not in said[0]
    header = [line for line in proc.stderr.splitlines() if line.startswith("config: ")]
    assert header[0].endswith("sets cell_timeout, max_depth (ignored: max_children, "
                              "max_turns, memory_cap_bytes)"), header
    cfg = load_config()  # the same rule for every command
    assert (cfg.max_turns, cfg.cell_timeout, cfg.memory_cap_bytes, cfg.max_children) == \
        (2, 20, 2147483648, 8)
    trust.allow_file(tmp_path / "rlm.toml")  # the user's consent: the file gives everything
    assert load_config().max_turns == 1000 and config_warnings() == []
