"""Whether a kernel runs in the sandbox (rlm/kernel/sandbox_exec.py), and what to say once.

`Config.sandbox` is a choice with three values:

- `True` (`--sandbox`, `sandbox = true`; `RLM_SANDBOX=1` wins over any setting):
  required; a machine without unprivileged user namespaces refuses to start the kernel
  (one line, with the fix).
- `False` (`--no-sandbox`, `sandbox = false`; `RLM_SANDBOX=0` when neither sets it): the
  kernel runs as the user, with the network.
- `None`, the default: the sandbox wherever it can hold — a local kernel (`--kernel
  local`) on a machine whose probe succeeds, and no `--snapshot-url` on the network (the
  kernel writes the snapshots itself, and a sandboxed kernel has no network). A gateway
  or provisioner kernel runs elsewhere (its own isolation: a container, a pod), so the
  default leaves it alone; `%%rlm` runs in the user's own notebook kernel, which rlm did
  not start and cannot wrap (its `rlm_query` children get kernels of their own, which
  follow this rule). Where the probe fails, the kernel runs unsandboxed and the user is
  told once why.

`choose` is the pure decision (tested on fixtures); `rlm.kernel.runtime` carries it out
and `once` (the root) shows the first-run notice. A command line's choice is recorded
with the session, and a recorded `sandbox = false` that the user did not give is refused
like any other loosening (rlm.trust: the default counts as on).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# What the first sandboxed run says, once per user (the marker is in the user's config dir).
ON_NOTICE = (
    "the kernel runs in a sandbox (the default where Linux allows it): its own user, mount, "
    "PID and network namespaces and a filesystem of its own. It shows the kernel only your "
    "working directory (read-write), this session's snapshot and runtime dirs, a private "
    "/tmp, and read-only the system (/usr, /etc, /opt), Python and rlm (a cell cannot "
    "change them, as root either). Hidden from it: the rest of your home directory, your "
    "other files and data outside the working directory, every other session and this "
    "one's log, your rlm config, /run and host sockets; your provider keys and agent "
    "sockets (SSH_AUTH_SOCK) are not in its environment, and what it starts ends with the "
    "run. NOT protected: whatever is under the working directory (start rlm in a project "
    "directory, not in your home), and what /etc shows any reader; and the kernel has no "
    "network (no pd.read_csv('https://...'), no pip install, no database on another host; "
    "--kernel-network gives it back). Turn it off with --no-sandbox, or `sandbox = false` "
    "in $RLM_HOME/config.toml (RLM_SANDBOX=0 in the environment); --sandbox makes it "
    "required. Shown once.")
UNAVAILABLE_NOTICE = (
    "the kernel runs WITHOUT a sandbox: this machine gives no unprivileged user namespaces "
    "({reason}). A cell can read what you can read, including a provider key in a parent "
    "process's environment (/proc/<pid>/environ of a `make`, `timeout` or CI runner "
    "started with it), and write your rlm config and session logs (the host refuses "
    "what it reads back from them). Enable user namespaces (e.g. sysctl "
    "kernel.unprivileged_userns_clone=1 or user.max_user_namespaces > 0) to get it. "
    "Shown once.")


@dataclass(frozen=True)
class SandboxChoice:
    on: bool
    required: bool  # asked for explicitly: unavailable is an error, not a fallback
    why: str  # one short phrase: why on or off
    notice: str | None = None  # the once-only notice for this outcome
    notice_key: str | None = None  # its marker's name


def _network_url(url: str | None) -> bool:
    return bool(url) and not str(url).startswith("file://")


def choose(setting: bool | None, env: str | None, kind: str, snapshot_url: str | None,
           probe: Callable[[], str | None]) -> SandboxChoice:
    """`setting`: Config.sandbox; `env`: RLM_SANDBOX; `kind`: the kernel kind (local,
    gateway, provisioner); `probe()`: None when this machine can sandbox, else why not
    (called only when the answer matters)."""
    if setting is True or env == "1":  # a tightening from the user's own environment
        return SandboxChoice(True, True, "asked for (--sandbox)")
    if setting is False or (setting is None and env == "0"):
        return SandboxChoice(False, False, "turned off (--no-sandbox)")
    if kind != "local":
        return SandboxChoice(False, False, f"a {kind} kernel runs elsewhere (isolate it there)")
    if _network_url(snapshot_url):
        return SandboxChoice(False, False, "the kernel writes snapshots to --snapshot-url over "
                                           "the network, which a sandboxed kernel has not")
    unavailable = probe()
    if unavailable is not None:
        return SandboxChoice(False, False, f"not available here ({unavailable})",
                             UNAVAILABLE_NOTICE.format(reason=unavailable), "sandbox-unavailable")
    return SandboxChoice(True, False, "the default where available", ON_NOTICE, "sandbox-default")
