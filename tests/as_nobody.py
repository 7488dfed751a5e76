"""Run one test again as an unprivileged user (issue 26: every repro as root AND as an
unprivileged user). `rerun_as_nobody(nodeid)` runs that test in a pytest started through
`setpriv` as nobody, with the system interpreter and this venv's packages (the venv's own
interpreter may sit under root's 0700 home), in a directory nobody can write; skips where
that cannot be done (not root, no setpriv, no system python)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def rerun_as_nobody(nodeid: str, timeout: float = 230) -> None:
    python = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists(python):
        pytest.skip("needs root, setpriv and the system python to run as nobody")
    base = Path(tempfile.mkdtemp(prefix="rlm-nobody-"))
    try:
        os.chmod(base, 0o777)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "RLM_"))}
        env.update(PYTHONPATH=os.pathsep.join(p for p in sys.path if p), HOME=str(base))
        proc = subprocess.run(
            ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", python, "-m",
             "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", f"--basetemp={base / 't'}",
             f"--rootdir={TESTS.parent}", str(TESTS / nodeid)],
            cwd=base, env=env, capture_output=True, text=True, timeout=timeout)
        assert proc.returncode == 0 and "1 passed" in proc.stdout, \
            (proc.stdout + proc.stderr)[-3000:]
    finally:
        shutil.rmtree(base, ignore_errors=True)
