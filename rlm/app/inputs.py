"""A run's inputs: `--notebook`, `--context` files, files a prompt names, a child's context.

Loaded before a session's first prompt (`prepare_inputs`); a later prompt loads the files
it names that no input entry holds yet (`attach_named_files`).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from kernel_ext import contract
from rlm.agent.children import CONTEXT_FILE
from rlm.agent.context_files import (
    NAMED_FILE_LIMIT,
    describe_variables,
    load_context_files,
    misspelled_files,
    named_files,
)
from rlm.agent.loop import Agent
from rlm.app.options import RunOptions
from rlm.errors import RlmError
from rlm.paths import write_private_atomic
from rlm.session.entries import CustomEntry, MessageEntry


def prepare_inputs(agent: Agent, options: RunOptions, prompt: str | None = None) -> list[str]:
    """Before a session's first prompt: execute --notebook, load --context files and the
    files the task named. A session that already has messages got them at its start (its
    kernel restores them); there, files the new `prompt` names are loaded. Returns notes
    for the user."""
    if any(isinstance(e, MessageEntry) for e in agent.session.branch()):
        return attach_named_files(agent, prompt)
    ex = agent.executor
    if ex is None:
        raise RlmError("start the agent before loading its inputs")
    if options.notebook:
        from rlm.notebook.from_notebook import import_notebook

        import_notebook(Path(options.notebook), ex, agent.session)
    if options.context or options.named:
        load_context_files(agent, [*options.context, *options.named], optional=options.named)
    return []


def pending_inputs(agent: Agent, options: RunOptions) -> list[str]:
    """The files `prepare_inputs` is about to load (a session's first prompt only)."""
    if any(isinstance(e, MessageEntry) for e in agent.session.branch()):
        return []
    return [Path(f).name for f in [*options.context, *options.named]]


def with_named_files(task: str | None, options: RunOptions) -> tuple[RunOptions, list[str]]:
    """A new session's task that names existing files (`... in sales.csv`) gets them as
    inputs (`RunOptions.named`, recorded with the options, so a --detach worker loads them
    too); returns the options and a note per file too big to load up front."""
    if not task:
        return options, []
    base = Path(options.workdir or os.getcwd())
    load, big = named_files(task, base, options.context)
    notes = _too_big(big) + _near_files(task, base, load, [])
    return (replace(options, named=load) if load else options), notes


def attach_named_files(agent: Agent, prompt: str | None) -> list[str]:
    """A prompt to a session that already ran (a chat message, `rlm resume ID "..."`)
    that names files no input entry holds yet: they are loaded as `/load` does. Returns
    notes for the user: what was loaded, what was too big."""
    if not prompt or agent.executor is None:
        return []
    held = sorted(agent.input_files())
    base = Path(agent.config.kernel_cwd or os.getcwd())
    load, big = named_files(prompt, base, held)
    notes = _too_big(big) + _near_files(prompt, base, load, held)
    if load:
        names = load_context_files(agent, load, optional=load)
        notes.append(f"loaded {', '.join(Path(f).name for f in load)} (named in the prompt)"
                     + (f" as {', '.join(names)}" if names else ": none could be read"))
    return notes


def _near_files(text: str, base: Path, load: list[str], held: list[str]) -> list[str]:
    """A file `text` names that does not exist is never passed over in silence: the one
    file one edit away is added to `load` (unless `held` already), several are named for
    the user to choose; the notes say which."""
    notes = []
    for word, near in misspelled_files(text, base):
        if len(near) > 1:
            names = " or ".join(p.name for p in near[:4])
            notes.append(f"{word} does not exist; did you mean {names}? None was loaded: "
                         "name the one you meant (or /load it)")
        elif str(near[0].resolve()) not in held:
            load.append(str(near[0].resolve()))
            notes.append(f"{word} does not exist: loading {near[0].name} (one edit away) "
                         "instead")
    return notes


def _too_big(big: list[str]) -> list[str]:
    return [f"{b}, named in the prompt, is over {NAMED_FILE_LIMIT // 2**20} MB: not loaded "
            f"up front (the model's code can read it; --context loads it anyway)" for b in big]


def put_context(agent: Agent, context: bytes | None) -> None:
    """An rlm_query child's `context` argument, as the object itself in the kernel variable
    `context`: the blob its spawn kept (rlm.agent.children.CONTEXT_FILE), decoded by the
    child's kernel (kernel_ext.child_context.bind_json; the host never unpickles it)."""
    assert agent.session.dir is not None and agent.executor is not None
    path = agent.session.dir / CONTEXT_FILE
    if not path.is_file() and context is not None:
        write_private_atomic(path, context)
    res = agent.executor.execute(contract.BIND_CONTEXT.expression(str(path)), timeout=120)
    if not res.ok:
        raise RlmError(f"could not load the rlm_query context: {res.shaped[:500]}")
    agent.attach_context(CustomEntry(
        custom_type="context_vars", data={"names": ["context"]}, display=True,
        content=describe_variables(agent, ["context"], origin="passed by the parent agent")))

