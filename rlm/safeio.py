"""One safe open for every path the host reads or writes where a kernel may have been.

A cell can plant a symbolic link, a FIFO or a hard link in any directory the kernel may
write (the working directory, its session's `snapshot/` and `runtime/`, and, without the
sandbox, anywhere the user can write). A host that opens `runtime/kernel.log` or
`.agent/state.md` by path follows such a link and writes where the cell pointed: the
user's config, another session's log. Refusing known spellings does not close that; this
module does, for every path below a directory the host trusts (`root`: the session
directory, the working directory, the user's config directory):

- every component below `root` is opened relative to its parent's descriptor with
  `O_NOFOLLOW` (a link anywhere in the path is refused, not only at its end, and a
  component swapped for a link between two steps is refused too: there is no second
  lookup by name);
- the file itself must be a regular file (never a FIFO a reader would hang on, a device or
  a directory), opened without blocking; one the host writes must have one link only (a
  hard link a cell made to a file elsewhere is refused);
- new files are created exclusively (`O_EXCL`) where a writer must not inherit what a cell
  left (temporary files, an artifact's name), and atomic writes rename within the parent's
  descriptor.

What crosses is `UnsafePath`, an OSError: callers that already handle a missing or
unreadable file handle this one the same way, and a user who meets it reads which path
and why. `tests/test_host_file_opens.py` walks every module of `rlm/` (ast) and fails on
a file opened any other way outside the short list of paths no kernel can reach.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
_WRITE = os.O_WRONLY | os.O_RDWR


class UnsafePath(OSError):
    """A path the host will not follow: a link, a non-regular file, a file with other names."""

    def __init__(self, path: Path | str, what: str):
        super().__init__(errno.ELOOP if "symbolic link" in what else errno.EINVAL,
                         f"{path} is {what}; rlm does not open it (something that can write "
                         "there, e.g. a cell, may have put it there to redirect the host): "
                         "remove it")
        self.filename = str(path)


def _rel(root: Path, path: Path | str) -> Path:
    """`path` relative to `root`: `path` is absolute (or begins with a relative `root`)
    and lies under it, or is relative to it already. ValueError when it is outside."""
    p, root = Path(path), Path(root)
    if not p.is_absolute() and not root.is_absolute() and root.parts \
            and p.parts[:len(root.parts)] == root.parts:
        p = Path(os.path.abspath(p))
    if p.is_absolute():
        return Path(os.path.abspath(p)).relative_to(os.path.abspath(root))
    return p


def _parts(root: Path, path: Path | str) -> list[str]:
    """The components of `path` below `root` (see `_rel`)."""
    parts = list(_rel(root, path).parts)
    if not parts or any(c in ("..", ".", "") or "/" in c for c in parts):
        raise ValueError(f"{path} is not a path below {root}")
    return parts


def _open_root(root: Path, create: bool, dir_mode: int = PRIVATE_DIR) -> int:
    """The trusted directory itself (followed: the host chose it)."""
    if create:
        os.makedirs(root, mode=dir_mode, exist_ok=True)
    return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def _step(parent: int, name: str, shown: Path, create: bool, dir_mode: int = PRIVATE_DIR) -> int:
    """The directory `name` in `parent`, never through a link; made (`dir_mode`) when
    `create`."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(name, flags, dir_fd=parent)
    except FileNotFoundError:
        if not create:
            raise
        try:
            os.mkdir(name, dir_mode, dir_fd=parent)
        except FileExistsError:
            pass
        return _step(parent, name, shown, False)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _refusal(parent, name, shown) from None
        raise


def _refusal(parent: int, name: str, shown: Path) -> UnsafePath:
    try:
        mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
    except OSError:
        return UnsafePath(shown, "not what rlm expects")
    if stat.S_ISLNK(mode):
        return UnsafePath(shown, "a symbolic link")
    if stat.S_ISDIR(mode):
        return UnsafePath(shown, "a directory")
    return UnsafePath(shown, "not a directory" if not stat.S_ISREG(mode) else "a file")


@contextmanager
def parent_dir(root: Path, path: Path | str, *, create: bool = False,
               dir_mode: int = PRIVATE_DIR) -> Iterator[tuple[int, str]]:
    """(descriptor of the directory holding `path`, its last name), every component
    below `root` opened without following a link; `create`: missing directories are made
    (`dir_mode`, owner-only by default). The descriptor is closed on exit."""
    root = Path(root)
    parts = _parts(root, path)
    fd = _open_root(root, create, dir_mode)
    shown = root
    try:
        for name in parts[:-1]:
            shown = shown / name
            nxt = _step(fd, name, shown, create, dir_mode)
            os.close(fd)
            fd = nxt
        yield fd, parts[-1]
    finally:
        os.close(fd)


def open_file(root: Path, path: Path | str, flags: int = os.O_RDONLY,
              mode: int = PRIVATE_FILE, *, create_dirs: bool = False) -> int:
    """`os.open` of a regular file below `root` (see the module doc). Writing opens refuse
    a file with more than one link. The descriptor is blocking and close-on-exec."""
    with parent_dir(root, path, create=create_dirs) as (d, name):
        return _open_in(d, name, flags, mode, Path(root) / _rel(root, path))


def _open_in(d: int, name: str, flags: int, mode: int, shown: Path) -> int:
    try:
        fd = os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode, dir_fd=d)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UnsafePath(shown, "a symbolic link") from None
        if e.errno == errno.EISDIR:
            raise UnsafePath(shown, "a directory") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePath(shown, "not a regular file (a FIFO, socket, device or directory)")
        if flags & _WRITE and st.st_nlink > 1:
            raise UnsafePath(shown, f"a file with {st.st_nlink} names (a hard link)")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bytes(root: Path, path: Path | str, limit: int | None = None) -> bytes:
    """A regular file's bytes below `root`; at most `limit` when given."""
    fd = open_file(root, path)
    with os.fdopen(fd, "rb") as f:
        return f.read() if limit is None else f.read(limit)


def read_text(root: Path, path: Path | str, limit: int | None = None,
              errors: str = "strict") -> str:
    return read_bytes(root, path, limit).decode("utf-8", errors)


def create_new(root: Path, path: Path | str, mode: int = PRIVATE_FILE, *,
               create_dirs: bool = False) -> int:
    """A new file below `root`, created exclusively (nothing a cell left is reused)."""
    return open_file(root, path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode,
                     create_dirs=create_dirs)


def open_append(root: Path, path: Path | str, mode: int = PRIVATE_FILE, *,
                create_dirs: bool = False) -> int:
    return open_file(root, path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode,
                     create_dirs=create_dirs)


def write_atomic(root: Path, path: Path | str, data: bytes, *, mode: int = PRIVATE_FILE,
                 durable: bool = True, create_dirs: bool = False) -> None:
    """Replace `path` below `root` with `data`: a new temporary file (random name, O_EXCL)
    in the same directory, fsynced when `durable`, renamed over it within the directory's
    descriptor (a link at the name is replaced, never followed), then the directory
    fsynced when `durable`."""
    with parent_dir(root, path, create=create_dirs) as (d, name):
        tmp = f".{name}.{secrets.token_hex(6)}.tmp"
        fd = _open_in(d, tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode, Path(root) / tmp)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                if durable:
                    os.fsync(f.fileno())
            os.replace(tmp, name, src_dir_fd=d, dst_dir_fd=d)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=d)
            except OSError:
                pass
            raise
        if durable:
            os.fsync(d)


def make_dirs(root: Path, path: Path | str, dir_mode: int = PRIVATE_DIR) -> Path:
    """`path` below `root` as a directory, each component made (`dir_mode`) if missing and
    never a link; an existing owner-only one (the default) is made owner-only again.
    Returns the path."""
    full = Path(root) / _rel(root, path)
    with parent_dir(root, Path(path) / "_", create=True, dir_mode=dir_mode) as (d, _):
        if dir_mode == PRIVATE_DIR:
            os.chmod(d, PRIVATE_DIR)
    return full


def unlink(root: Path, path: Path | str, *, missing_ok: bool = True) -> None:
    """Remove the name `path` below `root` (a link is removed, never followed)."""
    try:
        with parent_dir(root, path) as (d, name):
            os.unlink(name, dir_fd=d)
    except FileNotFoundError:
        if not missing_ok:
            raise
