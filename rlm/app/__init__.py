"""The composition root: every agent is assembled here, the same way, and every run has
one lifecycle.

    options = RunOptions(autonomous=True, overrides={"max_turns": 5})
    with SessionRun.new("run", task, options) as run:   # lock, session, model, kernel
        notes = run.prepare(task)                       # inputs
        events = run.drive(task, on_event)              # the prompt; schedules fire into it

Entry points — `rlm run`, `chat`, `resume`, the worker behind `--detach`, `%%rlm`,
`run_task`, `rlm_query` children, `rlm compact`, `rlm demo` — are a few lines over
`SessionRun` (lifecycle.py), which builds every agent with `build_agent`: the model and the
kernel factory, compaction sized to the model's window, goals, the scheduler's kernel
handlers, the autonomous policy and the rlm_query child runner (build.py). What an entry
point cannot offer is decided in ONE place, `GAPS` (features.py). Run options travel with
the run (options.py); inputs are loaded by inputs.py; driving.py fires due schedules into a
foreground run.
"""

from __future__ import annotations

from rlm.app.build import (
    attach_compaction,
    compact_now,
    rebuild_now,
    shake_now,
    size_output_to_window,
)
from rlm.app.driving import ForegroundSchedules, drive, schedules_note
from rlm.app.entries import (
    AgentRunner,
    agent_runner,
    change_goal,
    ensure_worker,
    goal_line,
    resume_detached,
    resume_prompt,
    run_task,
    run_worker,
    session_holder,
    start_detached,
)
from rlm.app.features import ENTRY_POINTS, FEATURES, GAPS, Gap, feature_table, gap
from rlm.app.inputs import (
    attach_named_files,
    pending_inputs,
    prepare_inputs,
    put_context,
    with_named_files,
)
from rlm.app.lifecycle import (
    SessionRun,
    attach_all,
    build_agent,
    check_start,
    child_failure,
    discard_unstarted,
    run_child,
)
from rlm.app.options import (
    RunOptions,
    record_options,
    recorded_options,
    recorded_snapshot_url,
    set_goal_given,
)
from rlm.llm.defaults import default_model

__all__ = [
    "ENTRY_POINTS", "FEATURES", "GAPS", "AgentRunner", "ForegroundSchedules", "Gap",
    "RunOptions", "SessionRun", "agent_runner", "attach_all", "attach_compaction",
    "attach_named_files", "build_agent", "change_goal", "check_start", "child_failure",
    "compact_now", "default_model", "discard_unstarted", "drive", "feature_table", "gap",
    "goal_line", "prepare_inputs", "put_context", "record_options", "recorded_options",
    "recorded_snapshot_url",
    "rebuild_now", "resume_prompt", "run_child", "run_task", "run_worker", "schedules_note",
    "session_holder", "shake_now", "set_goal_given", "size_output_to_window", "start_detached",
    "with_named_files", "ensure_worker", "resume_detached", "pending_inputs",
]  # fmt: skip
