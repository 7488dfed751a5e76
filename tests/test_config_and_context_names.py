"""Config precedence (defaults < TOML < env < flags), --context variable names and how the
model sees their values."""

from pathlib import Path

import pytest

from kernel_ext.describe import describe_value
from rlm.agent.context_files import variable_name
from rlm.config import config_warnings, load_config
from rlm.errors import ConfigError
from rlm.paths import rlm_home


def test_precedence(tmp_path, monkeypatch):
    (tmp_path / "rlm.toml").write_text('model = "local"\ncell_timeout = 12\nmax_turns = 7\n')
    assert load_config().model == "local"  # a project file picks among the user's models
    assert load_config().cell_timeout == 12
    monkeypatch.setenv("RLM_MODEL", "from-env")
    assert load_config().model == "from-env"
    cfg = load_config(model="from-flag", max_turns=None)
    assert cfg.model == "from-flag" and cfg.max_turns == 7


def own_config(text: str) -> Path:
    """The user's own config file ($RLM_HOME/config.toml) holding `text`."""
    path = rlm_home() / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_unknown_setting_is_a_clear_error_in_the_users_config(tmp_path):
    own_config("modle = 'typo'\n")
    with pytest.raises(ConfigError, match="config.toml: unknown setting.*modle"):
        load_config()


def test_bad_toml_names_the_file_and_line_of_the_users_config(tmp_path):
    own_config("max_turns = 3\nmodel = \n")
    with pytest.raises(ConfigError, match=r"config.toml: cannot read config.*line 2"):
        load_config()


@pytest.mark.parametrize("text", ["modle = 'typo'\n", "model = \n", 'cell_timeout = "abc"\n',
                                  "max_turns = 0\n"])
def test_a_broken_project_file_is_ignored_with_one_warning(tmp_path, text):
    """Issue 57 item 7: a project's rlm.toml never stops a command (tests/test_trust.py
    runs every command on one); the user's own broken config still does."""
    own_config("max_turns = 9\n")
    (tmp_path / "rlm.toml").write_text(text)
    assert load_config().max_turns == 9
    (said,) = config_warnings()
    assert said.startswith("rlm.toml") and "ignored" in said and "\n" not in said


def test_variable_names_are_identifiers_and_unique():
    taken: set[str] = set()
    assert variable_name(Path("sales.csv"), taken) == "sales"
    assert variable_name(Path("sales.json"), taken) == "sales_2"
    assert variable_name(Path("2024 report.txt"), taken) == "data_2024_report"
    assert variable_name(Path("class.txt"), taken) == "data_class"


def test_wrong_value_types_are_caught_at_load(tmp_path):
    own_config('cell_timeout = "abc"\n')
    with pytest.raises(ConfigError, match="cell_timeout = 'abc' should be"):
        load_config()
    own_config("compaction_enabled = 1\n")
    with pytest.raises(ConfigError, match="compaction_enabled"):
        load_config()
    own_config("")
    (tmp_path / "rlm.toml").write_text('cell_timeout = 30\nhome = "h"\nkernel_env_pass = ["A_TOKEN"]\n')
    cfg = load_config()  # a project file: consent first, else ignored (tests/test_trust.py)
    assert cfg.cell_timeout == 30 and cfg.kernel_env_pass == ()
    assert "sets home, kernel_env_pass" in config_warnings()[0]
    from rlm import trust

    trust.allow_file(tmp_path / "rlm.toml")
    cfg = load_config()  # RLM_HOME (set for every test) wins over the file's home
    assert cfg.cell_timeout == 30 and cfg.home == rlm_home() and cfg.kernel_env_pass == ("A_TOKEN",)


def test_a_long_text_is_described_with_a_short_preview_and_how_to_search_it():
    long = "The committee reviewed the weekly schedule before noon.\n" * 2000
    d = describe_value("haystack", long)
    assert d["size"] == "112,000 characters"
    assert len(d["preview"]) < 200  # a long preview gets retyped by the 1.5B model
    assert d["hint"].startswith("search it:") and "haystack" in d["hint"]
    # no placeholder code to copy (the 1.5B model ran `haystack.find('some words')`)
    assert ".find(" not in d["hint"] and "some words" not in d["hint"]
    short = describe_value("note", "a short note")
    assert short["preview"] == "'a short note'" and "hint" not in short
