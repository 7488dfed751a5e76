"""A bare real kernel with kernel_ext loaded (jupyter_client directly), for snapshot tests."""

from __future__ import annotations

import ast
import os
import sys
import time
from pathlib import Path
from typing import Any

from jupyter_client import KernelManager

REPO = Path(__file__).resolve().parent.parent


class BareKernel:
    def __init__(self, snapdir: Path, extra_env: dict[str, str] | None = None) -> None:
        env = dict(os.environ, RLM_SNAPSHOT_DIR=str(snapdir), PYTHONPATH=str(REPO))
        env.update(extra_env or {})
        self.km = KernelManager(kernel_name="python3")
        self.km.kernel_cmd = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        self.km.start_kernel(env=env, extra_arguments=[
            "--IPKernelApp.extensions=kernel_ext", "--HistoryManager.hist_file=:memory:"])
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=30)

    def run(self, code: str, timeout: float = 30) -> dict[str, Any]:
        outputs: list[str] = []

        def hook(msg: dict[str, Any]) -> None:
            c = msg["content"]
            if msg["msg_type"] == "stream":
                outputs.append(c["text"])
            elif msg["msg_type"] == "error":
                outputs.append("\n".join(c["traceback"]))

        reply = self.kc.execute_interactive(code, timeout=timeout, output_hook=hook)
        content = reply["content"]
        assert content["status"] == "ok", "".join(outputs)
        return {"stdout": "".join(outputs)}

    def expr(self, expression: str, timeout: float = 30) -> Any:
        """Evaluate one expression via user_expressions; it must return a str."""
        reply = self.kc.execute_interactive("", silent=True, store_history=False, timeout=timeout,
                                            user_expressions={"r": expression})
        r = reply["content"]["user_expressions"]["r"]
        assert r["status"] == "ok", r
        return ast.literal_eval(r["data"]["text/plain"])

    def kill_from_inside(self, code: str = "import os; os._exit(1)", timeout: float = 30) -> None:
        self.kc.execute(code)
        deadline = time.monotonic() + timeout
        while self.km.is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not self.km.is_alive()
        self.close()

    def close(self) -> None:
        self.kc.stop_channels()
        if self.km.is_alive():
            self.km.shutdown_kernel(now=True)
        else:
            self.km.cleanup_resources()
