"""`rlm demo`: its data, its true answer, where it writes, and what the kernel can reach."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlm.demo import (
    DEMO_DIR,
    DEMO_FILE,
    DemoAnswer,
    answer_is_right,
    demo_answer,
    file_answer,
    make_sales_dataset,
)
from tests.rlmcli import ANSWERED


def test_demo_answer_matches_the_csv_it_describes(tmp_path):
    for seed in (1, 7):
        path = make_sales_dataset(tmp_path / f"s{seed}.csv", seed=seed, rows=400)
        assert demo_answer(seed, 400) == file_answer(path)
    assert demo_answer(1, 400) != demo_answer(2, 400)
    truth = demo_answer(7, 400)
    assert truth.lead == round(truth.totals[truth.leader] - truth.totals[truth.runner_up], 2)


def test_answer_checker():
    truth = DemoAnswer("East", "North", 1234.56, {"East": 9000.0, "North": 7765.44, "West": 1.0})
    assert answer_is_right("East led with 9,000.00, ahead of North by $1,234.56.", truth)
    assert answer_is_right("FINAL(East, by 1235)", truth)
    assert not answer_is_right("North trails East by 1234.56", truth)  # leader named second
    assert not answer_is_right("East, by 900", truth)
    assert not answer_is_right("sales.csv does not exist in the current directory", truth)


def _demo(tmp_path: Path, *args: str, timeout: float = 300,
          home: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    if home is not None:
        env["RLM_HOME"] = str(home)
    return subprocess.run([sys.executable, "-m", "rlm", "demo", "--json", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=timeout, env=env)


def test_demo_data_is_reachable_by_name_and_nothing_lands_in_cwd(tmp_path, _isolated_home):
    cell = ("import pandas as pd\ndf = pd.read_csv('sales.csv')\n"
            "final(f'{len(df)} {df.equals(sales)}')")
    script = tmp_path.parent / f"{tmp_path.name}-replies.json"
    script.write_text(json.dumps(
        [{"content": "", "tool_calls": [{"name": "python", "arguments": {"code": cell}}]}]))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    out = _demo(cwd, "--model", f"script:{script}", "--rows", "50", "--seed", "3")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["final"] == "50 True"  # the name in the task resolves in the kernel
    assert list(cwd.iterdir()) == []  # no notebook, no data, nothing in the user's directory
    session_dir = Path(result["session_path"]).parent
    assert (session_dir / f"{result['session_id']}.ipynb").is_file()
    assert file_answer(session_dir / DEMO_DIR / DEMO_FILE) == demo_answer(3, 50)



def test_demo_names_its_model_once_in_the_opening_lines(tmp_path, _isolated_home, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # one line per message, so a name is not split
    script = tmp_path.parent / f"{tmp_path.name}-once.json"
    script.write_text(json.dumps(["FINAL(East)"]))
    model = f"script:{script}"
    out = _demo(tmp_path, "--model", model, "--rows", "20")
    assert out.returncode in (0, 5), out.stderr  # the answer itself does not matter here
    progress = out.stderr  # --json: progress goes to stderr
    opening = progress.split(" turn 1 ")[0]  # before the first turn's rule
    assert opening.count(model) == 1, progress
    assert f"model {model} · session " in opening and "rlm demo · data " in opening

def _cells(path: Path, *codes: str) -> str:
    path.write_text(json.dumps([{"content": "", "tool_calls": [
        {"name": "python", "arguments": {"code": c}}]} for c in codes]))
    return f"script:{path}"


def test_the_demo_kernel_stays_in_its_data_folder_after_a_crash_and_on_resume(
        tmp_path, _isolated_home):
    """Before: only the first kernel entered the data's folder (a chdir before the first
    prompt), so after a crash restart or on `rlm resume` `pd.read_csv('sales.csv')` failed."""
    here = "import os\nprint('CWD', os.getcwd(), os.path.isfile('sales.csv'))"
    first = _cells(tmp_path / "a.json", here, "import os\nos._exit(1)", here + "\nfinal('ok')")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    out = _demo(cwd, "--model", first, "--rows", "30")
    assert out.returncode in ANSWERED, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    data_dir = Path(result["session_path"]).parent / DEMO_DIR
    def seen() -> int:  # tool results that printed the data folder
        lines = Path(result["session_path"]).read_text().splitlines()
        return sum(f"CWD {data_dir} True" in line and '"role":"tool"' in line for line in lines)

    assert seen() == 2  # before and after the crash

    again = _cells(tmp_path / "b.json", here + "\nfinal('ok')")
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    res = subprocess.run([sys.executable, "-m", "rlm", "resume", result["session_id"], "again",
                          "--model", again, "--json"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300, env=env)
    assert res.returncode in ANSWERED, res.stderr
    assert seen() == 3


def test_demo_notebook_goes_where_asked(tmp_path, _isolated_home):
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([{"content": "", "tool_calls": [
        {"name": "python", "arguments": {"code": "final('ok')"}}]}]))
    (tmp_path / "nb").mkdir()  # like `rlm export -o`, the folder must exist
    out = _demo(tmp_path, "--model", f"script:{script}", "--rows", "20", "-o", "nb/demo.ipynb")
    assert out.returncode in ANSWERED, out.stderr
    assert json.loads((tmp_path / "nb" / "demo.ipynb").read_text())["cells"]


@pytest.fixture
def model_home(local_model, _isolated_home):
    """This test's RLM_HOME; the model comes from the test session's shared cache."""
    return _isolated_home


@pytest.mark.slow
@pytest.mark.timeout(900)  # the demo's own bound (below): a 2-core CI run shared with the
# soak took 297 s once (111-177 s in others), past the suite's default 300 s
def test_real_demo_command_gives_the_true_answer(tmp_path, model_home):
    """CI runs the command a new user runs first, with the local model, and checks it."""
    seed = 7
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    out = _demo(cwd, "--seed", str(seed), timeout=900, home=model_home)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert answer_is_right(result["final"], demo_answer(seed)), (result, demo_answer(seed))
    assert list(cwd.iterdir()) == []
