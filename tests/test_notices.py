"""What the model is told after a crash or a resume: exactly what came back."""

from rlm.agent.notices import cell_content, restarted, restored_on_start
from rlm.kernel.types import CellResult, RestoreReport


def _report():
    return RestoreReport(
        restored=["df", "f"],
        failed=[{"name": "g", "reason": "AttributeError: boom"}],
        skipped=[{"name": "sock", "reason": "TypeError: cannot pickle 'socket' object"}],
        snapshot_found=True,
    )


def test_restart_notice_lists_restored_and_lost_names_with_reasons():
    text = restarted("died (signal SIGKILL)", _report())
    assert text.startswith("<kernel_restarted>")
    assert "died (signal SIGKILL)" in text
    assert "Restored from the last snapshot: df, f." in text
    assert "g (AttributeError: boom)" in text
    assert "sock (TypeError: cannot pickle 'socket' object)" in text


def test_no_snapshot_says_nothing_was_restored():
    text = restarted("died (exit code 1)", RestoreReport(snapshot_found=False))
    assert "nothing was restored" in text
    assert "Restored from" not in text


def test_died_cell_content_carries_the_notice_before_the_output():
    res = CellResult(status="died", shaped="partial output", died_cause="exit code 1",
                     restart=_report())
    text = cell_content(res)
    assert text.index("<kernel_restarted>") < text.index("partial output")
    assert "died (exit code 1)" in text


def test_ok_cell_without_output_says_so():
    assert cell_content(CellResult(status="ok", shaped="")) == "(no output)"


def test_resume_notice():
    text = restored_on_start(_report())
    assert "<ipython_state_restored>" in text and "resumed in a new kernel" in text
