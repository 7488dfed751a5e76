"""How much of each model call's prompt the next call keeps byte for byte (issue 27).

    python -m bench.prefix_kept SESSION.jsonl [...] [--native]

A provider caches the prompt's prefix; a call that changes an early message pays for
everything after it again. The tiers are meant to keep the longest byte-stable prefix
(rewrite only the warm tail, or all at once when the cache is cold) and a summary or a
rebuild resets it by design. For every model call in a session log (an assistant
message), the prompt it was sent is projected again from the branch before it
(rlm.session.context.build_messages, as the loop does, without the system prompt, which
never changes within a session), and compared with the previous call's prompt: the bytes
of their common leading messages over the previous prompt's bytes. Reported per session:
calls, the mean share kept, and the calls that kept less than all of it, split by what
came between (a compaction, a tier's record, neither).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rlm.session.context import RELIEF_CUSTOM, build_messages
from rlm.session.entries import CompactionEntry, CustomEntry, MessageEntry
from rlm.session.store import SessionStore


def _bytes(messages: list[dict]) -> list[int]:
    return [len(json.dumps(m, sort_keys=True).encode()) for m in messages]


def kept(session: Path, native: bool) -> dict:
    branch = SessionStore.open(session.parent, readonly=True).branch()
    previous: list[str] | None = None
    last = 0
    shares: list[float] = []
    broken = {"compaction": 0, "relief": 0, "other": 0}
    for i, e in enumerate(branch):
        if not (isinstance(e, MessageEntry) and e.role == "assistant" and e.error is None):
            continue
        sent = [json.dumps(m, sort_keys=True) for m in
                build_messages(branch[:i], system_prompt="", native_tools=native)[1:]]
        if previous is not None:
            same = 0
            for a, b in zip(previous, sent, strict=False):
                if a != b:
                    break
                same += 1
            total = sum(len(x.encode()) for x in previous) or 1
            share = sum(len(x.encode()) for x in previous[:same]) / total
            shares.append(share)
            if share < 1.0:
                between = branch[last:i]
                if any(isinstance(x, CompactionEntry) for x in between):
                    broken["compaction"] += 1
                elif any(isinstance(x, CustomEntry) and x.custom_type == RELIEF_CUSTOM
                         for x in between):
                    broken["relief"] += 1
                else:
                    broken["other"] += 1
        previous, last = sent, i
    return {"session": str(session), "calls": len(shares) + (previous is not None),
            "mean_kept": round(sum(shares) / len(shares), 3) if shares else None,
            "calls_not_all_kept": broken}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sessions", nargs="+", type=Path)
    ap.add_argument("--native", action="store_true",
                    help="project as for a model with native tools (default: fenced, `local`)")
    args = ap.parse_args(argv)
    for s in args.sessions:
        print(json.dumps(kept(s, args.native)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
