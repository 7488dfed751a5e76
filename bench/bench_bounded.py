"""Issue 57: the host's peak RSS while one cell sends `--mb` MB of output, in each spelling,
against a cell printing 1 MB in the same run (each case in its own interpreter).

    python -m bench.bench_bounded [--mb 600]

Prints, per spelling: the host's peak RSS, the ratio to the 1 MB baseline, and what the
cell left on disk (spool + artifacts).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

_CHILD = """
import json, resource, sys, tempfile, time
from pathlib import Path
from rlm.config import Config
from rlm.kernel import Kernel
d = Path(tempfile.mkdtemp())
with Kernel(d, Config(home=d, sandbox=False)) as k:
    k.execute("import os, subprocess, base64; from IPython.display import display")
    t = time.perf_counter()
    r = k.execute(sys.argv[1], timeout=900)
    took = time.perf_counter() - t
    art = d / "artifacts"
    disk = sum(f.stat().st_size for f in art.iterdir()) if art.exists() else 0
    print(json.dumps({"peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "disk": disk / 2**20, "s": took, "status": r.status}))
"""


def spellings(mb: int) -> dict[str, str]:
    n = mb * 10**6
    return {
        "print in a loop (1 MB each)": f"for _ in range({mb}): print('y' * 10**6)",
        "one giant print": f"print('x' * {n})",
        "display text/plain": f"display({{'text/plain': 'x' * {n}}}, raw=True)",
        "display image/png": f"display({{'image/png': base64.b64encode(b'x' * {n // 4 * 3}).decode()}}, raw=True)",
        "os.write(1, ...)": f"os.write(1, b'z' * {n}); None",
        "a subprocess's output": f"subprocess.run(['head', '-c', '{n}', '/dev/zero']); None",
        "session.send, one message": ("ip = get_ipython(); ip.kernel.session.send("
                                      "ip.kernel.iopub_socket, 'stream', {'name': 'stdout', "
                                      f"'text': 'q' * {n}}}, parent=ip.kernel.get_parent()); None"),
        "60 KB displays, many": f"for _ in range({n // 60000}): display({{'text/plain': 'w' * 60000}}, raw=True)",
    }


def run(code: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", _CHILD, code], capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=600)
    args = ap.parse_args()
    base = run("print('b' * 10**6)")
    print(f"baseline (a 1 MB print): peak {base['peak']:.0f} MiB\n")
    print(f"| {args.mb} MB as | host peak RSS | / baseline | on disk | wall |\n|---|---:|---:|---:|---:|")
    for name, code in spellings(args.mb).items():
        r = run(code)
        print(f"| {name} | {r['peak']:.0f} MiB | {r['peak'] / base['peak']:.2f}x | "
              f"{r['disk']:.0f} MB | {r['s']:.1f} s |", flush=True)


if __name__ == "__main__":
    main()
