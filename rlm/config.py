"""One configuration dataclass. Sources, weakest first, merged key by key: defaults, the
user's config file, the project's file, env, flags.

The user's file is $RLM_CONFIG, else $RLM_HOME/config.toml; the project's is ./rlm.toml;
both are read when both exist, so a project file never hides the user's own settings
(a `sandbox = true` in config.toml holds whatever a cell writes into ./rlm.toml). Keys are
the field names below (e.g. `model = "openai/gpt-4o-mini"`, `cell_timeout = 120`).
Env: RLM_MODEL, RLM_SUB_MODEL, RLM_COMPACTION_MODEL, RLM_ADVISOR, RLM_HOME.

Trust (rlm.trust): `$RLM_CONFIG` and `$RLM_HOME/config.toml` are the user's own. A
working-directory `rlm.toml` is a project's: it may set only `PROJECT_SAFE` settings
(model choice, limits, compaction); anything that changes what runs or what the kernel
sees (kernel_python, kernel_env_pass, home, kernel, snapshot_url, ...) is refused unless
the user allowed that file's exact bytes with `rlm trust [PATH]`. RLM_HOME wins over a
file's `home`, and a file's `home` must be under the user's home directory (a root run
must not write /etc/sessions because a file said so); set RLM_HOME for anywhere else.
`files_read()` names the files the last `load_config` read and what each set (the run
header shows it).
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from kernel_ext.wire import MAX_CONTEXT_BYTES
from rlm import trust
from rlm.errors import ConfigError
from rlm.paths import rlm_home

MiB = 1024 * 1024


@dataclass
class Config:
    model: str | None = None  # litellm string | local | local:PATH.gguf | script:PATH
    sub_model: str | None = None  # llm_query default; None: the session's model
    compaction_model: str | None = None  # None: the session's model
    advisor: str | None = None  # a second model that watches and advises (rlm.app.advising)
    # the embedded model's turns sampled under a grammar: one fenced cell or FINAL(...)
    # (rlm.llm.reply_grammar); False: free text, read as today
    local_grammar: bool = True
    # candidate programs voted by what they compute (rlm.app.candidates): replies drawn at
    # the steps that decide an answer, each tried in a fork of the kernel; 1: the turn's own
    candidates: int = 1
    home: Path = field(default_factory=rlm_home)

    # run limits (None: unlimited)
    max_turns: int | None = 30
    max_tokens: int | None = None
    max_wall_s: float | None = None
    temperature: float | None = None

    # kernel
    cell_timeout: float = 300.0
    gate_timeout_s: float = 600.0  # a --gate command is killed (its process group) after this
    interrupt_grace_s: float = 2.0
    # characters of a cell's output the model sees (head + tail; the rest is spooled).
    # None: scaled to the model's window (`scaled_output_budget`), at most 20,000
    output_budget_chars: int | None = None
    # bytes of one cell's output kept on disk (the full-output spool and its artifacts
    # together); past it the spool stops and the cell's output says how much was cut
    output_disk_cap: int = 256 * MiB
    # the kernel's memory cap (RLIMIT_DATA: allocations past it raise MemoryError in the
    # cell). None: DEFAULT_MEMORY_CAP_FRACTION of physical RAM (`memory_cap`); 0: no cap
    memory_cap_bytes: int | None = None
    # tasks (processes and threads) the kernel and everything it starts may hold at once,
    # where rlm can make a cgroup for it (rlm.kernel.cgroup); 0: no bound
    kernel_max_procs: int = 1024
    kernel_python: str | None = None  # default: the host's interpreter
    kernel_cwd: str | None = None  # the kernel's working directory (default: the host's)
    # the files this run loads into the kernel (--context, files the task names): shown
    # read-only in the sandbox wherever they are (set from the run's options, not a setting)
    kernel_inputs: tuple[str, ...] = ()
    kernel_env_pass: tuple[str, ...] = ()  # secret-looking env names the kernel may see
    snapshot_var_cap: int = 256 * MiB
    snapshot_total_cap: int = 1024 * MiB
    # kernel in its own user, mount and network namespaces (rlm.kernel.sandbox_exec). None:
    # wherever the platform allows it (rlm.kernel.sandbox_policy); False: never; True: required
    sandbox: bool | None = None
    # the sandboxed kernel keeps the host's network (the file protections stay): for cells
    # that read URLs or databases on other hosts. A user setting: never from a project
    # file or a recorded run (rlm.trust)
    kernel_network: bool = False
    kernel: str = "local"  # local | gateway:URL[#KERNELSPEC] | provisioner:NAME (KernelKind)
    # where the kernel writes snapshots: an fsspec URL (s3://bucket/prefix, gs://...,
    # file:///path); each session under <url>/<session id>. None: <session dir>/snapshot
    snapshot_url: str | None = None
    # rebuild names a snapshot could not hold by re-running their recorded cells (only
    # cells known to stay in the kernel: kernel_ext.lineage_rules); `--no-replay` turns it off
    replay: bool = True
    # project memory: the `.agent/` files of the working directory at the head of every
    # context, written through the kernel's `memory` helper (rlm.memory); `--no-memory`
    memory: bool = True

    # compaction
    compaction_enabled: bool = True
    context_window: int | None = None  # None: the model's own (n_ctx, litellm's model info)
    # None: scaled to the window (rlm.compaction.plan.effective_settings); a value set here
    # or by a flag is kept as given, and refused at start when it cannot fit the window
    reserve_tokens: int | None = None
    keep_recent_tokens: int | None = None
    # tiers before a summary (rlm.compaction.tiers): prune superseded results, shake old ones
    context_tiers: bool = True
    # a checkpoint written in the background when the context crosses these fractions of
    # the window (rlm.compaction.checkpoint); None: by model (hosted 0.4, 0.6, 0.75; none
    # for a model in this process), () none
    checkpoint_rungs: tuple[float, ...] | None = None

    # recursion
    max_depth: int = 1
    token_budget: int | None = None  # bounds the whole rlm_query tree
    turn_budget: int | None = None  # bounds the turns of the whole tree (parent + children)
    batch_concurrency: int = 8
    # children (rlm_spawn, rlm_query) and batched sub-calls running at once in the whole
    # session tree (rlm.agent.slots); 0: unlimited
    max_children: int = 8
    # with a --token-budget (--turn-budget), each child is promised this share of what its
    # parent can lend when it starts (rlm.agent.budget: never more than is left)
    child_budget_share: float = 0.5
    # the share of each budget of the tree its owner never lends its children (at least 2
    # turns): what it keeps to read their results and answer (rlm.agent.budget)
    budget_reserve: float = 0.1
    # the largest `context=` an rlm_spawn / rlm_query child is given as the object itself
    # (pickled by the snapshot codec); past it the spawn is refused with how to pass it
    child_context_max_bytes: int = 8 * MiB

    # resident worker: with no queued prompt, active goal or schedule it exits after this
    # many idle seconds (None: never)
    worker_idle_exit_s: float | None = 300.0

    def __post_init__(self) -> None:
        validate(self)

    def memory_cap(self) -> int | None:
        """The kernel's memory cap in bytes, or None for no cap (`memory_cap_bytes = 0`)."""
        if self.memory_cap_bytes is None:
            return default_memory_cap()
        return self.memory_cap_bytes or None

    def output_budget(self) -> int:
        """The output budget in characters: the value set, else the unscaled default."""
        return self.output_budget_chars or DEFAULT_OUTPUT_BUDGET_CHARS

    def with_overrides(self, **kw: Any) -> Config:
        """Flags win: apply every non-None keyword."""
        return replace(self, **{k: v for k, v in kw.items() if v is not None})


DEFAULT_OUTPUT_BUDGET_CHARS = 20_000
MIN_OUTPUT_BUDGET_CHARS = 2_000


def scaled_output_budget(window: int | None) -> int:
    """One character of cell output per token of the model's window, between 2,000 and
    20,000: an 8,192-token window sees ~8 KB of each output (~2,300 tokens, under a third
    of the window), windows from 20,000 tokens up the full 20,000 characters."""
    if not window or window <= 0:
        return DEFAULT_OUTPUT_BUDGET_CHARS
    return max(MIN_OUTPUT_BUDGET_CHARS, min(DEFAULT_OUTPUT_BUDGET_CHARS, int(window)))


# The smallest address-space cap under which a kernel starts and imports numpy and pandas
# (measured: at 256M the kernel dies at start, at 512M OpenBLAS cannot map its library).
MIN_MEMORY_CAP = 1024 * MiB
# The kernel's default memory cap: this share of the memory the machine (or the cgroup rlm
# runs in) has, at least MIN_MEMORY_CAP. It is RLIMIT_DATA (heap and private writable
# mappings), not the address space: V8 (node, kaleido's Chromium), the JVM and Go reserve
# gigabytes of address space they never touch, which `prlimit --as` at a share of RAM
# would refuse them; reserved-but-inaccessible mappings do not count against RLIMIT_DATA.
DEFAULT_MEMORY_CAP_FRACTION = 0.75


def _memory_available() -> int | None:
    """Physical RAM, or the memory limit of this process's cgroup when lower."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
    limits = []
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, ctrl, path = line.split(":", 2)
            if ctrl == "":
                limits.append(Path("/sys/fs/cgroup", path.lstrip("/"), "memory.max"))
                limits.append(Path("/sys/fs/cgroup/unified", path.lstrip("/"), "memory.max"))
            elif "memory" in ctrl.split(","):
                limits.append(Path("/sys/fs/cgroup/memory", path.lstrip("/"),
                                   "memory.limit_in_bytes"))
    except (OSError, ValueError):
        pass
    for f in limits:
        try:
            value = f.read_text().strip()
        except OSError:
            continue
        if value.isdigit():
            total = min(total, int(value))
    return total


def default_memory_cap() -> int | None:
    """The cap `memory_cap_bytes = None` stands for (None where RAM is unknown)."""
    total = _memory_available()
    if not total:
        return None
    return max(int(total * DEFAULT_MEMORY_CAP_FRACTION) // MiB * MiB, MIN_MEMORY_CAP)

# (field, the flag or key a user sets it with, what is allowed)
_POSITIVE_INT = ("max_turns", "max_tokens", "output_budget_chars", "batch_concurrency",
                 "max_depth", "token_budget", "turn_budget", "context_window", "snapshot_var_cap",
                 "snapshot_total_cap", "child_context_max_bytes")
_NON_NEGATIVE_INT = ("reserve_tokens", "keep_recent_tokens", "max_children")
_POSITIVE_SECONDS = ("cell_timeout", "interrupt_grace_s", "max_wall_s", "worker_idle_exit_s",
                     "gate_timeout_s")
_NONE_IS_UNLIMITED = ("max_wall_s", "worker_idle_exit_s")
_FLAG = {"max_turns": "--max-turns", "max_tokens": "--max-tokens", "cell_timeout": "--cell-timeout",
         "gate_timeout_s": "--gate-timeout",
         "max_wall_s": "--max-wall", "memory_cap_bytes": "--memory-cap",
         "max_depth": "--max-depth", "token_budget": "--token-budget",
         "turn_budget": "--turn-budget",
         "max_children": "--max-children",
         "context_window": "--context-window", "reserve_tokens": "--reserve-tokens",
         "keep_recent_tokens": "--keep-recent-tokens", "temperature": "--temperature",
         "snapshot_url": "--snapshot-url"}


@dataclass(frozen=True)
class KernelKind:
    """Where the kernel runs (`--kernel`, config `kernel`): `local` (a child process of the
    host), `gateway:URL[#KERNELSPEC]` (a Jupyter Kernel/Enterprise Gateway; its token comes
    from RLM_GATEWAY_TOKEN or JUPYTER_GATEWAY_AUTH_TOKEN, never from the URL) or
    `provisioner:NAME` (a jupyter_client kernel provisioner installed on the host)."""

    kind: str
    url: str = ""  # gateway: the base URL, e.g. http://127.0.0.1:8888
    name: str = ""  # gateway: the kernelspec on the gateway ("" = its default); provisioner: NAME


_KERNEL_HELP = "use local, gateway:http://HOST:PORT[#KERNELSPEC] or provisioner:NAME"


def kernel_kind(spec: str) -> KernelKind:
    """Parse a `kernel` setting; a ConfigError of one line says what is wrong."""
    from urllib.parse import urlsplit

    if not isinstance(spec, str):
        raise ConfigError(f"--kernel (kernel) must be text, got {spec!r}; {_KERNEL_HELP}")
    head, _, rest = spec.strip().partition(":")
    if head == "local" and not rest:
        return KernelKind("local")
    if head == "provisioner":
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.\-]*", rest):
            raise ConfigError(f"--kernel {spec!r}: a provisioner name is letters, digits, '.', "
                              f"'_' or '-' (e.g. provisioner:local-provisioner)")
        return KernelKind("provisioner", name=rest)
    if head == "gateway":
        url, _, name = rest.partition("#")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"--kernel {spec!r}: the gateway URL must be http(s)://HOST[:PORT]"
                              f"[/BASE], e.g. gateway:http://127.0.0.1:8888")
        if parts.username or parts.password or parts.query:
            raise ConfigError(f"--kernel {spec!r}: put the gateway token in RLM_GATEWAY_TOKEN, "
                              f"not in the URL (the URL is recorded with the session)")
        return KernelKind("gateway", url=url.rstrip("/"), name=name)
    raise ConfigError(f"--kernel {spec!r} is not a kernel kind; {_KERNEL_HELP}")


def _name(field_name: str) -> str:
    flag = _FLAG.get(field_name)
    return f"{flag} ({field_name})" if flag else field_name


def validate(cfg: Config) -> None:
    """Refuse values no run can use, with one line naming the setting. `None` means
    unlimited where a field allows it; 0 is never a stand-in for unlimited."""
    for name in _POSITIVE_INT + _NON_NEGATIVE_INT:
        value = getattr(cfg, name)
        if value is None and name != "max_depth":  # unlimited, or (compaction) scaled
            continue
        low = 0 if name in _NON_NEGATIVE_INT or name == "max_depth" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            unlimited = " (use 'unlimited' for no limit)" if name in ("max_turns", "max_tokens") else ""
            raise ConfigError(f"{_name(name)} must be a whole number >= {low}, got {value!r}"
                              f"{unlimited}")
    for name in _POSITIVE_SECONDS:
        value = getattr(cfg, name)
        if value is None and name in _NONE_IS_UNLIMITED:
            continue
        if (isinstance(value, bool) or not isinstance(value, int | float)
                or not math.isfinite(value) or value <= 0):
            raise ConfigError(f"{_name(name)} must be a finite number of seconds > 0, got {value!r}")
    share = cfg.child_budget_share
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
        raise ConfigError(f"child_budget_share must be a number in (0, 1], got {share!r}")
    kept = cfg.budget_reserve
    if isinstance(kept, bool) or not isinstance(kept, int | float) or not 0 <= kept < 1:
        raise ConfigError(f"budget_reserve must be a number in [0, 1), got {kept!r}")
    if cfg.child_context_max_bytes > MAX_CONTEXT_BYTES:
        raise ConfigError(f"child_context_max_bytes must be at most {MAX_CONTEXT_BYTES} (what "
                          f"the kernel's bridge carries), got {cfg.child_context_max_bytes!r}")
    cap = cfg.memory_cap_bytes
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int)
                            or 0 < cap < MIN_MEMORY_CAP or cap < 0):
        raise ConfigError(f"{_name('memory_cap_bytes')} must be at least {MIN_MEMORY_CAP // MiB}M "
                          f"(a kernel with numpy and pandas cannot start under less), or 0 for "
                          f"no cap, got {cap!r}")
    for name, low in (("output_disk_cap", MiB), ("kernel_max_procs", 0)):
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"{_name(name)} must be a whole number >= {low}, got {value!r}")
    if 0 < cfg.kernel_max_procs < 64:
        raise ConfigError(f"{_name('kernel_max_procs')} must be at least 64 (the kernel's own "
                          f"threads count), or 0 for no bound, got {cfg.kernel_max_procs!r}")
    kind = kernel_kind(cfg.kernel)
    if kind.kind == "gateway" and cfg.sandbox is True:
        raise ConfigError(f"--sandbox is not available with --kernel {cfg.kernel}: the kernel "
                          "runs on the gateway's machine; isolate it there (container, pod)")
    if kind.kind == "gateway" and cfg.memory_cap_bytes:  # an explicit one; 0 and None pass
        raise ConfigError(f"--memory-cap is not available with --kernel {cfg.kernel}: the "
                          "gateway's kernelspec or cluster sets the memory limit (e.g. a pod's "
                          "resources.limits.memory)")
    if cfg.snapshot_url is not None:
        problem = snapshot_url_problem(cfg.snapshot_url)
        if problem:
            raise ConfigError(f"{_name('snapshot_url')}: {problem}")
    t = cfg.temperature
    if t is not None and (isinstance(t, bool) or not isinstance(t, int | float)
                          or not math.isfinite(t) or not 0 <= t <= 2):
        raise ConfigError(f"{_name('temperature')} must be between 0 and 2, got {t!r}")
    rungs = cfg.checkpoint_rungs
    if rungs is not None and not all(
            isinstance(f, int | float) and not isinstance(f, bool) and 0 < f < 1 for f in rungs):
        raise ConfigError(f"checkpoint_rungs must be fractions of the window between 0 and 1, "
                          f"e.g. [0.4, 0.6], got {list(rungs)!r}")


def snapshot_url_problem(url: object) -> str | None:
    """Why `url` cannot be a snapshot URL (one line with the fix), or None. Syntax only:
    whether its backend and credentials are there is checked where the kernel starts."""
    from urllib.parse import urlsplit

    example = "a URL like s3://bucket/prefix, gs://bucket/prefix or file:///path"
    if not isinstance(url, str) or "://" not in url:
        return f"{url!r} is not {example}"
    parts = urlsplit(url)
    if not parts.scheme or not (parts.netloc or parts.path.strip("/")):
        return f"{url!r} is not {example}"
    if "@" in parts.netloc:
        return ("credentials do not belong in the URL (it is recorded with the session): "
                "remove user:password@ and set them in the environment, e.g. "
                "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY")
    if parts.query or parts.fragment:
        return "the URL takes no ?query or #fragment: give options through the environment"
    return None


_ENV = {
    "model": "RLM_MODEL",
    "sub_model": "RLM_SUB_MODEL",
    "compaction_model": "RLM_COMPACTION_MODEL",
    "advisor": "RLM_ADVISOR",
}


PROJECT_FILE = "rlm.toml"
# What a working-directory rlm.toml may set without `rlm trust`: choices and limits that
# change neither what runs on the host nor what the kernel sees.
PROJECT_SAFE = frozenset({
    "model", "sub_model", "compaction_model", "advisor", "max_turns", "max_tokens",
    "max_wall_s", "temperature", "cell_timeout", "gate_timeout_s", "interrupt_grace_s",
    "output_budget_chars", "output_disk_cap", "kernel_max_procs",
    "memory_cap_bytes", "snapshot_var_cap", "snapshot_total_cap", "compaction_enabled",
    "context_tiers", "checkpoint_rungs", "context_window", "reserve_tokens", "keep_recent_tokens", "max_depth", "token_budget", "turn_budget",
    "batch_concurrency", "worker_idle_exit_s", "memory", "max_children", "child_budget_share",
    "budget_reserve", "child_context_max_bytes", "local_grammar", "candidates",
})
# The limits among PROJECT_SAFE: an un-allowed project file may only TIGHTEN each of them
# against defaults + the user's own config (a larger value is ignored and said). The
# value is what None means for that limit (math.inf: unlimited; a number: the largest
# value it stands for); `0 is unlimited` for max_children.
PROJECT_LIMITS: dict[str, float] = {
    "max_turns": math.inf, "max_tokens": math.inf, "max_wall_s": math.inf,
    "cell_timeout": math.inf, "gate_timeout_s": math.inf, "interrupt_grace_s": math.inf,
    "output_budget_chars": DEFAULT_OUTPUT_BUDGET_CHARS,
    "memory_cap_bytes": float(default_memory_cap() or math.inf),
    "output_disk_cap": math.inf, "kernel_max_procs": math.inf,
    "snapshot_var_cap": math.inf, "snapshot_total_cap": math.inf,
    "context_window": math.inf, "keep_recent_tokens": math.inf, "max_depth": math.inf,
    "token_budget": math.inf, "turn_budget": math.inf, "batch_concurrency": math.inf,
    "worker_idle_exit_s": math.inf, "max_children": math.inf, "child_budget_share": math.inf,
    "child_context_max_bytes": math.inf, "candidates": math.inf,
}
ZERO_IS_UNLIMITED = ("max_children", "memory_cap_bytes", "kernel_max_procs")
# The rest of PROJECT_SAFE: choices and tuning, taken as the file gives them (a model only
# among the user's own: `_not_mine`).
PROJECT_CHOICES = frozenset({
    "model", "sub_model", "compaction_model", "advisor", "temperature", "compaction_enabled",
    "context_tiers", "checkpoint_rungs", "reserve_tokens", "memory", "budget_reserve",
    "local_grammar",
})
_FILES_READ: list[str] = []


def files_read() -> list[str]:
    """The config files the last `load_config` read, each with how it was taken."""
    return list(_FILES_READ)


def _config_files() -> list[tuple[Path, bool]]:
    """The config files to read, weakest first, each with whether it is the user's own
    (else the project's): the user's, then the working directory's rlm.toml."""
    out: list[tuple[Path, bool]] = []
    explicit = os.environ.get("RLM_CONFIG")
    if explicit:
        p = Path(explicit)
        if not p.is_file():
            raise ConfigError(f"RLM_CONFIG points at {p}, which does not exist")
        out.append((p, True))
    elif (rlm_home() / "config.toml").is_file():
        out.append((rlm_home() / "config.toml", True))
    project = Path(PROJECT_FILE)
    if os.path.lexists(project) and not any(_same_file(project, p) for p, _ in out):
        out.append((project, False))
    return out


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.samefile(b)
    except OSError:
        return False


def _model_names_a_file(value: Any) -> bool:
    return isinstance(value, str) and (value.startswith("script:") or value.startswith("local:"))


def _project_refusals(path: Path, data: dict[str, Any]) -> list[str]:
    """The settings an un-allowed project file may not set."""
    out = [k for k in data if k not in PROJECT_SAFE and not (k == "sandbox" and data[k] is True)]
    # a model spec that makes the host read a file (script:PATH, local:PATH.gguf)
    out += [k for k in ("model", "sub_model", "compaction_model", "advisor")
            if _model_names_a_file(data.get(k))]
    return sorted(set(out))


def _home_from_file(path: Path, value: Path) -> Path | None:
    """A file's `home`: None when RLM_HOME is set (the environment wins); refused
    outside the user's home directory."""
    if os.environ.get("RLM_HOME"):
        return None
    home = (path.parent / value.expanduser()).resolve()
    mine = Path.home().resolve()
    if home != mine and mine not in home.parents:
        raise ConfigError(f"{path}: home = {str(value)!r} is outside your home directory "
                          f"({mine}); set RLM_HOME={home} to use it")
    return home


_KINDS: dict[str, tuple[type, ...]] = {}


def _kinds(name: str) -> tuple[type, ...]:
    """Accepted TOML value types for a Config field, from its annotation."""
    if not _KINDS:
        for f in fields(Config):
            text = str(f.type)
            kinds: list[type] = []
            for word, kind in (("str", str), ("int", int), ("float", float), ("bool", bool),
                               ("Path", str), ("tuple", list)):
                if word in text:
                    kinds.append(kind)
            if "float" in text:
                kinds.append(int)  # 300 is a fine cell_timeout
            _KINDS[f.name] = tuple(kinds)
    return _KINDS[name]


def _checked(path: Path, name: str, value: Any) -> Any:
    kinds = _kinds(name)
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    if not ok:
        want = " or ".join(sorted({k.__name__ for k in kinds}))
        raise ConfigError(f"{path}: {name} = {value!r} should be {want}")
    if name == "home":
        return Path(value)
    if name == "kernel_env_pass":
        return tuple(str(v) for v in value)
    if name == "checkpoint_rungs":
        return tuple(value)
    return value


def load_config(**flags: Any) -> Config:
    """Defaults < the user's config < the project's rlm.toml < env < flags, key by key (None
    flags are ignored). What a project file may not set without `rlm trust` is ignored and
    said (`config_warnings()`), never taken and never fatal."""
    cfg = Config()
    _FILES_READ.clear()
    _IGNORED.clear()
    env: dict[str, Any] = {k: os.environ[v] for k, v in _ENV.items() if os.environ.get(v)}
    # the models the user chose: what a project file may pick among without consent
    mine = {"local"} | {str(v) for k, v in {**env, **flags}.items()
                        if k in MODEL_KEYS and v}
    for path, own in _config_files():
        if own:  # the user's own file: a problem is an error naming the file and line
            values = _file_values(path, own, mine)
            mine |= {str(values[k]) for k in MODEL_KEYS if values.get(k)}
            cfg = replace(cfg, **values)
            continue
        try:  # a project file never locks the user out: ignored whole, said in one line
            cfg = _project_over(cfg, path, mine)
        except ConfigError as e:
            why = str(e) if str(e).startswith(str(path)) else f"{path}: {e}"
            _IGNORED.append(f"{why}; ignored meanwhile (a project file never stops a command)")
            _FILES_READ.append(f"{path.absolute()} (project file: ignored, see the warning)")
    cfg = replace(cfg, **env)
    return cfg.with_overrides(**flags)


def _project_over(cfg: Config, path: Path, mine: set[str]) -> Config:
    """`cfg` (defaults + the user's own) with a project file's settings over it; raises
    ConfigError for a file that cannot be read or used (the caller ignores it whole).
    Without `rlm trust` a limit is taken only when it is stricter than `cfg`'s."""
    said, read = len(_IGNORED), len(_FILES_READ)
    values = _file_values(path, False, mine, baseline=cfg)
    try:
        return replace(cfg, **values)
    except ConfigError:
        del _IGNORED[said:], _FILES_READ[read:]  # the caller's one line says it all
        raise


def _raised(path: Path, data: dict[str, Any], baseline: Config) -> list[str]:
    """The limits a project file sets looser than `baseline` (defaults + the user's own),
    said in one line: a project file may only tighten them."""
    out = []
    for k in sorted(k for k in data if k in PROJECT_LIMITS):
        try:
            looser = _loosest(k, data[k]) > _loosest(k, getattr(baseline, k))
        except (TypeError, ValueError):
            continue  # not a number: `_checked` says so
        if looser:
            out.append(k)
    if out:
        each = ", ".join(f"{k} to {_said(data[k])} (yours: {_said(getattr(baseline, k))})"
                         for k in out)
        _IGNORED.append(f"{path} would raise {each}: ignored; a project file may only lower "
                        "limits (set them in your config or pass a flag)")
    return out


def _loosest(name: str, value: Any) -> float:
    """A limit's value as a number, larger = looser (None and, where it means so, 0 are
    what PROJECT_LIMITS says they stand for: 0 is unlimited)."""
    if value == 0 and name in ZERO_IS_UNLIMITED:
        return math.inf
    if value is None:
        return PROJECT_LIMITS[name]
    if isinstance(value, bool):
        raise TypeError(name)
    return float(value)


def _said(value: Any) -> str:
    return "unlimited" if value is None else repr(value)


def config_warnings() -> list[str]:
    """What the last `load_config` ignored, one line each (said by every command)."""
    return list(_IGNORED)


_IGNORED: list[str] = []
MODEL_KEYS = ("model", "sub_model", "compaction_model", "advisor")


def _not_mine(data: dict[str, Any], mine: set[str]) -> list[str]:
    """A project file's model settings naming a model the user did not choose (it would
    spend the user's keys with a provider the project picked)."""
    return [k for k in MODEL_KEYS if isinstance(data.get(k), str) and data[k] not in mine
            and not _model_names_a_file(data[k])]


def _file_values(path: Path, own: bool, mine: set[str],
                 baseline: Config | None = None) -> dict[str, Any]:
    """The settings one file gives, checked. A project file without consent gives its
    harmless settings, a model only among `mine` and a limit only below `baseline`'s; the
    rest is ignored and said."""
    raw = trust.read_regular(path, limit=1 << 20)
    try:
        if raw is None:
            raise OSError("not a regular file you can read")
        data = tomllib.loads(raw.decode())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"{path}: cannot read config ({e}); fix the file or remove it") from e
    known = {f.name: f for f in fields(Config)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ConfigError(f"{path}: unknown setting(s) {', '.join(unknown)}")
    allowed = own or trust.allowed(path, raw)
    refused = [] if allowed else _project_refusals(path, data)
    if refused:
        _IGNORED.append(
            f"{path} sets {', '.join(refused)}, which change(s) what runs or what the kernel "
            f"sees: ignored; `rlm trust {path}` allows the file as it is now (by sha256)")
    others = [] if allowed else _not_mine(data, mine)
    if others:
        _IGNORED.append(
            f"{path} names {', '.join(f'{k} = {data[k]!r}' for k in others)}, not among your "
            f"models ({', '.join(sorted(mine))}): ignored; pass it with --model (or set it in "
            f"your config), or `rlm trust {path}`")
    data = {k: v for k, v in data.items() if k not in refused and k not in others}
    raised = [] if allowed or baseline is None else _raised(path, data, baseline)
    refused += raised
    data = {k: v for k, v in data.items() if k not in raised}
    values = {k: _checked(path, k, v) for k, v in data.items()}
    if "home" in values:
        file_home = _home_from_file(path, values.pop("home"))
        if file_home is not None:
            values["home"] = file_home
    how = ("your config" if own else "project file, allowed by `rlm trust`" if allowed
           else "project file: harmless settings only")
    sets = f"sets {', '.join(sorted(data))}" if data else "sets nothing"
    if refused or others:
        sets += f" (ignored: {', '.join(sorted(refused + others))})"
    _FILES_READ.append(f"{path.resolve()} ({how}) {sets}")
    return values
