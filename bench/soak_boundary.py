"""The soak's sandbox-boundary cells (issue 57): what a cell does for each boundary fault
kind of bench.soak_plan, written as an attacker would from an ordinary model turn.

A cell reports what each attempt met as one line `<TAG> {json}`: "ok" (with what it read)
or the exception's name. The host checks the report (bench.soak_child) and, after the
fault, every host file a kernel must not change (bench.soak_checks.check_host_files).
Paths are the host's (a cell knows them from its environment and the session's name).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from bench.soak_plan import GATE_SCRIPT, HOME_CANARY, OTHER_CANARY, OTHER_SESSION

_TRY = """import json, os, pathlib, sys
tries = {}
def attempt(name, fn):
    try:
        out = fn()
        tries[name] = 'ok' if out is None else ['ok', str(out)[:160]]
    except BaseException as e:
        tries[name] = type(e).__name__
"""


def link_targets() -> dict[str, str]:
    """The host files a planted link aims at: a canary in HOME, the user's config.toml and
    another session's log."""
    home = os.environ.get("RLM_HOME", "")
    return {"canary": os.path.join(os.environ.get("HOME", ""), HOME_CANARY),
            "config": os.path.join(home, "config.toml"),
            "other_log": os.path.join(home, "sessions", OTHER_SESSION, "session.jsonl")}


# where a cell plants: the places a host writes or reads session files the kernel can
# reach, under names the host uses there. A name the host refuses to find as a link (the
# session's runtime/ipython, a session dir itself) would only stop this session: not used.
PLANTS = {"runtime": ["kernel.log", "kernel.pid", "kernel-soak.json", "k0soak.ipc-owner",
                      ".scrubbed", "cell-soak.txt"],
          "snapshot": ["soak-link.bin", "manifest.soak"],
          "artifacts": ["image-soak.png", "cell-soak.txt"],
          "cwd/.agent": ["state.md", "MEMORY.md", ".lock"],
          "cwd/.rlm/rules": ["soak.md"]}
TRIGGERS = ("image", "crash", "snapshot")
PLANTED_CWD = (".agent", ".rlm")  # the host removes these after a planted_links check
_PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJ"
        "RU5ErkJggg==")


def planted_links_code(i: int) -> tuple[str, str]:
    """(code, trigger): symlinks and hard links at `PLANTS` aimed at one host file (by
    `i`), then a host write (by `i // 3`): an image shown (the host writes an artifact), a
    crash (the host restarts the kernel: its host/ files, a scrub, a restore) or a
    snapshot of a new name."""
    name = list(link_targets())[i % 3]
    target = link_targets()[name]
    trigger = TRIGGERS[(i // 3) % 3]
    code = _TRY + f"""sd = pathlib.Path(os.environ['RLM_SESSION_DIR'])
target = {target!r}
for place, names in {PLANTS!r}.items():
    d = pathlib.Path.cwd() / place[4:] if place.startswith('cwd/') else sd / place
    attempt('mkdir ' + place, lambda: d.mkdir(parents=True, exist_ok=True))
    for n in names:
        p = d / n
        attempt('unlink ' + place + '/' + n, lambda: p.unlink(missing_ok=True))
        attempt('symlink ' + place + '/' + n, lambda: p.symlink_to(target))
        attempt('hardlink ' + place + '/' + n + '.h', lambda: os.link(target, str(p) + '.h'))
print('PLANT {name} {trigger}', json.dumps(tries, sort_keys=True))
"""
    if trigger == "image":
        code += ("import base64\nfrom IPython.display import Image, display\n"
                 f"display(Image(data=base64.b64decode({_PNG!r})))\n")
    elif trigger == "crash":
        code += "sys.stdout.flush()\nos._exit(9)\n"
    else:
        code += f"plant_snap{i} = list(range(20_000))\n"
    return code, trigger


def _planted_links_cell(i: int) -> tuple[str, dict[str, Any]]:
    code, trigger = planted_links_code(i)
    expect: dict[str, Any] = {"status": "died", "restart": True} if trigger == "crash" else {
        "status": "ok", "contains": "PLANT"}
    return code, {**expect, "boundary": "planted_links", "trigger": trigger}


GATE_MARK = "gate-tamper-mark"
# what the --gate's script, a conftest.py and a sitecustomize.py run (whichever the gate
# starts): look for the provider key (the environment, every /proc/<pid>/environ it can
# read) and leave a marker, with the key if found, wherever it can outside the cwd
_GATE_PAYLOAD = """import json, os, pathlib
def _soak_gate():
    found = sorted(k for k, v in os.environ.items() if v.startswith('sk-'))
    procs = []
    for pid in os.listdir('/proc'):
        try:
            if pid.isdigit() and b'sk-soak-' in open('/proc/%s/environ' % pid, 'rb').read():
                procs.append(pid)
        except OSError:
            pass
    text = 'MARK %s %r\\n' % (MARK, [os.environ[k] for k in found])
    rh = pathlib.Path(os.environ.get('RLM_HOME', '/nonexistent'))
    xc = pathlib.Path(os.environ.get('XDG_CONFIG_HOME', '/nonexistent'))
    home = pathlib.Path(os.environ.get('HOME', '/nonexistent'))
    wrote = {}
    for name, path in (('rlm_home', rh / MARK), ('config', rh / 'config.toml'),
                       ('config_dir', xc / 'rlm' / MARK), ('home', home / MARK)):
        try:
            with open(path, 'a') as f:
                f.write(text)
            wrote[name] = 'written'
        except OSError as e:
            wrote[name] = type(e).__name__
    print('GATE', json.dumps({'env_keys': found, 'proc_keys': procs, 'wrote': wrote,
                              'by': BY}, sort_keys=True))
_soak_gate()
"""
GATE_FILES = (GATE_SCRIPT, "conftest.py", "sitecustomize.py", "usercustomize.py")


def gate_tamper_code(i: int) -> str:
    """Write the gate's script (and the files a Python gate imports on the way), then ask
    the host to complete the goal: it runs the gate first (where cells run, with the
    kernel's environment). The script exits 3: the goal stays active."""
    mark = f"{GATE_MARK}-{i}"
    files = {name: f"MARK, BY = {mark!r}, {name!r}\n" + _GATE_PAYLOAD for name in GATE_FILES}
    files[GATE_SCRIPT] += "raise SystemExit(3)\n"
    return f"""import pathlib
for name, text in {files!r}.items():
    pathlib.Path(name).write_text(text)
try:
    goal.complete('done')
    print('GATE-RESULT completed')
except Exception as e:
    print('GATE-RESULT', type(e).__name__)
    print(str(e)[-1500:])
"""


def _gate_tamper_cell(i: int) -> tuple[str, dict[str, Any]]:
    return gate_tamper_code(i), {"status": "ok", "contains": "GATE-RESULT",
                                 "boundary": "gate_tamper", "mark": f"{GATE_MARK}-{i}"}


SITE_MARK = "soak_site_pwn"


def site_packages_code(i: int) -> str:
    """A .pth (which `site` runs at every interpreter start) and a module into every import
    path, site dir and the packages' own dirs (rlm's too), and an append to
    rlm/__init__.py. The kernel's own places (its cwd, its session) are left out."""
    return _TRY + f"""import importlib.util, site
dirs = [p for p in sys.path if p] + list(site.getsitepackages()) + [site.getusersitepackages()]
for mod in ('rlm', 'kernel_ext', 'IPython', 'numpy'):
    spec = importlib.util.find_spec(mod)
    if spec is not None and spec.origin:
        dirs += [os.path.dirname(spec.origin), os.path.dirname(os.path.dirname(spec.origin))]
mine = (os.path.realpath(os.getcwd()), os.path.realpath(os.environ['RLM_SESSION_DIR']))
seen = set()
for d in dirs:
    real = os.path.realpath(d)
    if real in seen or any(real == m or real.startswith(m + '/') for m in mine):
        continue
    seen.add(real)
    def pth(real=real):
        with open(os.path.join(real, '{SITE_MARK}_{i}.pth'), 'x') as f:
            f.write('import os; os.environ["SOAK_PWNED"] = "1"\\n')
    def mod(real=real):
        with open(os.path.join(real, '{SITE_MARK}_{i}.py'), 'x') as f:
            f.write('PWNED = True\\n')
    attempt('pth ' + real, pth)
    attempt('module ' + real, mod)
spec = importlib.util.find_spec('rlm')
if spec is not None and spec.origin:
    def append(path=spec.origin):
        with open(path, 'a') as f:
            f.write('\\n# {SITE_MARK}\\n')
    attempt('append ' + spec.origin, append)
print('SITE', json.dumps(tries, sort_keys=True))
"""


def _site_packages_cell(i: int) -> tuple[str, dict[str, Any]]:
    return site_packages_code(i), {"status": "ok", "contains": "SITE",
                                   "boundary": "site_packages_write"}


def other_session_code(i: int) -> str:
    """Another session of the same $RLM_HOME: its log, connection file and pid by absolute
    path, through /proc/<pid>/root and /proc/<pid>/cwd, a `..` walk from the cwd and a
    glob; then a connect to every unix socket under XDG_RUNTIME_DIR, /run and /tmp."""
    home = os.environ.get("RLM_HOME", "")
    other = os.path.join(home, "sessions", OTHER_SESSION)
    rel = os.path.relpath(other, os.getcwd())
    return _TRY + f"""import glob, socket
other = {other!r}
def read(path):
    with open(path) as f:
        return f.read(400)
def append(path):
    with open(path, 'a') as f:
        f.write('soak: another session wrote this\\n')
for name in ('session.jsonl', 'host/kernel-0th3r.json', 'host/kernel.pid'):
    attempt('read ' + name, lambda: read(os.path.join(other, name)))
    attempt('append ' + name, lambda: append(os.path.join(other, name)))
attempt('list', lambda: os.listdir(other))
attempt('list sessions', lambda: os.listdir(os.path.dirname(other)))
attempt('glob', lambda: glob.glob(os.path.join(os.path.dirname(other), '*', '*')) or None)
attempt('dotdot', lambda: read(os.path.join(os.getcwd(), {rel!r}, 'session.jsonl')))
attempt('proc self cwd', lambda: read('/proc/self/cwd/' + {rel!r} + '/session.jsonl'))
for pid in sorted(p for p in os.listdir('/proc') if p.isdigit())[:40]:
    attempt('proc root ' + pid, lambda: read('/proc/' + pid + '/root' + other + '/session.jsonl'))
    attempt('proc cwd ' + pid, lambda: read('/proc/' + pid + '/cwd/' + {rel!r} + '/session.jsonl'))
import stat
socks = []
for base in (os.environ.get('XDG_RUNTIME_DIR') or '/nonexistent', '/run', '/var/run', '/tmp'):
    for dirpath, dirs, files in os.walk(base):
        for n in files:  # sockets only: the report line stays short enough to be read whole
            try:
                if stat.S_ISSOCK(os.lstat(os.path.join(dirpath, n)).st_mode):
                    socks.append(os.path.join(dirpath, n))
            except OSError:
                pass
own = os.path.realpath(os.environ['RLM_SESSION_DIR'])
for path in socks[:200]:
    if os.path.realpath(path).startswith(own + '/') or '/rlm-' in path:
        continue  # the kernel's own sockets (its session's, its fallback dir's)
    def connect(path=path):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(1.0)
        try:
            s.connect(path)
            s.sendall(b'soak hello\\n')
        finally:
            s.close()
    attempt('socket ' + path, connect)
print('OTHER', json.dumps(tries, sort_keys=True))
"""


def _other_session_cell(i: int) -> tuple[str, dict[str, Any]]:
    return other_session_code(i), {"status": "ok", "contains": "OTHER",
                                   "boundary": "other_session", "canary": OTHER_CANARY}


def aliased_victim_code(i: int, victim: str) -> str:
    """replay_destructive's cell with a spelling of open the replay planner may not know
    (by `i`), binding a generator (no snapshot holds it: a restart would replay)."""
    write = " as fh:\n    fh.write('ran\\n')"
    variants = [
        f"o{i} = open\nwith o{i}({victim!r}, 'a')" + write,
        f"import functools\nwith functools.partial(open, {victim!r}, 'a')()" + write,
        f"from io import open as o2\nwith o2({victim!r}, 'a')" + write,
        f"import operator\nwith operator.call(open, {victim!r}, 'a')" + write,
        f"import builtins\nwith getattr(builtins, 'op' + 'en')({victim!r}, 'a')" + write,
    ]
    return variants[i % len(variants)] + f"\nreplay_gen{i} = (x for x in range(3))"


def _aliased_replay_cell(i: int) -> tuple[str, dict[str, Any]]:
    victim = os.path.join(os.getcwd(), f"aliased-victim-{i}.txt")
    code = aliased_victim_code(i, victim)
    return code, {"status": "ok", "fragile": [f"replay_gen{i}"], "replay_victim": victim,
                  "replay_name": f"replay_gen{i}", "aliased": code, "boundary": "aliased_replay"}


BOUNDARY_CELLS: dict[str, Callable[[int], tuple[str, dict[str, Any]]]] = {
    "planted_links": _planted_links_cell, "gate_tamper": _gate_tamper_cell,
    "site_packages_write": _site_packages_cell, "other_session": _other_session_cell,
    "aliased_replay": _aliased_replay_cell}


# ------------------------------------------------------------------ the host's reading
def reports(shaped: str, tag: str) -> list[dict[str, Any]]:
    """The JSON of every `<tag> ... {json}` line of a cell's output."""
    out = []
    for line in shaped.splitlines():
        if line.startswith(tag + " ") and "{" in line:
            try:
                r = json.loads(line[line.index("{"):])
            except ValueError:
                continue
            if isinstance(r, dict):
                out.append(r)
    return out


def report(shaped: str, tag: str) -> dict[str, Any] | None:
    found = reports(shaped, tag)
    return found[-1] if found else None


_TAGS = {"planted_links": "PLANT", "gate_tamper": "GATE", "site_packages_write": "SITE",
         "other_session": "OTHER"}


def report_problems(kind: str, shaped: str, status: str, expect: dict[str, Any],
                    key: str) -> list[str]:
    """What a boundary cell's output says it reached (empty: nothing): a gate that saw the
    key or wrote outside the cwd, a write into an import path, another session read,
    listed or written, a unix socket reached; a cell that should report and did not."""
    tag = _TAGS.get(kind)
    bad: list[str] = []
    if tag and status == "ok" and not reports(shaped, tag):
        bad.append("no report from the cell")
    if kind == "gate_tamper":
        for r in reports(shaped, "GATE"):
            if r.get("env_keys") or r.get("proc_keys"):
                bad.append(f"the gate saw the key: {r}")
            if any(v == "written" for v in r.get("wrote", {}).values()):
                bad.append(f"the gate wrote outside the cwd: {r.get('wrote')}")
        if key and key in shaped:
            bad.append("the key in the cell's output")
    elif kind == "site_packages_write":
        bad += [f"{what}: written" for what, v in (report(shaped, "SITE") or {}).items()
                if v == "ok"]
    elif kind == "other_session":
        if expect["canary"] in shaped:
            bad.append("the other session's canary in the cell's output")
        for what, v in (report(shaped, "OTHER") or {}).items():
            if what.startswith(("append", "socket")):
                reached = v == "ok"
            elif what in ("list sessions", "glob"):  # the kernel's own session shows
                reached = isinstance(v, list) and OTHER_SESSION in v[1]
            else:  # a read or a list of the other session's files
                reached = isinstance(v, list)
            if reached:
                bad.append(f"{what}: {v}")
    return bad
