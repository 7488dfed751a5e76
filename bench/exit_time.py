"""How long `rlm run` takes to exit after its last line (issue 31: "never silent").

The same scripted run twice per round, in the same interpreter and machine state:
  baseline  `python -c "... main(argv)"`   (argv given: no gc.freeze at the end)
  rlm       `python -m rlm run ...`        (the process entry: gc.freeze before exit)
Prints the seconds from the last line printed to the process's exit, and the ratio.

    python -m bench.exit_time --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPLIES = [{"content": "", "tool_calls": [{"name": "python", "arguments": {
    "code": "import pandas as pd\ndf = pd.DataFrame({'x': range(1000)})\nprint(df.x.sum())"}}]},
    {"content": "", "tool_calls": [{"name": "python", "arguments": {
        "code": "final(str(df.x.sum()))"}}]}]


def tail_time(argv: list[str], env: dict[str, str], cwd: str) -> float:
    """Seconds between the last line the command printed and its exit."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=env, cwd=cwd)
    last = time.monotonic()
    assert proc.stdout is not None
    for _ in proc.stdout:
        last = time.monotonic()
    proc.wait()
    return time.monotonic() - last


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "s.json"
        script.write_text(json.dumps(REPLIES))
        env = {**os.environ, "RLM_HOME": str(Path(tmp) / "home")}
        run = ["run", "sum x", "--model", f"script:{script}"]
        base = [sys.executable, "-c", "import sys; from rlm.cli.main import main; "
                "sys.exit(main(sys.argv[1:]))", *run]
        new = [sys.executable, "-m", "rlm", *run]
        before, after = [], []
        for _ in range(args.rounds):
            before.append(tail_time(base, env, tmp))
            after.append(tail_time(new, env, tmp))
    b, a = statistics.median(before), statistics.median(after)
    print(f"exit after the last line, median of {args.rounds}: without gc.freeze {b:.2f} s, "
          f"with {a:.2f} s (ratio {b / a if a else float('inf'):.1f}x)")
    print("rounds:", [f"{x:.2f}" for x in before], [f"{x:.2f}" for x in after])


if __name__ == "__main__":
    main()
