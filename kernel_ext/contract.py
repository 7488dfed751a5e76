"""The host <-> kernel contract: everything rlm and kernel_ext share, declared once.

kernel_ext never imports rlm (it may run in another interpreter, on another machine); rlm
reaches kernel_ext only through what this module declares, by name:

  ENV           environment variables the host sets for the kernel (kernel_ext reads them
                as `contract.NAME`, the host sets them as `contract.NAME`); GATEWAY_ENV is
                the part that travels to a gateway kernel as `KERNEL_<name>`
  CALLS         kernel_ext functions the host evaluates inside the kernel (user_expressions,
                silent): `SNAPSHOT_NAMESPACE.expression()` is the only way to spell one
  HOST_IMPORTS  kernel_ext modules and names the host imports into its own process: the
                wire format (`kernel_ext.wire`: bridge messages, the snapshot manifest's
                name, the subshell listing message), pure helpers both sides use (value
                descriptions, the snapshot store's reader), and the in-process executor's
                calls (`%%rlm`, where the agent runs inside the user's kernel)
  EXTENSION, LAUNCHER  how the host loads the extension and starts the kernel process
  ALIASES       the conventional names a kernel defines before its first cell
  METHODS       the bridge: kernel -> host requests (`Method`: name, parameters, the feature
                it belongs to, whether it writes host state). kernel_ext sends one only as
                `bridge.request(contract.NAME, {...})`; `wire.METHODS` is their names; the
                host builds no agent with a declared method left without a handler
                (rlm.app.lifecycle.check_handlers: a feature an entry point lacks answers
                with its gap's message, rlm.app.features.GAPS)

tests/test_contract.py reads both packages with `ast` and fails on a kernel_ext call, an
import, an environment variable or a bridge method one side names that is not declared
here, and on a declared bridge method nobody sends or the host does not answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# -- environment: host -> kernel -------------------------------------------------------
SESSION_DIR = "RLM_SESSION_DIR"  # the session's directory (a path on the host's machine)
SNAPSHOT_DIR = "RLM_SNAPSHOT_DIR"  # where snapshots go (unset/empty: none are written)
SNAPSHOT_URL = "RLM_SNAPSHOT_URL"  # an fsspec URL for snapshots (wins over SNAPSHOT_DIR)
SNAPSHOT_VAR_CAP = "RLM_SNAPSHOT_VAR_CAP"  # bytes per snapshotted value
SNAPSHOT_TOTAL_CAP = "RLM_SNAPSHOT_TOTAL_CAP"  # bytes per snapshot
CHILD_CONTEXT_CAP = "RLM_CHILD_CONTEXT_CAP"  # bytes of a child's context= (child_context)
# fault injection (tests, soak runs): the kernel dies after writing N snapshot data
# files; the host passes it through from its own environment, never sets it
SNAPSHOT_CRASH_AFTER_FILES = "RLM_SNAPSHOT_CRASH_AFTER_FILES"
# not rlm's own: set by the host for the kernel's libraries, read by kernel_ext too
IPYTHONDIR = "IPYTHONDIR"  # IPython's profile dir (kept inside the session)
MPLCONFIGDIR = "MPLCONFIGDIR"  # matplotlib's cache/config dir (kept under $RLM_HOME)
MPLBACKEND = "MPLBACKEND"  # inline figures
MATPLOTLIBRC = "MATPLOTLIBRC"  # the user's matplotlibrc, for a sandboxed kernel (no HOME)
PYTHONPATH = "PYTHONPATH"  # kernel_ext's root, for a kernel_python of another venv

# the host's mark on every process of the kernel (rlm/kernel/reaper.py kills them all at
# stop, setsid children too); kernel_ext never reads it
KERNEL_MARK = "RLM_KERNEL_MARK"
ENV = frozenset({SESSION_DIR, SNAPSHOT_DIR, SNAPSHOT_URL, SNAPSHOT_VAR_CAP, SNAPSHOT_TOTAL_CAP,
                 CHILD_CONTEXT_CAP,
                 SNAPSHOT_CRASH_AFTER_FILES, KERNEL_MARK, IPYTHONDIR, MPLCONFIGDIR, MPLBACKEND,
                 MATPLOTLIBRC, PYTHONPATH})

# Gateways forward a client's environment only as `KERNEL_<NAME>` (Enterprise Gateway and
# Kernel Gateway both); kernel_ext.adopt_gateway_env maps these back. The paths are the
# host's: on a gateway they name directories on the gateway's machine.
GATEWAY_PREFIX = "KERNEL_"
GATEWAY_ENV = (SESSION_DIR, SNAPSHOT_DIR, SNAPSHOT_URL, SNAPSHOT_VAR_CAP, SNAPSHOT_TOTAL_CAP,
               CHILD_CONTEXT_CAP,
               SNAPSHOT_CRASH_AFTER_FILES, MPLBACKEND)


# -- calls: host -> kernel, evaluated in the kernel ------------------------------------
@dataclass(frozen=True)
class Call:
    """A kernel_ext function the host evaluates in the kernel; it returns a str (JSON)."""

    module: str
    function: str

    def expression(self, *args: Any) -> str:
        """The Python expression to send (as a user_expression). Arguments are plain
        literals (str, int, float, bool, None, and lists/dicts of them), written with
        repr(), so the expression is code with no name from the host's side."""
        for a in args:
            _check_literal(a)
        return (f"__import__({self.module!r}, fromlist=['_']).{self.function}"
                f"({', '.join(repr(a) for a in args)})")


def _check_literal(value: Any) -> None:
    if value is None or type(value) in (str, int, float, bool):
        return
    if type(value) in (list, tuple):
        for v in value:
            _check_literal(v)
        return
    if type(value) is dict:
        for k, v in value.items():
            _check_literal(k)
            _check_literal(v)
        return
    raise TypeError(f"a kernel call's argument must be a plain literal, not {type(value).__name__}")


HANDSHAKE = Call("kernel_ext", "handshake")  # JSON: version, python, loaded_by_kernelspec
RESTORE_REPORT = Call("kernel_ext.snapshot", "restore_report_json")
REBUILD = Call("kernel_ext.snapshot", "rebuild_json")  # replay what the snapshot lacked
REBUILD_PLAN = Call("kernel_ext.snapshot", "rebuild_plan_json")  # what it would replay; runs nothing
SNAPSHOT_NAMESPACE = Call("kernel_ext.snapshot", "namespace_json")  # the listing
SNAPSHOT_NOW = Call("kernel_ext.snapshot", "snapshot_now")
FILE_OPS = Call("kernel_ext.fileops", "file_ops_json")
DESCRIBE = Call("kernel_ext.describe", "describe_json")  # (names or None)
# a child's `context=`: the blob its host kept, decoded into the variable `context` (path)
BIND_CONTEXT = Call("kernel_ext.child_context", "bind_json")
# candidate cells run in forked copies of the kernel (codes, timeout, cap): their results
TRIAL = Call("kernel_ext.trial", "trials_json")
# the text columns holding a value (key): after a KeyError on a value (kernel_ext.columns)
WHERE_VALUE = Call("kernel_ext.columns", "where_value_json")
# how filtered text columns are written (table, column, literal): after an empty result
HOW_WRITTEN = Call("kernel_ext.columns", "how_written_json")
# the lines of the kernel's texts holding terms (terms): after a search found nothing
WHERE_TEXT = Call("kernel_ext.texts", "where_text_json")

CALLS = (HANDSHAKE, RESTORE_REPORT, REBUILD, REBUILD_PLAN, SNAPSHOT_NAMESPACE, SNAPSHOT_NOW, FILE_OPS,
         DESCRIBE, TRIAL, WHERE_VALUE, HOW_WRITTEN, WHERE_TEXT)

# -- the bridge: kernel -> host requests ---------------------------------------------
@dataclass(frozen=True)
class Method:
    """A request kernel_ext sends the host (kernel_ext.bridge.request) and the host answers
    (its handler table, rlm.agent.loop.Agent.handlers).

    `params`: the names it may carry (the host refuses others: kernel_ext.wire); `feature`:
    what it belongs to, spelled as in rlm.app.features.FEATURES where the feature is one
    of those (an entry point that lacks it answers with the gap's message); `writes`: it
    changes state the host keeps past the reply (the log, goals, schedules, memory,
    children), so a read-only agent refuses it; `caller`: who sends it; `required`: the
    params its handler needs (the scheduler refuses a call without them)."""

    name: str
    params: tuple[str, ...]
    feature: str
    writes: bool = False
    caller: str = "kernel_ext"  # or TESTS: a diagnostic no kernel_ext code sends
    required: tuple[str, ...] = ()


TESTS = "tests"  # the bridge's round trip, from the tests' own cells
PING = Method("ping", ("n",), "core", caller=TESTS)  # answered with its params
FINAL = Method("final", ("value", "name"), "core", writes=True)
LLM_QUERY = Method("llm_query", ("prompt", "model"), "queries")
LLM_QUERY_BATCHED = Method("llm_query_batched", ("prompts", "model"), "queries")
RLM_QUERY = Method("rlm_query", ("task", "context"), "queries", writes=True)
CHILD_SPAWN = Method("child.spawn", ("task", "name", "context", "schema", "model", "isolation"),
                     "children", writes=True)
CHILD_STATUS = Method("child.status", ("id",), "children")
CHILD_RESULT = Method("child.result", ("id", "timeout"), "children")
CHILD_WAIT = Method("child.wait", ("ids", "any", "timeout"), "children")
# wait=False (an interrupted rlm_gather) cancels the unfinished
CHILD_GATHER = Method("child.gather", ("ids", "timeout", "wait"), "children", writes=True)
CHILD_CANCEL = Method("child.cancel", ("id",), "children", writes=True)
CHILD_STEER = Method("child.steer", ("id", "text"), "children", writes=True)
CHILD_SEND = Method("child.send", ("id", "text"), "children", writes=True)
CHILD_SECTION = Method("child.section", ("label", "item"), "children", writes=True)
CHILD_LIMIT = Method("child.limit", ("n",), "children", writes=True)
COMPACT_RUN = Method("compact.run", ("instructions",), "compaction", writes=True)
COMPACT_STATUS = Method("compact.status", (), "compaction")
COMPACT_SHAKE = Method("compact.shake", (), "compaction", writes=True)
HISTORY_CELL = Method("history.cell", ("n",), "history")
HISTORY_SEARCH = Method("history.search", ("pattern", "limit"), "history")
HISTORY_MESSAGES = Method("history.messages", ("since", "role", "limit"), "history")
HISTORY_CHECKPOINT = Method("history.checkpoint", (), "history")
GOAL_GET = Method("goal.get", (), "goals")
GOAL_COMPLETE = Method("goal.complete", ("summary",), "goals", writes=True)
GOAL_BLOCK = Method("goal.block", ("reason",), "goals", writes=True)
# `delivery` (and cron's `label`): accepted by the scheduler (rlm.longrun.schedule), not
# sent by kernel_ext's heartbeat/cron objects
HEARTBEAT_CREATE = Method("heartbeat.create", ("prompt", "interval", "label", "delivery"),
                          "schedules", writes=True, required=("prompt", "interval"))
HEARTBEAT_LIST = Method("heartbeat.list", (), "schedules")
HEARTBEAT_PAUSE = Method("heartbeat.pause", ("id",), "schedules", writes=True, required=("id",))
HEARTBEAT_RESUME = Method("heartbeat.resume", ("id",), "schedules", writes=True,
                          required=("id",))
HEARTBEAT_DELETE = Method("heartbeat.delete", ("id",), "schedules", writes=True,
                          required=("id",))
CRON_ADD = Method("cron.add", ("when", "prompt", "label", "delivery"), "schedules", writes=True,
                  required=("when", "prompt"))
CRON_LIST = Method("cron.list", (), "schedules")
CRON_CANCEL = Method("cron.cancel", ("id",), "schedules", writes=True, required=("id",))
MEMORY_UPDATE = Method("memory.update", ("file", "content", "mode"), "memory", writes=True)
MEMORY_LOG = Method("memory.log", ("action", "target", "note"), "memory", writes=True)
MEMORY_SNAPSHOT = Method("memory.snapshot", ("label",), "memory", writes=True)
MEMORY_SHOW = Method("memory.show", (), "memory")

METHODS = (PING, FINAL, LLM_QUERY, LLM_QUERY_BATCHED, RLM_QUERY, CHILD_SPAWN, CHILD_STATUS,
           CHILD_RESULT, CHILD_WAIT, CHILD_GATHER, CHILD_CANCEL, CHILD_STEER, CHILD_SEND,
           CHILD_SECTION, CHILD_LIMIT, COMPACT_RUN, COMPACT_STATUS, COMPACT_SHAKE, HISTORY_CELL,
           HISTORY_SEARCH, HISTORY_MESSAGES, HISTORY_CHECKPOINT, GOAL_GET, GOAL_COMPLETE,
           GOAL_BLOCK, HEARTBEAT_CREATE, HEARTBEAT_LIST, HEARTBEAT_PAUSE, HEARTBEAT_RESUME,
           HEARTBEAT_DELETE, CRON_ADD, CRON_LIST, CRON_CANCEL, MEMORY_UPDATE, MEMORY_LOG,
           MEMORY_SNAPSHOT, MEMORY_SHOW)
BY_NAME: dict[str, Method] = {m.name: m for m in METHODS}


def methods_of(feature: str) -> tuple[Method, ...]:
    """The bridge methods of `feature`, in declaration order."""
    return tuple(m for m in METHODS if m.feature == feature)


# -- how the host starts the kernel ---------------------------------------------------
EXTENSION = "kernel_ext"  # `%load_ext kernel_ext`, `--IPKernelApp.extensions=kernel_ext`
LAUNCHER = "kernel_ext.launch"  # `python -m kernel_ext.launch -f CONNECTION_FILE ...`

# -- imports into the host's own process -----------------------------------------------
ALL = frozenset({"*"})  # the whole module is shared (a format module)
HOST_IMPORTS: dict[str, frozenset[str]] = {
    "kernel_ext": frozenset(),  # loaded by name (`%load_ext kernel_ext`), never imported
    "kernel_ext.contract": ALL,
    "kernel_ext.wire": ALL,
    "kernel_ext.describe": frozenset({"listing_line", "listing_lines", "order_names",
                                      "summary", "describe_json", "LEVELS_MARK",
                                      "frame_levels"}),
    "kernel_ext.store_protocol": frozenset({"StoreError", "is_url", "public_url"}),
    "kernel_ext.stores": frozenset({"open_store"}),
    "kernel_ext.object_store": frozenset({"ObjectStore"}),
    "kernel_ext.snapshot_log": frozenset({"replay"}),  # `rlm state` with no kernel
    # the in-process executor (%%rlm): the agent runs in the user's kernel
    "kernel_ext.bridge": frozenset({"set_local_handler"}),
    "kernel_ext.snapshot": frozenset({"namespace_json"}),
    "kernel_ext.fileops": frozenset({"file_ops_json", "watch"}),
    "kernel_ext.columns": frozenset({"where_value_json", "how_written_json"}),
    "kernel_ext.texts": frozenset({"where_text_json"}),
    # which line of an agent cell read a file and said what (the verified rule)
    "kernel_ext.provenance": frozenset({"begin", "end", "note_output", "note_data"}),
    # %load_ext rlm leaves the notebook's globals alone; %%rlm lends the API for its run
    "kernel_ext.api": frozenset({"withdraw", "scoped"}),
    # a child's context=: the host checks the blob a kernel packed, and packs plain JSON data
    # a cell sent by hand (it never unpickles one)
    "kernel_ext.child_context": frozenset({"MAGIC", "PACKED", "to_blob", "too_big"}),
}

# -- names a kernel defines before its first cell --------------------------------------
# name -> module, bound (lazily: imported on first attribute use, so a kernel start pays
# nothing) when the module is installed where the kernel runs (kernel_ext.aliases). Hidden
# from listings and snapshots like the kernel API; a user's own binding of the name wins.
ALIASES: dict[str, str] = {"pd": "pandas", "np": "numpy", "plt": "matplotlib.pyplot"}
