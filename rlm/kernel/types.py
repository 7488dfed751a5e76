"""What executing a cell produces, as the agent loop, the session log and export see it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Output:
    """One output of a cell, in nbformat's shape.

    kind: "stream" (name=stdout|stderr, text), "execute_result" / "display_data"
    (data: mime bundle; payloads over the inline limit are written to artifacts and
    replaced by {"mime": ..., "artifact": "artifacts/<file>"} references in `refs`),
    or "error" (ename, evalue, traceback).
    """

    kind: str
    name: str | None = None
    text: str | None = None
    data: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    refs: dict[str, str] | None = None  # mime -> artifact path relative to the session dir
    ename: str | None = None
    evalue: str | None = None
    traceback: list[str] | None = None


@dataclass
class RestoreReport:
    """What came back after a kernel restart: the model is told exactly this."""

    restored: list[str] = field(default_factory=list)
    failed: list[dict[str, str]] = field(default_factory=list)  # {name, reason}
    skipped: list[dict[str, str]] = field(default_factory=list)  # {name, reason}
    snapshot_found: bool = False
    summaries: dict[str, str] = field(default_factory=dict)  # name -> kernel_ext.describe.summary
    rebuilt: dict[str, list[int]] = field(default_factory=dict)  # name -> replayed cells (lineage)
    replayed: list[dict[str, Any]] = field(default_factory=list)  # [{cell, code}] re-run, in order
    not_replayed: dict[str, str] = field(default_factory=dict)  # name -> why replay did not rebuild it
    replay_off: bool = False  # --no-replay: nothing was re-run

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RestoreReport:
        keys = ("restored", "failed", "skipped", "snapshot_found", "summaries", "rebuilt",
                "replayed", "not_replayed", "replay_off")
        return cls(**{k: d[k] for k in keys if k in d})


@dataclass
class CellResult:
    """The structured result of one execute.

    status: "ok" | "error" | "timeout" | "died" | "interrupted".
    `died_cause` says how the kernel died ("exit code 1", "signal SIGKILL", ...);
    `restart` is set when the host restarted the kernel because of this cell;
    `restart_error` when that restart failed (the next execute tries again).
    `shaped` is the text the model sees; `full_output_path` holds every byte (relative to
    the session dir) when shaping elided anything.
    """

    status: str
    outputs: list[Output] = field(default_factory=list)
    execution_count: int | None = None
    duration_s: float = 0.0
    died_cause: str | None = None
    restart: RestoreReport | None = None
    restart_error: str | None = None  # the restart after "died"/"timeout" failed (why)
    shaped: str = ""
    full_output_path: str | None = None
    chars_total: int = 0
    elided_chars: int = 0
    files_read: list[str] | None = None  # what the audit hook saw the cell read (ok cells)
    # which lines read a file and what each line said (kernel_ext.provenance; ok and failed cells):
    # {"read": [line], "said": {"line": [token]}, "partial": [line],
    #  "wrote": {"line": [path]}}; None: not known
    provenance: dict[str, Any] | None = None
    # the user names the cell bound: new, rebound to another object or deleted, as the
    # kernel saw its namespace change (kernel_ext.provenance; ok and failed cells: what ran
    # before the error); None: not known (no kernel_ext, a malformed record, a namespace
    # too large to compare). Every host reader of "the names a cell binds" reads this.
    binds: list[str] | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        """`asdict(self)` without its deep walk (after every cell: 25 -> ~5 us); an
        output's dicts and lists are copied one level deep, which is all they hold but
        for a mime bundle's JSON value (shared: nothing changes an output once made)."""
        d = dict(self.__dict__)
        d["outputs"] = [{k: v.copy() if isinstance(v, (dict, list)) else v
                         for k, v in o.__dict__.items()} for o in self.outputs]
        if self.restart is not None:
            d["restart"] = self.restart.to_dict()
        if self.files_read is not None:
            d["files_read"] = list(self.files_read)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CellResult:
        d = dict(d)
        outs = [Output(**o) for o in d.pop("outputs", [])]
        restart = d.pop("restart", None)
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        return cls(
            outputs=outs,
            restart=RestoreReport.from_dict(restart) if restart else None,
            **known,
        )
