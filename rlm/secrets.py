"""Keeping secrets out of what rlm writes.

`known_secrets()` are the values of environment variables whose names look secret
(…_KEY, …_TOKEN, …_SECRET, …_PASSWORD), plus any `remember`ed after they were taken out
of the environment: the session store replaces them in every line it appends, so even a
cell that manages to print a key does not put it on disk. Exports also replace well-known
key *patterns* (`redact_text(..., patterns=True)`); the log does not, so real data is never
mangled by a false match.

Everything else under a session directory is scrubbed after each cell (`scrub_tree`,
called by the host's cell collector): spooled outputs, artifacts, the kernel's snapshot
data files, logs. The kernel never learns the secrets (not even hashes of them), so it
cannot redact; the host, which knows them, rewrites every occurrence in place with a mask
of the SAME byte length ("*" in the same encoding: UTF-8, UTF-16-LE or UTF-32-LE, the
last being how numpy stores text). Same length means file sizes and offsets stay valid:
a pickled str still unpickles (to the masked text), a manifest's offsets still point at
the right bytes, a spooled output's path still works.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import re
import stat
import sys
import time
from collections.abc import Iterable
from pathlib import Path

REDACTED = "[redacted]"
SECRET_ENV_SUFFIXES = ("_KEY", "_TOKEN", "_SECRET", "_PASSWORD", "_PASSWD", "_APIKEY")
MIN_SECRET_LEN = 8
SECRET_PATTERNS = re.compile(
    r"sk-(?:ant-|proj-)?[A-Za-z0-9_\-]{16,}"  # OpenAI / Anthropic
    r"|gh[pousr]_[A-Za-z0-9]{30,}"  # GitHub
    r"|github_pat_[A-Za-z0-9_]{30,}"
    r"|AKIA[0-9A-Z]{16}"  # AWS access key id
    r"|AIza[0-9A-Za-z_\-]{35}"  # Google
    r"|xox[abprs]-[A-Za-z0-9\-]{10,}"  # Slack
    r"|hf_[A-Za-z0-9]{30,}"  # Hugging Face
    r"|gsk_[A-Za-z0-9]{30,}"  # Groq
)


def secret_values(environ: dict[str, str] | None = None) -> list[str]:
    """Values of env vars whose names look secret, longest first."""
    env = os.environ if environ is None else environ
    vals = {v for k, v in env.items()
            if k.upper().endswith(SECRET_ENV_SUFFIXES) and len(v) >= MIN_SECRET_LEN}
    return sorted(vals, key=len, reverse=True)


_remembered: set[str] = set()


def remember(values: Iterable[str]) -> None:
    """Keep secret values known after they leave os.environ (see rlm.cli.keys)."""
    _remembered.update(v for v in values if len(v) >= MIN_SECRET_LEN)


def known_secrets(environ: dict[str, str] | None = None) -> list[str]:
    """`secret_values(environ)` plus the remembered ones, longest first."""
    vals = set(secret_values(environ)) | _remembered
    return sorted(vals, key=len, reverse=True)


_ENCODINGS = ("utf-8", "utf-16-le", "utf-32-le")
SCRUB_SKIP = frozenset({"session.jsonl", ".scrubbed"})  # redacted line by line when appended


def scrub_file(path: Path, secrets: list[str]) -> int:
    """Mask every occurrence of each secret in `path`, in place, same length; returns the
    count. Only a regular file with one link is touched (never through a symlink, never a
    file that is also somewhere else)."""
    needles = [(s.encode(enc), ("*" * len(s)).encode(enc)) for s in secrets for enc in _ENCODINGS]
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return 0
    found = 0
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_size == 0:
            return 0
        with mmap.mmap(fd, 0) as mm:
            for needle, mask in needles:
                at = mm.find(needle)
                while at != -1:
                    mm[at:at + len(needle)] = mask
                    found += 1
                    at = mm.find(needle, at + len(needle))
            if found:
                mm.flush()
    except (OSError, ValueError):
        return found
    finally:
        os.close(fd)
    return found


def scrub_tree(root: Path, secrets: list[str] | None = None, since_ns: int = 0) -> list[Path]:
    """`scrub_file` on every file under `root` modified at or after `since_ns` (except the
    session log); returns the files that held a secret. Nothing to do without secrets."""
    secrets = known_secrets() if secrets is None else secrets
    if not secrets:
        return []
    hit = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if name in SCRUB_SKIP:
                continue
            path = Path(dirpath) / name
            with contextlib.suppress(OSError):
                if os.lstat(path).st_mtime_ns >= since_ns and scrub_file(path, secrets):
                    hit.append(path)
    return hit


SCRUB_MARK = ".scrubbed"  # in the session dir: its mtime is when the last scrub began
SCRUB_SLACK_NS = 2_000_000_000  # file mtimes are coarser than time.time_ns()


def scrub_session(session_dir: Path, since_ns: int | None = None) -> list[Path]:
    """`scrub_tree` over the files written since the session's last scrub (whichever
    process ran it; all of them without a mark) or `since_ns` if earlier, then move the
    mark. Cheap when nothing was written; nothing at all without secrets."""
    secrets = known_secrets()
    if not secrets:
        return []
    mark = Path(session_dir) / SCRUB_MARK
    try:
        last = os.lstat(mark).st_mtime_ns
    except OSError:
        last = 0
    since = min(last, since_ns) if since_ns is not None else last
    now = time.time_ns()
    hit = scrub_tree(Path(session_dir), secrets, max(0, since - SCRUB_SLACK_NS) if since else 0)
    with contextlib.suppress(OSError):
        fd = os.open(mark, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        os.close(fd)
        os.utime(mark, ns=(now, now), follow_symlinks=False)
    return hit


def redact_text(text: str, secrets: list[str], *, patterns: bool = True) -> str:
    for value in secrets:
        if value in text:
            text = text.replace(value, REDACTED)
    return SECRET_PATTERNS.sub(REDACTED, text) if patterns else text


# -- keeping keys out of the host's /proc/<pid>/environ ------------------------------------

SECRETS_FD_ENV = "RLM_SECRETS_FD"
_PR_SET_DUMPABLE = 4
_PIPE_MAX = 60_000  # below the pipe buffer: the write never blocks before the exec


def secret_names(environ: dict[str, str] | None = None) -> list[str]:
    env = os.environ if environ is None else environ
    return sorted(k for k, v in env.items()
                  if k.upper().endswith(SECRET_ENV_SUFFIXES) and len(v) >= MIN_SECRET_LEN)


def set_nondumpable() -> bool:
    """prctl(PR_SET_DUMPABLE, 0): other processes of the same user (a cell, say) can no
    longer read this process's /proc/<pid>/environ, mem or attach with ptrace. Root still
    can. False where the call is not available."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def protect_process_secrets() -> None:
    """Call first thing in a process entry point (the `rlm` CLI, the worker).

    /proc/<pid>/environ shows the environment block a process was exec'd with, whatever
    it later does to os.environ, and a cell runs as the same user as its host. So when
    secret-looking variables are set, the process re-execs itself with the same command
    line minus those variables and hands them over through an inherited pipe; the new
    image reads them into os.environ (where litellm finds them, and which child processes
    inherit as before: the kernel's env is filtered separately) and `remember`s them for
    redaction. Either way the process is then made non-dumpable (see `set_nondumpable`).
    """
    fd_text = os.environ.pop(SECRETS_FD_ENV, None)
    if fd_text is not None:  # the re-exec'd image: take the keys back from the pipe
        chunks = []
        with contextlib.suppress(OSError, ValueError):
            fd = int(fd_text)
            while chunk := os.read(fd, 65536):
                chunks.append(chunk)
            os.close(fd)
        with contextlib.suppress(ValueError):
            handed = json.loads(b"".join(chunks) or b"{}")
            if isinstance(handed, dict):
                os.environ.update({str(k): str(v) for k, v in handed.items()})
                remember(str(v) for v in handed.values())
        set_nondumpable()
        return
    names = secret_names()
    payload = json.dumps({k: os.environ[k] for k in names}).encode()
    argv = list(getattr(sys, "orig_argv", []) or [])
    if names and argv and len(payload) <= _PIPE_MAX and os.path.exists(sys.executable):
        read_fd, write_fd = os.pipe()
        try:
            os.write(write_fd, payload)
            os.close(write_fd)
            os.set_inheritable(read_fd, True)
            env = {k: v for k, v in os.environ.items() if k not in names}
            env[SECRETS_FD_ENV] = str(read_fd)
            sys.stdout.flush()
            sys.stderr.flush()
            os.execve(sys.executable, [sys.executable, *argv[1:]], env)
        except OSError:  # could not re-exec: keep going, at least non-dumpable
            with contextlib.suppress(OSError):
                os.close(read_fd)
    set_nondumpable()
