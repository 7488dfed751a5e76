"""The trust boundary: what the host may take from what.

The kernel runs code the model wrote, and the model reads data that can steer it, so
everything a cell can write is untrusted input to the host. This module is the one place
that decides what crosses:

| source | trusted for security-relevant settings? |
|---|---|
| the command line of the process the user started | yes |
| the environment of that process (RLM_HOME, RLM_CONFIG, RLM_MODEL, ...) | yes |
| the user's own config: `$RLM_CONFIG`, `$RLM_HOME/config.toml` | yes |
| the user's run records: `<user config dir>/runs/<hash of the session dir>.json` (written by the host from a command line, see `remember`) | yes |
| a working-directory `rlm.toml` | harmless settings only, unless `rlm trust` allowed that file's exact bytes (rlm.config) |
| the session log (`run_options` entries, the header), anything under a session dir | no: a cell can append to it, and a copied session is someone else's |
| bridge requests from the kernel | validated per method (rlm.agent, rlm.kernel.bridge) |
| cell outputs | shaped, redacted, shown to the model as data |

Every option a run can record is screened by construction (`SCREENED`, `RUN_FLAGS`,
`NEVER_RECORDED`): the sandbox, the kernel's network, the kernel kind, replay, the
models (a model spec can make the host read a file, or send the conversation to another
provider), the snapshot URL (where the kernel's state goes), every limit, gates (shell
commands run on the host), the autonomous policy, the kernel's working directory and the
files loaded before the first prompt. `screen` takes the newest recorded `run_options`
entry of a session and refuses every value that would LOOSEN what the user's own sources
give (the run record this host wrote for that session directory, else the user's
config): sandbox true -> false, a different kernel, model, snapshot URL or file, gates
not given, autonomous switched on, a higher limit; a key in `NEVER_RECORDED` (the
environment passed, the interpreter, the home directory, ...) or in no table at all is
refused whatever its value. Each refusal is one line naming where the value came from;
the run uses the safe value. A recorded value that is as tight or tighter (a recorded
`--sandbox`, a lower `--max-turns`) is kept: options still travel with the run
(`--detach`, a worker restart, `rlm resume`), because the host remembered them where a
cell cannot write (the sandboxed kernel does not see the user config dir).

Not covered (said in docs/architecture.md): a kernel WITHOUT `--sandbox` runs as the
user and can write the user's config and run records like any program the user runs.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

import platformdirs

from rlm.paths import APP_NAME, PRIVATE_FILE, write_private_atomic

# Every option a run can record is screened by construction: each Config field (any of
# them can sit in a recorded `overrides`) and each recorded run flag is either in
# `SCREENED` (a forged value that would loosen the user's own is refused, one line) or in
# `NEVER_RECORDED` (the host never records it; one found in a log is refused outright).
# A key in neither is refused too (tests/test_trust.py derives every recordable key from
# Config and RunOptions and fails on one in neither set).
Rule = Callable[[Any, Any], bool]  # (recorded, baseline) -> would the recorded value loosen?


def _sandbox_off(recorded: Any, baseline: Any) -> bool:
    return not recorded and baseline is not False  # the default (None): on where available


def _switched_on(recorded: Any, baseline: Any) -> bool:
    return bool(recorded) and not bool(baseline)


def _on_after_off(recorded: Any, baseline: Any) -> bool:
    """A default-on switch the user turned off (`--no-replay`, `--no-memory`)."""
    return bool(recorded) and baseline is not None and not bool(baseline)


def _other(recorded: Any, baseline: Any) -> bool:
    """Another destination or file: a model, a snapshot URL, a working directory."""
    return bool(recorded != baseline)


def _other_kernel(recorded: Any, baseline: Any) -> bool:
    return (recorded or "local") != (baseline or "local")


def _not_given(recorded: Any, baseline: Any) -> bool:
    """A list (gates, files loaded): any item the user's own sources do not hold."""
    items = recorded if isinstance(recorded, list) else [recorded]
    return any(x not in (baseline or []) for x in items)


def _higher(zero_is_unlimited: bool = False) -> Rule:
    """A limit: more than the baseline (None and -1 are unlimited; not a number: loosest)."""
    def bound(value: Any) -> float | None:
        if value is None or value == -1 or (zero_is_unlimited and value == 0):
            return math.inf
        if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
            return None  # not a limit at all
        return float(value)

    def rule(recorded: Any, baseline: Any) -> bool:
        mine, theirs = bound(baseline), bound(recorded)
        return theirs is None or (mine is not None and theirs > mine)
    return rule


def _harmless(recorded: Any, baseline: Any) -> bool:
    """Changes neither what runs, what the kernel sees nor any limit: kept as recorded."""
    return False


# Config overrides a run may record, each with the rule that judges a recorded value
# against the user's own (the host's record of the run, else the user's config).
SCREENED: dict[str, Rule] = {
    # what runs and what the kernel sees
    "sandbox": _sandbox_off, "kernel_network": _switched_on, "kernel": _other_kernel,
    "replay": _on_after_off, "memory": _on_after_off,
    # destinations: a model spec can make the host read a file or send the conversation to
    # another provider; a snapshot URL is where the kernel's state goes (a network one
    # also turns the default sandbox off: rlm.kernel.sandbox_policy)
    "model": _other, "sub_model": _other, "compaction_model": _other, "advisor": _other,
    "snapshot_url": _other,
    # limits: a recorded value may tighten the user's own, never loosen it
    "max_turns": _higher(), "max_tokens": _higher(), "max_wall_s": _higher(),
    "cell_timeout": _higher(), "gate_timeout_s": _higher(),
    "memory_cap_bytes": _higher(zero_is_unlimited=True),
    "max_depth": _higher(), "token_budget": _higher(), "turn_budget": _higher(),
    "max_children": _higher(zero_is_unlimited=True), "context_window": _higher(),
    "keep_recent_tokens": _higher(),
    # sampling and compaction tuning
    "temperature": _harmless, "reserve_tokens": _harmless, "compaction_enabled": _harmless,
    "context_tiers": _harmless, "local_grammar": _harmless, "candidates": _higher(),
}
# The security flags of the command line (kept under their old name for readers).
SECURITY_FLAGS = ("sandbox", "kernel_network", "kernel", "model", "sub_model",
                  "compaction_model", "advisor", "replay", "snapshot_url")
# Config fields only the user's config or environment may set (no command line records
# them): never taken from a record.
NEVER_RECORDED = ("kernel_env_pass", "kernel_python", "kernel_cwd", "kernel_inputs", "home",
                  "interrupt_grace_s", "output_budget_chars", "snapshot_var_cap",
                  "snapshot_total_cap", "checkpoint_rungs", "batch_concurrency",
                  "child_budget_share", "budget_reserve", "child_context_max_bytes",
                  "worker_idle_exit_s", "output_disk_cap",
                  "kernel_max_procs")
# Run options (not config), each with its rule and the value a refusal leaves. `workdir`
# becomes the kernel's working directory, which the sandbox binds read-write; `context`,
# `named` and `notebook` are files the host reads and loads into the kernel.
RUN_FLAGS: dict[str, tuple[Rule, Any]] = {
    "autonomous": (_switched_on, False), "gate": (_not_given, []),
    "workdir": (_other, None), "context": (_not_given, []), "named": (_not_given, []),
    "notebook": (_other, None), "max_continuations": (_higher(), None),
}


def ensure_dir(path: Path) -> Path:
    """Create one of the user's own config dirs (owner-only when made here). Unlike
    `paths.private_dir` a symlink is fine: dotfile managers link ~/.config/rlm."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def config_dir() -> Path:
    """The user's own rlm config directory ($XDG_CONFIG_HOME/rlm): run records and the
    project files the user allowed (`rlm trust`). Creates nothing."""
    return Path(platformdirs.user_config_dir(APP_NAME, appauthor=False))


def first_time(key: str) -> bool:
    """True the first time this user's runs ask about `key` (a notice shown once: the
    marker `<user config dir>/shown/<key>` is made now); False after, and when the marker
    cannot be made (a read-only config dir: better silent than said on every run)."""
    path = config_dir() / "shown" / key
    try:
        ensure_dir(path.parent)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, PRIVATE_FILE))
    except OSError:
        return False
    return True


# ------------------------------------------------------------------ the run records
def _record_path(session_dir: Path) -> Path:
    """One record per session DIRECTORY (a copy of a session has the same id, not the
    same record)."""
    return config_dir() / "runs" / f"{hashlib.sha256(_where(session_dir).encode()).hexdigest()[:32]}.json"


def _where(session_dir: Path | None) -> str:
    return str(Path(session_dir).resolve()) if session_dir is not None else ""


def security_subset(options: dict[str, Any], header_model: str | None = None) -> dict[str, Any]:
    """What a record remembers of a run_options dict: every screened override and every
    run flag (`screen` judges a log's copy by it)."""
    overrides = options.get("overrides") or {}
    out: dict[str, Any] = {k: overrides[k] for k in SCREENED if k in overrides}
    for key, (_, default) in RUN_FLAGS.items():
        value = options.get(key)
        out[key] = (list(value) if isinstance(value, list) else value) or default
    out["autonomous"] = bool(options.get("autonomous"))
    out["gate"] = [str(g) for g in options.get("gate") or []]
    if header_model:
        out["header_model"] = header_model
    return out


def remember(session_id: str, session_dir: Path | None, options: dict[str, Any],
             header_model: str | None = None) -> None:
    """Record, in the user's config dir, the security-relevant options the host just
    recorded for this session from the user's command line (the log holds a copy a
    cell could change; this is the one `screen` trusts)."""
    if session_dir is None:
        return
    record = {"session": session_id, "dir": _where(session_dir),
              "options": security_subset(options, header_model)}
    path = _record_path(session_dir)
    try:
        ensure_dir(path.parent)
        write_private_atomic(path, json.dumps(record, sort_keys=True).encode())
    except OSError:
        pass  # a read-only config dir: the next open judges against the user's config (safe)


def remembered(session_id: str, session_dir: Path | None) -> dict[str, Any] | None:
    """The user's record for this session directory, or None (an older session, a copy
    made elsewhere, a record for another directory with the same id)."""
    if session_dir is None:
        return None
    data = read_regular(_record_path(session_dir), limit=1 << 20)
    if data is None:
        return None
    try:
        record = json.loads(data)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("dir") != _where(session_dir):
        return None
    opts = record.get("options")
    return opts if isinstance(opts, dict) else None


# ------------------------------------------------------------------- the screen
def _user_value(key: str, user_config: Any) -> Any:
    return getattr(user_config, key, None) if user_config is not None else None


def _shown(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def screen(recorded: dict[str, Any] | None, *, session_id: str, session_dir: Path | None,
           given: dict[str, Any], user_config: Any = None,
           where: str = "session.jsonl") -> tuple[dict[str, Any] | None, list[str]]:
    """The recorded run_options (a `RunOptions.to_dict()`) with every security-relevant
    value that would loosen the user's own removed; and one line per refusal.

    `given`: the options the user gives now (what they give wins anyway, so those keys
    are not judged). `user_config`: the Config from the user's own sources (flags aside),
    the baseline when this host has no record for the session."""
    if recorded is None:
        return None, []
    out = json.loads(json.dumps(recorded))  # a deep copy of plain JSON
    overrides: dict[str, Any] = dict(out.get("overrides") or {})
    given_over = given.get("overrides") or {}
    record = remembered(session_id, session_dir)
    source = ("this host's record of the run" if record is not None
              else "your config and environment")
    notes: list[str] = []

    def refuse(key: str, value: Any, safe: Any) -> None:
        notes.append(f"refused {key} = {_shown(value)} from {where} (run_options; a cell "
                     f"can write that file): it would loosen {source} ({key} = {_shown(safe)}); "
                     f"pass it on the command line to use it")

    for key in sorted(k for k in overrides if k not in SCREENED):
        why = (f"{key} comes only from your config or environment" if key in NEVER_RECORDED
               else f"{key} is not an option a run records")
        notes.append(f"refused {key} = {_shown(overrides.pop(key))} from {where} "
                     f"(run_options): {why}")
    for key, looser in SCREENED.items():
        if key not in overrides or key in given_over:
            continue
        if record is not None and key in record:
            baseline = record[key]  # what the host recorded from a command line
        else:  # not recorded by the host: the user's own config (or the default)
            baseline = _user_value(key, user_config)
            if record is None and baseline is None and key.endswith("model"):
                continue  # no record, no model of the user's: the session's own (its header's)
        if looser(overrides[key], baseline):
            refuse(key, overrides.pop(key), baseline)
            if baseline is not None:
                overrides[key] = baseline
    for key, (looser, default) in RUN_FLAGS.items():
        value = out.get(key)
        if value is None or value is False or value in ([], "") or given.get(key):
            continue
        baseline = record.get(key, default) if record is not None else default
        if looser(value, baseline):
            safe = baseline if baseline is not None else default
            refuse(key, value, safe)
            out[key] = safe
    out["overrides"] = overrides
    return out, notes


def header_model_refusal(header_model: str | None, *, session_id: str,
                         session_dir: Path | None) -> str | None:
    """A session header's model differs from the one this host recorded for the session
    (a rewritten header): the line saying so, else None. Without a record the header's
    model is used (older sessions; documented gap)."""
    record = remembered(session_id, session_dir)
    if record is None or not header_model or "header_model" not in record:
        return None
    if record["header_model"] == header_model:
        return None
    return (f"refused model {header_model!r} from the session header (a cell can rewrite "
            f"the log): this host recorded {record['header_model']!r} for the session")


class NamedSession(Protocol):
    """What `merged` needs of a session (rlm.protocols.SessionLog, a layer above): its id;
    its `dir` and `header.model` are read when present."""

    @property
    def id(self) -> str: ...


def merged(session: NamedSession, given: Any, recorded: Any, user_config: Any) -> Any:
    """`given.over(recorded)` after `screen`: the options a run uses. `given`/`recorded`
    are `rlm.app.RunOptions` (duck-typed: this module sits below the root); the
    refusals go to `.refused` (one line each; the root shows them as Notices)."""
    if recorded is None:
        return given
    sid, sdir = session.id, getattr(session, "dir", None)
    clean, notes = screen(recorded.to_dict(), session_id=sid, session_dir=sdir,
                          given=given.to_dict(), user_config=user_config)
    out = given.over(type(recorded).from_dict(clean or {}))
    header = getattr(getattr(session, "header", None), "model", None)
    why = header_model_refusal(header, session_id=sid, session_dir=sdir)
    if why and "model" not in out.overrides:
        record = remembered(sid, sdir) or {}
        out.overrides = {**out.overrides, "model": record.get("header_model")}
        notes.append(why)
    out.refused = notes
    return out


# ------------------------------------------------------------- files opened safely
def open_regular(path: Path, flags: int = os.O_RDONLY, mode: int = PRIVATE_FILE) -> int:
    """`os.open` that refuses anything but a regular file: never follows a symlink at the
    last component (O_NOFOLLOW), never blocks on a FIFO (O_NONBLOCK, cleared after the
    check). Raises OSError (ELOOP for a symlink) or `NotRegular`."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(path)
        fl = os.get_blocking(fd)
        if not fl:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


class NotRegular(OSError):
    def __init__(self, path: Path):
        super().__init__(f"{path} is not a regular file (a FIFO, device or directory); "
                         "remove it or use another session")
        self.filename = str(path)


def read_regular(path: Path, limit: int) -> bytes | None:
    """A regular file's bytes (at most `limit`), or None when it is missing, a symlink,
    a FIFO or unreadable."""
    try:
        fd = open_regular(path)
    except OSError:
        return None
    try:
        chunks, size = [], 0
        while size < limit:
            chunk = os.read(fd, min(1 << 16, limit - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------ project file consent
def _consent_path() -> Path:
    return config_dir() / "trusted-files.json"


def _consents() -> dict[str, str]:
    data = read_regular(_consent_path(), limit=1 << 20)
    try:
        parsed = json.loads(data) if data else {}
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in parsed.items()} if isinstance(parsed, dict) else {}


def allow_file(path: Path) -> str:
    """`rlm trust PATH`: record PATH's sha256 as allowed by the user; the line to show."""
    path = Path(path).resolve()
    data = read_regular(path, limit=1 << 20)
    if data is None:
        raise FileNotFoundError(f"{path} is not a regular file you can read")
    consents = _consents()
    consents[str(path)] = sha256_of(data)
    target = _consent_path()
    ensure_dir(target.parent)
    write_private_atomic(target, json.dumps(consents, indent=1, sort_keys=True).encode())
    return f"allowed {path} (sha256 {consents[str(path)][:12]}...); a change to it needs `rlm trust` again"


def allowed(path: Path, data: bytes) -> bool:
    """Did the user allow exactly these bytes at this path (`rlm trust`)?"""
    return _consents().get(str(Path(path).resolve())) == sha256_of(data)


def protected_paths(home: Path, extra: Iterable[Path] = ()) -> list[Path]:
    """What a sandboxed kernel must not see at all (rlm/kernel/sandbox_exec.py hides each
    wherever a shown path, the working directory say, would show it): the user's config
    dir (run records, consents), `$RLM_HOME` (config.toml, every session's log, lock and
    connection files) and any config file named by RLM_CONFIG. `extra`: the session dir
    itself (one given as a path may live outside $RLM_HOME); its kernel's own
    directories are shown under it."""
    out = [config_dir(), Path(home)]
    explicit = os.environ.get("RLM_CONFIG")
    if explicit:
        out.append(Path(explicit))
    out.extend(extra)
    return [p.resolve() for p in out]  # a linked dir is protected where it really is
