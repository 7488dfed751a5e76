"""Run a command or one test again as an unprivileged user (issue 26: every repro as root
AND as an unprivileged user). The one place a test drops to another user: no test hands
a path of its own to `setpriv` (tests/test_as_nobody.py fails on one that does).

nobody runs the system interpreter (this process's may sit under root's 0700 home: pyenv,
a venv) with this process's `sys.path`, each entry nobody cannot reach (a clone or a
site-packages under a 0700 directory) replaced by a world-readable mirror of hard links,
made once per process under the temp dir and removed at exit (1-2 s for a 2 GB
site-packages; nothing is copied). Where that cannot be done (not root, no setpriv, no
system python, a path on another filesystem than the temp dir) the test is skipped and
says why.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
SYSTEM_PYTHON = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
# the commands that run something as another user: only this file names them
DROP_PRIVILEGES = frozenset({"setpriv", "su", "sudo", "runuser", "setuidgid"})


def reachable(path: Path) -> bool:
    """Whether another user can read `path`: every ancestor searchable by others, the
    path itself readable (and searchable, for a directory)."""
    path = path.resolve()
    try:
        for parent in path.parents:
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                return False
        mode = os.stat(path).st_mode
    except OSError:
        return False
    need = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(mode) else 0)
    return mode & need == need


@functools.cache
def _mirrors() -> Path:
    # in /tmp itself (sticky, world-searchable), not under a private TMPDIR
    root = Path(tempfile.mkdtemp(prefix="rlm-nobody-paths-",
                                 dir="/tmp" if os.path.isdir("/tmp") else None))
    os.chmod(root, 0o755)
    atexit.register(shutil.rmtree, root, True)
    return root


def readable(path: Path) -> Path:
    """`path`, or, when another user cannot read it, its mirror of hard links."""
    path = path.resolve()
    if reachable(path):
        return path
    dst = _mirrors() / hashlib.sha256(str(path).encode()).hexdigest()[:16] / path.name
    if not dst.exists():
        dst.parent.mkdir(mode=0o755)
        os.chmod(dst.parent, 0o755)
        proc = subprocess.run(["cp", "-al", str(path), str(dst)], capture_output=True, text=True)
        if proc.returncode != 0 or not reachable(dst):
            pytest.skip(f"nobody cannot read {path}, and it cannot be mirrored with hard links "
                        f"under {_mirrors()}: {proc.stderr.strip()[:200]}")
    return dst


def pythonpath() -> str:
    """This process's sys.path, as nobody can import from it."""
    return os.pathsep.join(str(readable(Path(p))) for p in sys.path if p and os.path.exists(p))


def as_nobody(argv: list[str], env: dict[str, str] | None = None) -> list[str]:
    """`argv` (argv[0]: this interpreter) run as nobody with the system interpreter;
    `env`, when given, gets the PYTHONPATH nobody imports from. Skips where it cannot."""
    if os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists(SYSTEM_PYTHON):
        pytest.skip(f"needs root, setpriv and {SYSTEM_PYTHON} to run as nobody")
    if env is not None:
        env["PYTHONPATH"] = pythonpath()
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", SYSTEM_PYTHON,
            *argv[1:]]


def rerun_as_nobody(nodeid: str, timeout: float = 230) -> None:
    """Run the test `nodeid` (a path under tests/) in a pytest started as nobody, in a
    directory nobody can write."""
    base = Path(tempfile.mkdtemp(prefix="rlm-nobody-", dir="/tmp" if os.path.isdir("/tmp") else None))
    try:
        os.chmod(base, 0o777)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "RLM_"))}
        env["HOME"] = str(base)
        repo = readable(TESTS.parent)
        argv = as_nobody([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p",
                          "no:cacheprovider", f"--basetemp={base / 't'}", f"--rootdir={repo}",
                          str(repo / "tests" / nodeid)], env)
        proc = subprocess.run(argv, cwd=base, env=env, capture_output=True, text=True,
                              timeout=timeout)
        assert proc.returncode == 0 and "1 passed" in proc.stdout, \
            (proc.stdout + proc.stderr)[-3000:]
    finally:
        shutil.rmtree(base, ignore_errors=True)
