"""A real `jupyter kernelgateway` on 127.0.0.1 for tests/test_gateway.py and bench_gateway.py.

The kernelspec it serves (`rlm-remote`) loads kernel_ext the way a remote image would:
`--IPKernelApp.extensions=kernel_ext` in its argv. Readiness is the gateway's own
"is available at http://127.0.0.1:PORT" log line, read from its output; no sleeps.
Its first port to try is one the OS hands out as free (not a fixed 18888 counted up from):
a gateway killed by a test frees its port, and a fixed range let another test's gateway,
with the same token, take that port, so a restart meant to fail reached the wrong gateway.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

KERNEL_NAME = "rlm-remote"
PLAIN_KERNEL_NAME = "python-plain"  # an image's plain kernelspec: kernel_ext installed, not loaded
_READY = re.compile(rb"is available at (http://127\.0\.0\.1:\d+)")
REPO = Path(__file__).resolve().parents[1]


@dataclass
class Gateway:
    url: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def spec(self) -> str:
        return f"gateway:{self.url}#{KERNEL_NAME}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def write_kernelspec(share: Path, name: str = KERNEL_NAME, load_ext: bool = True) -> Path:
    spec_dir = share / "kernels" / name
    spec_dir.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}",
            "--HistoryManager.hist_file=:memory:"]
    if load_ext:
        argv.append("--IPKernelApp.extensions=kernel_ext")
    # the image's environment: kernel_ext importable (here: this checkout)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": argv, "display_name": "rlm remote", "language": "python",
        "env": {"PYTHONPATH": str(REPO)},
    }))
    return spec_dir


@contextlib.contextmanager
def running_gateway(root: Path, token: str, *, time_to_dead: float = 0.5,
                    start_timeout: float = 300.0) -> Iterator[Gateway]:
    """Start `jupyter kernelgateway` with its own kernelspec dir and token; stop it after."""
    share = root / "share" / "jupyter"
    write_kernelspec(share)
    write_kernelspec(share, PLAIN_KERNEL_NAME, load_ext=False)
    log_path = root / "gateway.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLM_")}
    env.update(JUPYTER_PATH=str(share), JUPYTER_DATA_DIR=str(root / "data"),
               JUPYTER_RUNTIME_DIR=str(root / "runtime"), JUPYTER_CONFIG_DIR=str(root / "cfg"),
               KG_AUTH_TOKEN=token)
    argv = [sys.executable, "-m", "jupyter", "kernelgateway",
            "--KernelGatewayApp.ip=127.0.0.1", f"--KernelGatewayApp.port={_free_port()}",
            "--KernelGatewayApp.port_retries=200",
            f"--KernelGatewayApp.default_kernel_name={KERNEL_NAME}",
            f"--KernelRestarter.time_to_dead={time_to_dead}",
            "--JupyterWebsocketPersonality.list_kernels=True"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            cwd=root, start_new_session=True)
    assert proc.stderr is not None
    url = None
    seen = b""
    with open(log_path, "wb") as log:
        sel = selectors.DefaultSelector()
        sel.register(proc.stderr, selectors.EVENT_READ)
        deadline = time.monotonic() + start_timeout
        while url is None and time.monotonic() < deadline and proc.poll() is None:
            if not sel.select(timeout=max(deadline - time.monotonic(), 0.0)):
                break
            chunk = os.read(proc.stderr.fileno(), 65536)
            if not chunk:
                break
            log.write(chunk)
            seen += chunk
            m = _READY.search(seen)
            if m:
                url = m.group(1).decode()
        sel.close()
    if url is None:
        _stop(proc)
        raise RuntimeError(f"the kernel gateway did not start:\n{log_path.read_text()[-3000:]}")
    # keep draining its output into the log, so a full pipe never blocks the gateway
    drain = subprocess.Popen(["cat"], stdin=proc.stderr, stdout=open(log_path, "ab"))  # noqa: SIM115
    try:
        yield Gateway(url, proc, log_path)
    finally:
        _stop(proc)
        drain.wait(timeout=10)


def _free_port() -> int:
    """A port the OS picks from its ephemeral range (port_retries covers the short race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
