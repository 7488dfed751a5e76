"""Run options: how a run was asked for, recorded in the session so they travel with it.

`new_session` records them as a hidden `run_options` entry (custom, content None: never
sent to the model); opening a session merges what the user passes now over what was
recorded (`RunOptions.over`), so `--detach`, a worker restart and `rlm resume` keep the
options the run started with. Logs written before this entry existed open with the
defaults.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from rlm import trust
from rlm.config import Config, load_config
from rlm.llm.defaults import resolve_model
from rlm.longrun import GoalManager
from rlm.protocols import SessionLog
from rlm.session.branch import custom_entries
from rlm.session.entries import CustomEntry

MAX_TREE_DEPTH = 32  # how far up a child's parents are looked for a recorded setting

RUN_OPTIONS = "run_options"


@dataclass
class RunOptions:
    """How a run was asked for: the command line's run flags plus its Config overrides
    (only the flags the user gave; -1 means "unlimited" for the limit flags)."""

    # None: not given now (a resume keeps the recorded value); False: --no-autonomous
    autonomous: bool | None = None
    gate: list[str] = field(default_factory=list)
    no_gate: bool = False  # --no-gate: drop the recorded gates (not recorded itself)
    max_continuations: int | None = None
    context: list[str] = field(default_factory=list)  # files loaded before the first prompt
    named: list[str] = field(default_factory=list)  # files the task named (loaded if they can be)
    notebook: str | None = None  # .ipynb executed before the first prompt
    overrides: dict[str, Any] = field(default_factory=dict)
    workdir: str | None = None  # the kernel's working directory for inputs (rlm demo)
    # set as the session's goal when it is opened for this run; not recorded with the
    # options (the goal lives in its own entries, and a resume must not reset it)
    goal: str | None = None
    refused: list[str] = field(default_factory=list, compare=False)  # trust.screen's lines

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        del d["goal"], d["no_gate"], d["refused"]
        d["autonomous"] = bool(self.autonomous)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunOptions:
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        opts = cls(**known)
        opts.gate, opts.context = list(opts.gate or []), list(opts.context or [])
        opts.named = list(opts.named or [])
        opts.overrides = dict(opts.overrides or {})
        return opts

    def over(self, recorded: RunOptions | None) -> RunOptions:
        """These options (given now) over `recorded` ones: what the user gives wins."""
        if recorded is None:
            return self
        return RunOptions(
            autonomous=(self.autonomous if self.autonomous is not None
                        else recorded.autonomous),
            gate=[] if self.no_gate else (self.gate or recorded.gate),
            max_continuations=(self.max_continuations if self.max_continuations is not None
                               else recorded.max_continuations),
            context=self.context or recorded.context,
            named=self.named or recorded.named,
            notebook=self.notebook or recorded.notebook,
            overrides={**recorded.overrides, **self.overrides},
            workdir=self.workdir or recorded.workdir,
            goal=self.goal,
        )

    def config(self, session: SessionLog | None = None, base: Config | None = None) -> Config:
        """Defaults < TOML < env < these overrides; the session's model unless one is given."""
        flags = {k: v for k, v in self.overrides.items() if v is not None and v != -1}
        cfg = base.with_overrides(**flags) if base is not None else load_config(**flags)
        if self.overrides.get("max_turns") == -1:
            cfg = replace(cfg, max_turns=None)
        if self.overrides.get("max_tokens") == -1:
            cfg = replace(cfg, max_tokens=None)
        if not cfg.model and session is not None and session.header.model:
            cfg = replace(cfg, model=session.header.model)
        if self.workdir:  # every kernel of the run starts there: resume and restarts too
            cfg = replace(cfg, kernel_cwd=self.workdir)
        if self.context or self.named:  # the sandbox shows them read-only, wherever they are
            where = cfg.kernel_cwd or os.getcwd()  # (context_files: named ones from the kernel's)
            cfg = replace(cfg, kernel_inputs=tuple(
                [os.path.abspath(os.path.expanduser(str(f))) for f in self.context]
                + [os.path.abspath(os.path.join(where, str(f))) for f in self.named]))
        return resolve_model(cfg)


def recorded_options(session: SessionLog) -> RunOptions | None:
    """The newest `run_options` entry on the branch (None for logs written before them)."""
    found = custom_entries(session.branch(), RUN_OPTIONS)  # O(1) reads on a long log
    return RunOptions.from_dict(found[-1].data or {}) if found else None


def recorded_snapshot_url(session: SessionLog, user_config: Config | None = None
                          ) -> tuple[str | None, list[str]]:
    """The snapshot URL a session's kernel wrote to, as its log records it and screened
    like every recorded option (rlm.trust: one the host did not record is refused), with
    the refusal's line; a child's is its root's (children run with their parent's config
    and record no options)."""
    from rlm.session.store import FILE_NAME, SessionStore

    mine = user_config if user_config is not None else load_config()
    for _ in range(MAX_TREE_DEPTH):
        recorded = recorded_options(session)
        url, notes = None, []
        if recorded is not None and recorded.overrides.get("snapshot_url") is not None:
            clean, said = trust.screen(recorded.to_dict(), session_id=session.id,
                                       session_dir=session.dir, given={}, user_config=mine)
            url = ((clean or {}).get("overrides") or {}).get("snapshot_url")
            notes = [line for line in said if line.startswith("refused snapshot_url ")]
            if notes:
                return url, notes
        folder = session.dir
        if url or folder is None or folder.parent.name != "children" \
                or not session.header.parent_session:
            return url, notes
        if not (folder.parent.parent / FILE_NAME).is_file():
            return None, []
        session = SessionStore.open(folder.parent.parent, readonly=True)
    return None, []


def record_options(session: SessionLog, options: RunOptions) -> None:
    recorded = recorded_options(session)
    if recorded is None or recorded.to_dict() != options.to_dict():
        session.append(CustomEntry(custom_type=RUN_OPTIONS, data=options.to_dict(),
                                   display=False, content=None))
        # the copy a cell cannot write (rlm.trust): what a later open screens the log by
        trust.remember(session.id, session.dir, options.to_dict(), session.header.model)



def set_goal_given(session: SessionLog, options: RunOptions) -> None:
    """`--goal TEXT`: the session's goal from now on (replacing any), before the first
    prompt, so the run continues until the goal is complete (rlm.longrun.goals)."""
    if options.goal is not None:
        GoalManager(session).set(options.goal)
