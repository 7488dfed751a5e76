"""The soak run's plan: a seeded list of actions, and the values the harness defines.

An action is one model turn (the plan-following model answers one completion with it),
except `tick` (the harness advances the fake clock and delivers due heartbeats/cron
ticks). What a turn's cell does is decided by the harness when the model is called, from
its own ledger (which names are live), never from the prompt.

Fault kinds (each injected at least once, then at seeded random points):
  kernel: exit (os._exit in a cell), sigkill (SIGKILL from a timer thread), snap_crash
          (RLM_SNAPSHOT_CRASH_AFTER_FILES), snap_kill (SIGKILL timed into a big snapshot),
          print100mb, c_hang (sum(range(10**11)) under a short timeout), memory_error
          (under config.memory_cap_bytes), unpicklable (socket + generator),
          replay_destructive (a cell that appends to a file outside $RLM_HOME by a route
          the old deny-list missed, and binds a generator; the kernel is then restarted:
          the replay must re-run nothing and touch 0 files outside $RLM_HOME)
  model:  rate_limit, overflow, no_code, broken_code
  host:   host_turn (SIGKILL of the host mid-cell), host_append (mid-append: a torn
          line), host_compact (inside the summarizer call), host_tick (between claiming
          a tick and confirming its delivery)
  boundary (issue 57: the sandbox is a boundary; cells written as an attacker would):
          planted_links (symlinks and hard links where the host writes or reads session
          files the kernel can reach -- runtime/, snapshot/, artifacts/, ./.agent, ./.rlm
          -- aimed at a canary in HOME, the user's config.toml or another session's log,
          then a host write: an image shown (an artifact), a kernel crash (a restart), a
          snapshot), gate_tamper (the run has a --gate: a cell writes the script it runs,
          a conftest.py and a sitecustomize.py that look for the provider key and write
          markers into $RLM_HOME, the config dir and HOME, then calls goal.complete('done') so
          the host runs the gate), site_packages_write (a .pth and a module into every
          import path, the site dirs and rlm's own package dirs), other_session (another
          session's log, connection file and pid, by absolute path, /proc/<pid>/root,
          /proc/self/cwd, `..`; every unix socket under XDG_RUNTIME_DIR and /run),
          aliased_replay (as replay_destructive, with spellings of open the replay planner
          may not know: an alias, functools.partial, io.open, operator.call, getattr on
          builtins; the kernel is restarted: the read-only mounts are the guarantee)
Every boundary fault is followed by a check of every host file a kernel must not change
(bench.soak_checks.check_host_files), and again at the end of the run.
"""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

KERNEL_FAULTS = ("exit", "sigkill", "snap_crash", "snap_kill", "print100mb", "c_hang",
                 "memory_error", "unpicklable", "replay_destructive")
MODEL_FAULTS = ("rate_limit", "overflow", "no_code", "broken_code")
HOST_FAULTS = ("host_turn", "host_append", "host_compact", "host_tick")
WIDE_FAULTS = ("enospc_snapshot", "enospc_append", "readonly_home", "two_writers",
               "sched_idle", "hostile_text", "close_stdout", "delete_outputs", "secret_leak",
               "forge_control")
BOUNDARY_FAULTS = ("planted_links", "gate_tamper", "site_packages_write", "other_session",
                   "aliased_replay")
STOP_FAULTS = ("enospc_append", "readonly_home")  # the host stops on its own, then resumes
FAULTS = KERNEL_FAULTS + MODEL_FAULTS + HOST_FAULTS + WIDE_FAULTS + BOUNDARY_FAULTS
NORMAL = ("define", "define", "define", "read", "read", "mutate", "final")
TICK_EVERY = 6
T0 = 1_750_000_000.0  # the fake clock's start (POSIX seconds)
HEARTBEAT_S = 30.0
CRON = "* * * * *"


FAULT_RATE = 0.12


def make_plan(seed: int, turns: int, fault_rate: float = FAULT_RATE) -> list[dict[str, Any]]:
    """`turns` model turns plus ticks; every fault kind at least once (in the first 80%)."""
    rng = random.Random(seed)
    kinds = [rng.choice(NORMAL) for _ in range(turns)]
    kinds[:2] = ["define", "define"]
    slots = list(range(3, max(4, int(turns * 0.8))))
    rng.shuffle(slots)
    forced = list(FAULTS)
    rng.shuffle(forced)
    # host_compact fires at the first compaction after it: arm it early enough
    early = next(k for k, s in enumerate(slots) if s < max(4, turns // 3))
    slots[0], slots[early] = slots[early], slots[0]
    forced.remove("host_compact")
    forced.insert(0, "host_compact")
    for slot, fault in zip(slots, forced, strict=False):
        kinds[slot] = fault
    for i in slots[len(forced):]:
        if rng.random() < fault_rate:
            kinds[i] = rng.choice(FAULTS)
    plan: list[dict[str, Any]] = []
    for i, kind in enumerate(kinds):
        if i and i % TICK_EVERY == 0:
            # 0-150 s of fake time: sometimes no tick is due, sometimes several coalesce
            plan.append({"kind": "tick", "advance": round(rng.uniform(0, 150), 1)})
        plan.append({"kind": kind})
    for i, a in enumerate(plan):
        a["i"] = i
    return plan


def secret_key(seed: int) -> str:
    """The fake provider key the host is given (OPENAI_API_KEY) for the secret_leak fault."""
    return "sk-soak-" + hashlib.sha256(f"soak-secret-{seed}".encode()).hexdigest()[:40]


# the other session the soak makes before the run (other_session, planted_links)
OTHER_SESSION = "20260101-000000-0th3r5"
OTHER_CANARY = "other-session-canary-5b1e"
HOME_CANARY = ".soak-canary"  # in the hosts' HOME: a link target no host may write
GATE_SCRIPT = "soak_gate.py"  # what the run's --gate runs (gate_tamper writes it)


def clock_at(plan: list[dict[str, Any]], index: int) -> float:
    """The fake time before action `index` runs (ticks advance it)."""
    return T0 + sum(a.get("advance", 0.0) for a in plan[:index])


# ------------------------------------------------------------------ values


def _numbers(rng: random.Random) -> list[int]:
    return [rng.randrange(-10**6, 10**6) for _ in range(rng.randrange(3, 12))]


def define_value(seed: int, index: int) -> dict[str, Any]:
    """name, code and ledger record ({check, expected, restorable}) of a fresh value."""
    rng = random.Random(seed * 1_000_003 + index)
    name = f"v{index}"
    shape = rng.choice(["list", "dict", "str", "numpy", "func", "frame"])
    if shape == "list":
        value: Any = _numbers(rng)
        code, check = f"{name} = {value!r}", name
    elif shape == "dict":
        value = {f"k{j}": n for j, n in enumerate(_numbers(rng))}
        code, check = f"{name} = {value!r}", name
    elif shape == "str":
        value = "".join(rng.choice("abcdefghij ") for _ in range(rng.randrange(5, 60)))
        code, check = f"{name} = {value!r}", name
    elif shape == "numpy":
        n, k = rng.randrange(1000, 50_000), rng.randrange(2, 99)
        code = f"import numpy as np\n{name} = np.arange({n}, dtype=np.int64) * {k}"
        check = f"__import__('hashlib').sha256({name}.tobytes()).hexdigest()"
        value = _np_digest(n, k)
    elif shape == "func":
        a, b = rng.randrange(2, 50), rng.randrange(100)
        code = f"def {name}(x):\n    return x * {a} + {b}"
        check, value = f"{name}(7)", 7 * a + b
    else:
        rows = _numbers(rng)
        code = f"import pandas as pd\n{name} = pd.DataFrame({{'a': {rows!r}}})"
        check, value = f"int({name}['a'].sum())", sum(rows)
        shape = "frame"
    return {"name": name, "code": code, "record": {
        "check": check, "expected": value, "restorable": True, "shape": shape}}


def _np_digest(n: int, k: int) -> str:
    import numpy as np

    return hashlib.sha256((np.arange(n, dtype=np.int64) * k).tobytes()).hexdigest()


def padding(index: int) -> str:
    """A line of varied numbers so the context grows (~130 tokens) and compaction runs."""
    return f"print('pad', ' '.join(str((i * 7919 + {index}) % 10007) for i in range(120)))"


def check_code(names: dict[str, dict[str, Any]]) -> str:
    """A cell printing one JSON object name -> check value (or '<MISSING>'); binds nothing."""
    checks = {n: r["check"] for n, r in names.items()}
    body = ", ".join(
        f"{n!r}: (({c}) if {n!r} in globals() else '<MISSING>')" for n, c in checks.items())
    return f"print('LEDGER', __import__('json').dumps({{{body}}}, sort_keys=True, default=repr))"


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=repr)
