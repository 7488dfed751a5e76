"""The `rlm` command for tests, and the script: replies they feed it.

`rlm(...)` runs the CLI's entry function `main(argv)` in this process, with its own cwd,
environment, stdin and captured streams, and returns what a subprocess would: the exit
code, stdout and stderr. That saves the interpreter's start and the host's imports (about
0.9 s a call) for the many tests whose subject is what a command does, not the process it
runs in. Tests whose subject is the process boundary (signals, `--detach`, Ctrl-C, exit on
a dead parent, the console script's sys.path) pass `process=True`: the real `python -m
rlm` in a subprocess, with the same arguments and the same result.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

KEY_SUFFIXES = ("_API_KEY",)
# the exits of a command that did its job: 0, or 5 for a run that answered with an answer
# no data-dependent output shows (`final('ok')`, a test's stand-in answer: rlm.outcome)
ANSWERED = (0, 5)


def call(code: str, content: str = "") -> dict:
    """One scripted reply: a `python` tool call running `code`."""
    return {"content": content, "tool_calls": [{"name": "python", "arguments": {"code": code}}]}


def script(path: Path, replies: list | dict) -> str:
    """Write `replies` for a script: model at `path`; returns the model name."""
    path.write_text(json.dumps(replies))
    return f"script:{path}"


def rlm(*args: str, cwd: Path, env: Mapping[str, str | None] | None = None,
        stdin: str | None = None, check: bool = False, process: bool = False,
        timeout: float = 240) -> subprocess.CompletedProcess:
    """`rlm ARGS` in `cwd`, with the test's environment changed by `env` (a None value
    removes the variable) and no provider keys. `check` raises on an exit not in
    `ANSWERED`, with the tail of stderr. `process=True`: a real subprocess (`python -P -m rlm`, like the console
    script: the cwd is not on sys.path), killed after `timeout` seconds; in this process the
    test's own timeout (pytest-timeout) is the guard against a hang."""
    changes: dict[str, str | None] = {k: None for k in os.environ if k.endswith(KEY_SUFFIXES)}
    changes.update(env or {})
    if process:
        full = {k: v for k, v in {**os.environ, **changes}.items() if v is not None}
        proc = subprocess.run([sys.executable, "-P", "-m", "rlm", *args], cwd=cwd, env=full,
                              input=stdin, capture_output=True, text=True, timeout=timeout)
    else:
        proc = _in_process(list(args), Path(cwd), changes, stdin)
    if check and proc.returncode not in ANSWERED:
        raise AssertionError(f"rlm {' '.join(args)} exited {proc.returncode}:\n"
                             f"{proc.stderr[-3000:]}")
    return proc


def _in_process(argv: list[str], cwd: Path, changes: Mapping[str, str | None],
                stdin: str | None) -> subprocess.CompletedProcess:
    from rlm.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with _environ(changes), _cwd(cwd), _sigint_kept(), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        saved_stdin = sys.stdin
        sys.stdin = io.StringIO(stdin or "")
        try:
            code = main(argv)
        except SystemExit as e:  # argparse's usage errors: what the interpreter makes of it
            code = _exit_code(e.code)
        finally:
            sys.stdin = saved_stdin
    return subprocess.CompletedProcess(["rlm", *argv], code, out.getvalue(), err.getvalue())


def _exit_code(code: object) -> int:
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1


@contextlib.contextmanager
def _environ(changes: Mapping[str, str | None]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in changes}
    try:
        for k, v in changes.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _cwd(path: Path) -> Iterator[None]:
    saved = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(saved)


@contextlib.contextmanager
def _sigint_kept() -> Iterator[None]:
    """main() installs its own SIGINT handler; the test process gets its own back."""
    saved = signal.getsignal(signal.SIGINT)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, saved)
