"""A real fan-out on the default model (issue 28): classify 40 short messages, one `local`
child each, against one `local` agent reading them all itself.

    python -m bench.fanout_local                 # both modes, 40 messages
    python -m bench.fanout_local --n 12 --modes fanout --transcripts out.jsonl

The messages and their labels are generated from templates with a fixed seed, written
before any run and not tuned after. Four labels: billing, shipping, technical, account.

  fanout   a scripted parent (the orchestration is what is measured, not its model) spawns
           one child per message with rlm_spawn(..., schema={"label": enum}) at
           --max-children 4 and gathers the labels; each child is a `local` agent with
           at most 4 turns (one that has no valid label by then fails)
  single   one `local` agent (`rlm run`, the user's path) given the messages as a JSON
           file, asked for the list of labels in order

Per mode: accuracy (labels right of n; a child that failed counts wrong), children failed,
wall seconds, tokens. The local model is one instance behind one lock: children's model
calls run one at a time, so the fan-out's concurrency only overlaps kernel starts and
cells. Each mode's session logs go to `--transcripts` (one JSON line per mode).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LABELS = ("billing", "shipping", "technical", "account")
SEED = 28
TEMPLATES = {
    "billing": ["I was charged twice for order {n}, please refund one of the payments.",
                "My invoice for {month} shows {amt} but my plan costs less.",
                "Why did my card get billed {amt} when I cancelled last week?",
                "Can I get a receipt with VAT for the payment I made on {month} {day}?"],
    "shipping": ["My parcel {n} has not arrived, tracking has not moved in {day} days.",
                 "The courier left the box at the wrong address on {month} {day}.",
                 "Can you deliver order {n} to my office instead of home?",
                 "The package arrived damaged and the contents are broken."],
    "technical": ["The app crashes every time I open the settings page on my phone.",
                  "I get error {n} when I try to upload a file larger than {day} MB.",
                  "Sync stopped working after the update on {month} {day}.",
                  "The export button does nothing in Firefox, it works in Chrome."],
    "account": ["I forgot my password and the reset email never comes.",
                "Please change the email on my profile to a new address.",
                "How do I delete my account and all my data?",
                "I want to add a second user to my team workspace."],
}
MONTHS = ["January", "March", "May", "July", "September", "November"]
SCHEMA = {"type": "object", "required": ["label"], "additionalProperties": False,
          "properties": {"label": {"type": "string", "enum": list(LABELS)}}}
LOCK = "/tmp/rlm-local-model.lock"


def messages(n: int) -> list[tuple[str, str]]:
    rng = random.Random(SEED)
    out = []
    for i in range(n):
        label = LABELS[i % len(LABELS)]
        text = rng.choice(TEMPLATES[label]).format(
            n=rng.randint(1000, 9999), month=rng.choice(MONTHS), day=rng.randint(2, 28),
            amt=f"${rng.randint(10, 300)}.{rng.randint(0, 99):02d}")
        out.append((text, label))
    rng.shuffle(out)
    return out


def call(code: str) -> dict:
    return {"content": "", "tool_calls": [{"name": "python", "arguments": {"code": code}}]}


def fanout(work: Path, items: list[tuple[str, str]], k: int) -> dict:
    from rlm import app

    (work / "messages.json").write_text(json.dumps([t for t, _ in items]))
    task = ("Classify this customer message (the variable `context`) as one of: billing, "
            "shipping, technical, account. Answer with final({'label': ...}).")
    parent = work / "parent.json"
    parent.write_text(json.dumps([
        call(f"import json\nmsgs = json.load(open({str(work / 'messages.json')!r}))\n"
             f"schema = {SCHEMA!r}\n"
             f"hs = [rlm_spawn({task!r}, context=m, name='msg', schema=schema) for m in msgs]\n"
             "res = rlm_gather(hs)\n"
             "labels = [r['label'] if isinstance(r, dict) else None for r in res]\n"
             "print(labels)"),
        call("final(json.dumps(labels))"),
    ]))
    options = app.RunOptions(overrides={"model": f"script:{parent}", "sub_model": "local",
                                        "max_children": k, "temperature": 0.0,
                                        # a label needs a cell or two: at most 4 turns each
                                        "max_turns": 4,
                                        # the parent's gathering cell waits for them all
                                        "cell_timeout": 7200})
    t0 = time.monotonic()
    with app.SessionRun.new("run", "fan out", options) as run:
        events = run.drive("classify the messages")
        session = run.session
        assert session is not None and run.agent is not None
        tokens = run.agent.tokens_used
    took = time.monotonic() - t0
    try:
        labels = json.loads(events[-1].final or "[]")
    except ValueError:
        labels = []
    from rlm.agent.children import registry

    kids = registry(session.branch())
    return {"labels": labels, "seconds": round(took), "tokens": tokens,
            "failed": sum(1 for d in kids if d.get("state") != "done"),
            "log": str(session.path)}


def single(work: Path, items: list[tuple[str, str]]) -> dict:
    (work / "messages.json").write_text(json.dumps([t for t, _ in items]))
    task = ("messages.json holds a list of customer messages. Classify each one as billing, "
            "shipping, technical or account, and answer with the list of labels in the same "
            "order, as JSON.")
    env = {**os.environ, "RLM_HOME": str(work / "home")}
    t0 = time.monotonic()
    out = subprocess.run(["flock", LOCK, sys.executable, "-m", "rlm", "run", task, "--model",
                          "local", "--json"], cwd=work, env=env, capture_output=True,
                         text=True, timeout=3600)
    took = time.monotonic() - t0
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise SystemExit(f"no JSON from rlm run (exit {out.returncode}):\n{out.stderr[-2000:]}")
    res = json.loads(lines[-1])
    # every label-like word in order, "unknown" and the like included, so positions hold
    found = re.findall(r"\b(" + "|".join(LABELS) + r"|unknown|other|none)\b",
                       (res.get("final") or "").lower())
    return {"labels": found, "seconds": round(took),
            "tokens": (res.get("tokens") or {}).get("total"), "failed": 0,
            "log": res.get("session_path"), "reason": res.get("reason")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--modes", default="fanout,single")
    ap.add_argument("--transcripts", type=Path, default=None)
    ap.add_argument("--keep", type=Path, default=None,
                    help="work in this directory and keep it (the children's own logs)")
    args = ap.parse_args()
    items = messages(args.n)
    truth = [label for _, label in items]
    rows = []
    for mode in args.modes.split(","):
        with tempfile.TemporaryDirectory(prefix=f"rlm-fan-{mode}-") as tmp:
            work = Path(tmp) if args.keep is None else args.keep / mode
            work.mkdir(parents=True, exist_ok=True)
            os.environ["RLM_HOME"] = str(work / "home")
            os.chdir(work)
            got = fanout(work, items, args.concurrency) if mode == "fanout" else single(work, items)
            labels = got["labels"]
            right = sum(1 for i, want in enumerate(truth) if i < len(labels) and labels[i] == want)
            row = {"mode": mode, "n": args.n, "right": right, **{k: v for k, v in got.items()
                                                                  if k != "log"}}
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
            if args.transcripts is not None and got.get("log"):
                log = [json.loads(ln) for ln in Path(got["log"]).read_text().splitlines()
                       if ln.strip()]
                with args.transcripts.open("a") as f:
                    f.write(json.dumps({"mode": mode, "row": row, "log": log}) + "\n")
    print("| mode | messages | right | children failed | seconds | tokens |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['mode']} | {r['n']} | {r['right']} | {r['failed']} | {r['seconds']} | "
              f"{r['tokens']} |")


if __name__ == "__main__":
    main()
