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

A key is masked in pieces too: any run of `MIN_PIECE` or more characters that begins or
ends a secret (a key cut by a cap, a head + tail shaping or a field limit) is masked like
the secret itself, in memory, in the log and on disk. Text that arrives in chunks (cell
output, model text) goes through a `StreamRedactor`, which holds back a chunk's tail while
it could be the start of a key, so a key split across chunks is redacted whole.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import re
import sys
import time
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from rlm import safeio

REDACTED = "[redacted]"
SECRET_ENV_SUFFIXES = ("_KEY", "_TOKEN", "_SECRET", "_PASSWORD", "_PASSWD", "_APIKEY")
MIN_SECRET_LEN = 8
MIN_PIECE = 16  # a run this long that begins or ends a secret is masked like the secret
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


# a URL in the environment that carries a credential in its query (a Jupyter server's
# `?token=`, `RLM_JUPYTER_URL` of a --live view, an API's `?api_key=`): the variable is a
# secret's carrier, and the credential a secret, whatever the variable is called
URL_ENV_SUFFIXES = ("_URL", "_URI")
_URL_CREDENTIAL = re.compile(r"[?&;](?:token|access_token|api_key|apikey|key|auth|password)"
                             r"=([^&;#\s]+)", re.IGNORECASE)


def url_credentials(value: str) -> list[str]:
    """The credentials a URL carries in its query (`?token=...`)."""
    return [m.group(1) for m in _URL_CREDENTIAL.finditer(value)]


def secret_url(name: str, value: str) -> bool:
    """An env var that is a URL carrying a credential in its query (held back from the
    kernel like a `..._TOKEN`, whatever it is called)."""
    return name.upper().endswith(URL_ENV_SUFFIXES) and bool(url_credentials(value))


def secret_values(environ: dict[str, str] | None = None) -> list[str]:
    """Values of env vars whose names look secret, and the credentials URLs in the
    environment carry, longest first."""
    env = os.environ if environ is None else environ
    # the names first: os.environ decodes each value it is asked for (asked a few times a
    # step, this was ~55 us with every value decoded)
    names = [k for k in env if k.upper().endswith(SECRET_ENV_SUFFIXES)]
    vals = {v for k in names if len(v := env[k]) >= MIN_SECRET_LEN}
    urls = [k for k in env if k.upper().endswith(URL_ENV_SUFFIXES)]
    vals |= {c for k in urls for c in url_credentials(env[k]) if len(c) >= MIN_SECRET_LEN}
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


def scrub_file(path: Path, secrets: list[str], start: int = 0, root: Path | None = None) -> int:
    """Mask every occurrence of each secret, and every cut-off piece of one (`piece_spans`),
    in `path`, in place, same length; returns the count. Only a regular file with one link
    is touched (never through a symlink, never a file that is also somewhere else).
    `start`: the bytes before it were scanned already (a file that only grew); the scan
    begins a page before it, at most, so a secret across it is still found whole.
    `root`: the directory the walk began at; no component below it is followed
    (rlm.safeio: a kernel that swaps a directory for a link mid-walk redirects nothing)."""
    try:
        fd = safeio.open_file(Path(root) if root is not None else Path(path).parent, path,
                              os.O_RDWR)
    except (OSError, ValueError):
        return 0
    found = 0
    try:
        st = os.fstat(fd)
        if st.st_size == 0:
            return 0
        at = start // mmap.ALLOCATIONGRANULARITY * mmap.ALLOCATIONGRANULARITY
        if at >= st.st_size:
            at = 0
        with mmap.mmap(fd, st.st_size - at, offset=at) as mm:
            found = mask_buffer(mm, secrets)
            if found:
                mm.flush()
    except (OSError, ValueError):
        return found
    finally:
        os.close(fd)
    return found


def mask_buffer(buf: Any, secrets: list[str]) -> int:
    """Mask, in place and same length, each secret and each cut-off piece of one in a
    writable buffer (mmap, bytearray), in UTF-8, UTF-16 and UTF-32; returns the count."""
    found = 0
    for enc in _ENCODINGS:
        star = "*".encode(enc)
        spans = _merge(span for s in secrets for span in piece_spans(buf, *_encoded(s, enc)))
        for a, b in spans:
            buf[a:b] = star * ((b - a) // len(star))
        found += len(spans)
    return found


def scrub_tree(root: Path, secrets: list[str] | None = None, since_ns: int = 0,
               append_only: Callable[[str], Any] | None = None) -> list[Path]:
    """`scrub_file` on every file under `root` modified at or after `since_ns` (except the
    session log); returns the files that held a secret. Nothing to do without secrets."""
    secrets = known_secrets() if secrets is None else secrets
    if not secrets:
        return []
    hit = []
    seen = _scanned_for(secrets)
    start = time.time_ns()
    overlap = max(len(s.encode("utf-32-le")) for s in secrets)
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if name in SCRUB_SKIP:
                continue
            path = os.path.join(dirpath, name)
            with contextlib.suppress(OSError):
                st = os.lstat(path)
                if st.st_mtime_ns < since_ns:
                    continue
                # taken before the scan: a write during it or after it changes the size or
                # the times, and the file is scanned again
                sig = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
                before = seen.get(path)
                if before == sig:
                    continue  # scanned since its last change (inside the mtime slack)
                # a file that only grew since (the snapshot journal, the cell records):
                # its new bytes, from a secret's length before them
                from_byte = 0
                if (append_only is not None and before is not None and before[:2] == sig[:2]
                        and before[2] < sig[2] and append_only(name)):
                    from_byte = max(0, before[2] - overlap)
                if scrub_file(Path(path), secrets, from_byte, root):
                    hit.append(Path(path))
                if len(seen) >= _SCANNED_MAX:
                    seen.clear()
                # the size is always kept (only growth reads it); the rest only once the
                # mtime is settled, as what lets an unchanged file be skipped
                seen[path] = sig if _settled(st.st_mtime_ns, start) else (*sig[:3], -1, -1)
    return hit


# path -> (dev, inode, size, mtime, ctime) when it was last scanned, for one list of
# secrets: after each cell the scrub looks at every file changed in the last seconds (the
# mtime slack), and most of them (earlier cells' spools, data files) did not change since
_SCANNED_MAX = 65_536
_scanned: dict[tuple[str, ...], dict[str, tuple[int, ...]]] = {}
# A file is remembered as scanned only when its mtime is fine-grained (not a whole
# millisecond: a file system with coarse times could give a later write the same mtime)
# and this much older than the scan: any write after the scan then gets a later mtime,
# whatever the clock tick the file system stamps with.
_SETTLED_NS = 50_000_000


def _settled(mtime_ns: int, scan_ns: int) -> bool:
    return mtime_ns % 1_000_000 != 0 and scan_ns - mtime_ns > _SETTLED_NS


def _scanned_for(secrets: list[str]) -> dict[str, tuple[int, ...]]:
    key = tuple(secrets)
    seen = _scanned.get(key)
    if seen is None:  # other secrets (one remembered since): every file is scanned again
        _scanned.clear()
        seen = _scanned[key] = {}
    return seen


SCRUB_MARK = ".scrubbed"  # in the session dir: its mtime is when the last scrub began
SCRUB_SLACK_NS = 2_000_000_000  # file mtimes are coarser than time.time_ns()
SCRUB_MARK_EVERY_NS = 1_000_000_000  # the mark moves at most this often (a cell a few ms)


def scrub_session(session_dir: Path, since_ns: int | None = None, *,
                  append_only: Callable[[str], Any] | None = None) -> list[Path]:
    """`scrub_tree` over the files written since the session's last scrub (whichever
    process ran it; all of them without a mark) or `since_ns` if earlier, then move the
    mark. Cheap when nothing was written; nothing at all without secrets.
    `append_only(name)`: a file its writer only appends to, of which only what it gained
    since its last scan is read (kernel_ext.wire.APPEND_ONLY_FILES)."""
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
    hit = scrub_tree(Path(session_dir), secrets, max(0, since - SCRUB_SLACK_NS) if since else 0,
                     append_only)
    if 0 <= now - last < SCRUB_MARK_EVERY_NS:
        return hit  # an older mark only makes the next scrub look at more files
    with contextlib.suppress(OSError):
        fd = safeio.open_file(Path(session_dir), SCRUB_MARK, os.O_WRONLY | os.O_CREAT)
        try:
            os.utime(fd, ns=(now, now))
        finally:
            os.close(fd)
    return hit


# what a kernel writes into a session dir between its host's scrubs: a new file in one of
# these changes the folder's mtime (a cell's spooled output, a snapshot's data files)
KERNEL_WRITES = ("artifacts", "snapshot", "runtime")


def scrub_left_behind(sessions: Path, is_free: Callable[[Path], bool],
                      skip: Path | None = None) -> list[Path]:
    """`scrub_session` on every session under `sessions` that a host left unscrubbed: a
    folder the kernel writes into changed after the session's scrub mark, and no process
    holds the session (`is_free`). A host SIGKILLed mid-cell cannot scrub what its kernel
    spooled; without this the key stayed in `artifacts/cell-*.txt` until that very
    session was resumed with the key set. Any later run with the key scrubs it now. Cheap:
    a few stats per session; nothing at all without secrets."""
    if not known_secrets():
        return []
    hit: list[Path] = []
    with contextlib.suppress(OSError):
        for session_dir in sorted(sessions.iterdir()):
            if session_dir == skip or not session_dir.is_dir() or not _unscrubbed(session_dir):
                continue
            if is_free(session_dir):
                hit += scrub_session(session_dir)
    return hit


def _unscrubbed(session_dir: Path) -> bool:
    try:
        mark = os.lstat(session_dir / SCRUB_MARK).st_mtime_ns
    except OSError:
        mark = 0
    for name in KERNEL_WRITES:
        with contextlib.suppress(OSError):
            if os.lstat(session_dir / name).st_mtime_ns > mark:
                return True
    return False


def _offsets(secret: str, encoding: str) -> list[int]:
    """Where each character of `secret` starts in its `encoding`, plus the total length."""
    offsets = [0]
    for ch in secret:
        offsets.append(offsets[-1] + len(ch.encode(encoding)))
    return offsets


@lru_cache(maxsize=64)  # the scrub after each cell asks for each secret in each encoding
def _encoded(secret: str, encoding: str) -> tuple[bytes, tuple[int, ...]]:
    """`secret` in `encoding`, and `_offsets` of it."""
    return secret.encode(encoding), tuple(_offsets(secret, encoding))


def _common_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def piece_spans(hay: Any, whole: Any, offsets: Sequence[int]) -> Iterator[tuple[int, int]]:
    """[start, end) of each run in `hay` of at least MIN_PIECE characters that begins or
    ends the secret `whole` (the secret itself included). `hay` and `whole` are both text,
    or both bytes in one encoding; `offsets` (`_offsets`) keeps cuts on character bounds."""
    if not whole:
        return
    k = min(MIN_PIECE, len(offsets) - 1)
    head, tail = whole[:offsets[k]], whole[offsets[-1 - k]:]
    at = hay.find(head)
    while at != -1:
        n = _common_prefix(hay[at:at + len(whole)], whole)
        yield at, at + offsets[bisect_right(offsets, n) - 1]
        at = hay.find(head, at + 1)
    at = hay.find(tail)
    from_end = [offsets[-1] - o for o in reversed(offsets)] if at != -1 else []
    while at != -1:
        end = at + len(tail)
        n = _common_prefix(hay[max(0, end - len(whole)):end][::-1], whole[::-1])
        yield end - from_end[bisect_right(from_end, n) - 1], end
        at = hay.find(tail, at + 1)


def _merge(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted spans, overlapping ones joined (touching ones are two keys: two masks)."""
    merged: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if merged and a < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
        else:
            merged.append((a, b))
    return merged


def secret_spans(text: str, secrets: Iterable[str]) -> list[tuple[int, int]]:
    """Sorted, merged [start, end) spans of `text` to mask: every secret, and every run of
    MIN_PIECE or more characters that begins or ends one."""
    return _merge(span for s in secrets for span in piece_spans(text, s, range(len(s) + 1)))


def _mask(text: str, spans: list[tuple[int, int]]) -> str:
    parts, last = [], 0
    for a, b in spans:
        parts += [text[last:a], REDACTED]
        last = b
    return "".join(parts) + text[last:]


def redact_text(text: str, secrets: list[str], *, patterns: bool = True) -> str:
    """`text` with each secret and each cut-off piece of one (`secret_spans`) replaced by
    REDACTED; with `patterns`, well-known key shapes too."""
    spans = secret_spans(text, secrets)
    if spans:
        text = _mask(text, spans)
    return SECRET_PATTERNS.sub(REDACTED, text) if patterns else text


class StreamRedactor:
    """Redacts text that arrives in chunks as if it had arrived whole: `feed` returns what
    can be handed on now, `close` the rest. A chunk's tail that could be part of a key (the
    longest one that is a substring of a secret, at most the longest secret's length - 1)
    is held back until the next chunk or the end, so a key split across chunks is still
    seen whole; text that cannot be (a line's end, say) goes out at once."""

    def __init__(self, secrets: list[str] | None = None) -> None:
        self.secrets = known_secrets() if secrets is None else list(secrets)
        self.hold = max((len(s) for s in self.secrets), default=1) - 1
        self._pending = ""

    def feed(self, chunk: str) -> str:
        text = self._pending + chunk
        if not self.secrets:
            return text
        spans = secret_spans(text, self.secrets)
        cut = len(text) - self._tail(text)
        for a, b in spans:
            if a < cut < b:  # never hand on half a span: it may grow with the next chunk
                cut = a
        self._pending = text[cut:]
        return _mask(text[:cut], [(a, b) for a, b in spans if b <= cut])

    def close(self) -> str:
        text, self._pending = self._pending, ""
        return redact_text(text, self.secrets, patterns=False)

    def _tail(self, text: str) -> int:
        """Length of the longest end of `text` (at most `hold`) found inside a secret (a
        shorter end of such an end is inside it too: a binary search finds it)."""
        lo, hi = 0, min(self.hold, len(text))
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if any(text[-mid:] in s for s in self.secrets):
                lo = mid
            else:
                hi = mid - 1
        return lo


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
