"""A cell printing 100 MB must not blow up host memory (issue: kernel runtime).

Measured in a fresh subprocess so the peak RSS is the host's alone.
"""

import json
import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent("""
    import json, resource, sys, tempfile
    from pathlib import Path
    from rlm.config import Config
    from rlm.kernel import Kernel
    d = Path(tempfile.mkdtemp())
    with Kernel(d, Config(home=d)) as k:
        k.execute("x = 1")
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
        r = k.execute(sys.argv[1], timeout=240)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
        full = (d / r.full_output_path).stat().st_size if r.full_output_path else 0
        print(json.dumps({"status": r.status, "chars": r.chars_total, "shaped": r.shaped,
                          "base": base, "peak": peak, "full": full}))
""")


@pytest.mark.parametrize("code", ["print('x' * 10**8)", "for _ in range(100): print('y' * 10**6)"])
def test_100mb_print_keeps_host_memory_bounded(code):
    out = subprocess.run([sys.executable, "-c", PROBE, code], capture_output=True, text=True,
                         timeout=280, check=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["status"] == "ok" and r["chars"] >= 10**8
    assert "elided" in r["shaped"] and len(r["shaped"]) < 25_000
    assert r["full"] >= 10**8  # every byte is on disk
    # before kernel_ext.streams bounded IOPub messages, the peak grew by ~290 MiB here
    assert r["peak"] - r["base"] < 100, r
