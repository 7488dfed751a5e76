"""One host <-> kernel contract (kernel_ext/contract.py): read with `ast`, like
tests/test_import_graph.py.

The host (rlm/) may reach kernel_ext only through what the contract declares: the calls it
evaluates in the kernel are `contract.Call`s (never an `__import__('kernel_ext...')` string),
what it imports from kernel_ext is in `HOST_IMPORTS`, and the environment it gives the
kernel is named by the contract's constants. kernel_ext reads only declared environment
variables, by those names. Each check is also run on a snippet that breaks it, so a check
that finds nothing is not mistaken for a pass.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import sys
from pathlib import Path

import pytest

from kernel_ext import contract
from rlm.config import Config

ROOT = Path(__file__).resolve().parents[1]
# RLM_* names the host's kernel package reads for itself: never given to the kernel
HOST_ONLY_ENV = frozenset({"RLM_SANDBOX", "RLM_GATEWAY_TOKEN"})
_RLM_NAME = re.compile(r"RLM_[A-Z0-9_]+")
_MODULE_NAME = re.compile(r"kernel_ext(\.\w+)*")
_ENV_METHODS = ("get", "setdefault", "pop", "__contains__", "__getitem__")


def _files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _strings(tree: ast.AST) -> list[tuple[int, str]]:
    """Every str constant that is not a docstring (f-string pieces included)."""
    skip = _docstrings(tree)
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip]


def host_violations(source: str, where: str, kernel_package: bool = False) -> list[str]:
    """What host code `source` names of kernel_ext that the contract does not declare."""
    tree = ast.parse(source)
    bad = []
    for line, text in _strings(tree):
        if "__import__('kernel_ext" in text or '__import__("kernel_ext' in text:
            bad.append(f"{where}:{line}: an expression string {text[:60]!r}: declare the "
                       "function as a kernel_ext.contract.Call and use .expression()")
        elif _MODULE_NAME.fullmatch(text):
            bad.append(f"{where}:{line}: the kernel_ext module {text!r} spelled as a string: "
                       "use contract.EXTENSION / contract.LAUNCHER or declare it")
        elif text in contract.ENV and text.startswith("RLM_"):
            bad.append(f"{where}:{line}: {text!r} spelled out: use its contract name")
        elif kernel_package and _RLM_NAME.fullmatch(text) and text not in HOST_ONLY_ENV:
            bad.append(f"{where}:{line}: {text!r} is not declared in kernel_ext.contract.ENV")
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg and _RLM_NAME.fullmatch(node.arg) and (
                node.arg in contract.ENV or (kernel_package and node.arg not in HOST_ONLY_ENV)):
            bad.append(f"{where}:{node.value.lineno}: env name {node.arg} as a keyword: "
                       "use its contract name as a key")
    bad += _import_violations(tree, where)
    return bad


def _declared(module: str, name: str) -> bool:
    names = contract.HOST_IMPORTS.get(module)
    return names is not None and (names == contract.ALL or name in names)


def _import_violations(tree: ast.AST, where: str) -> list[str]:
    bad = []
    bound: dict[str, str] = {}  # local name -> kernel_ext module it names
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "kernel_ext":
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                if sub in contract.HOST_IMPORTS:
                    bound[a.asname or a.name] = sub
                elif (ROOT / Path(*sub.split("."))).with_suffix(".py").exists():
                    bad.append(f"{where}:{node.lineno}: imports {sub}, not in contract.HOST_IMPORTS")
                elif not _declared(str(node.module), a.name):
                    bad.append(f"{where}:{node.lineno}: imports {node.module}.{a.name}, not in "
                               "contract.HOST_IMPORTS")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "kernel_ext":
                    bad.append(f"{where}:{node.lineno}: `import {a.name}`: import the declared "
                               "names with `from kernel_ext... import ...`")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in bound and not _declared(bound[node.value.id], node.attr):
            bad.append(f"{where}:{node.lineno}: uses {bound[node.value.id]}.{node.attr}, not "
                       "in contract.HOST_IMPORTS")
    return bad


def _is_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ" and \
        isinstance(node.value, ast.Name) and node.value.id == "os"


def kernel_env_reads(source: str, where: str) -> tuple[set[str], list[str]]:
    """The env names kernel code reads, and the reads that do not name a declared one
    through the contract (`os.environ.get(contract.NAME)`)."""
    tree = ast.parse(source)
    from_contract = {a.asname or a.name: a.name for n in ast.walk(tree)
                     if isinstance(n, ast.ImportFrom) and n.module == "kernel_ext.contract"
                     for a in n.names}
    keys: list[tuple[int, ast.AST]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is_environ(node.value):
            keys.append((node.lineno, node.slice))
        elif isinstance(node, ast.Call) and node.args:
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr in _ENV_METHODS and _is_environ(f.value):
                keys.append((node.lineno, node.args[0]))
            elif isinstance(f, ast.Attribute) and f.attr == "getenv":
                keys.append((node.lineno, node.args[0]))
        elif isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators):
            keys.append((node.lineno, node.left))
    names, bad = set(), []
    for line, key in keys:
        name = None
        if isinstance(key, ast.Attribute) and isinstance(key.value, ast.Name) \
                and key.value.id == "contract":
            name = getattr(contract, key.attr, None)
        elif isinstance(key, ast.Name) and key.id in from_contract:
            name = getattr(contract, from_contract[key.id], None)
        if not isinstance(name, str) or name not in contract.ENV:
            bad.append(f"{where}:{line}: reads the environment by {ast.unparse(key)}: declare "
                       "the name in kernel_ext.contract.ENV and read it as contract.NAME")
        else:
            names.add(name)
    return names, bad


def test_the_host_names_nothing_of_kernel_ext_the_contract_does_not_declare():
    bad = []
    for path in _files("rlm"):
        rel = path.relative_to(ROOT)
        bad += host_violations(path.read_text(), str(rel),
                               kernel_package=rel.parts[:2] == ("rlm", "kernel"))
    assert bad == [], "\n".join(bad)


def test_kernel_ext_reads_only_declared_env_by_its_contract_name():
    bad, read = [], set()
    for path in _files("kernel_ext"):
        names, wrong = kernel_env_reads(path.read_text(), str(path.relative_to(ROOT)))
        read |= names
        bad += wrong
    assert bad == [], "\n".join(bad)
    # what the host sets for kernel_ext is read there (PYTHONPATH and MPLBACKEND are for
    # the interpreter and matplotlib; KERNEL_MARK is the host's own mark, read by its reaper)
    assert contract.ENV - read == {contract.PYTHONPATH, contract.MPLBACKEND, contract.KERNEL_MARK,
                                   contract.MATPLOTLIBRC}


def test_the_checks_catch_what_they_are_for():
    host = (
        "from kernel_ext.snapshot import Snapshotter\n"
        "from kernel_ext import describe\n"
        "X = \"__import__('kernel_ext.snapshot', fromlist=['x']).namespace_json()\"\n"
        "describe.describe_value(1)\n"
        "env.update(RLM_SESSION_DIR='/s')\n"
        "env['RLM_SNAPSHOT_URL'] = 'u'\n"
        "argv = ['-m', 'kernel_ext.launch']\n"
        "env['RLM_NEW_KNOB'] = '1'\n"
    )
    found = host_violations(host, "host.py", kernel_package=True)
    for needle in ("Snapshotter", "an expression string", "describe_value", "keyword",
                   "'RLM_SNAPSHOT_URL' spelled out", "'kernel_ext.launch'",
                   "'RLM_NEW_KNOB' is not declared"):
        assert any(needle in f for f in found), (needle, found)
    assert len(found) == 7, found
    kernel = (
        "import os\nfrom kernel_ext import contract\nfrom kernel_ext.contract import SESSION_DIR\n"
        "a = os.environ.get(contract.SNAPSHOT_DIR)\nb = os.environ.get(SESSION_DIR)\n"
        "c = os.environ.get('RLM_SNAPSHOT_DIR')\nd = os.environ['RLM_OTHER']\n"
        "e = os.getenv(name)\nf = 'RLM_X' in os.environ\n"
    )
    names, wrong = kernel_env_reads(kernel, "k.py")
    assert names == {contract.SNAPSHOT_DIR, contract.SESSION_DIR}
    assert [w.split(":")[1] for w in wrong] == ["6", "7", "8", "9"], wrong


def test_every_declared_call_and_import_exists_in_kernel_ext():
    for call in contract.CALLS:
        fn = getattr(importlib.import_module(call.module), call.function, None)
        assert callable(fn), f"{call} is declared but kernel_ext has no such function"
    for module, names in contract.HOST_IMPORTS.items():
        mod = importlib.import_module(module)
        for name in names - contract.ALL:
            assert hasattr(mod, name), f"{module}.{name} is declared but does not exist"
    assert importlib.util.find_spec(contract.LAUNCHER) is not None
    assert set(contract.GATEWAY_ENV) <= contract.ENV
    from rlm.secrets import SECRET_ENV_SUFFIXES

    assert not [n for n in contract.GATEWAY_ENV if n.endswith(SECRET_ENV_SUFFIXES)]


def test_a_call_expression_is_code_with_literal_arguments_only():
    assert contract.DESCRIBE.expression(["a", "b"]) == \
        "__import__('kernel_ext.describe', fromlist=['_']).describe_json(['a', 'b'])"
    assert contract.DESCRIBE.expression(None).endswith("describe_json(None)")
    with pytest.raises(TypeError, match="plain literal"):
        contract.DESCRIBE.expression([object()])


def test_the_env_the_host_gives_the_kernel_is_the_declared_env(tmp_path, monkeypatch):
    """Whatever kernel_env adds to the host's own environment is declared, with every
    option that adds something turned on."""
    from rlm.kernel.gateway import remote_env
    from rlm.kernel.runtime import kernel_env

    for key in list(os.environ):
        if key.startswith("RLM_") or key in contract.ENV:
            monkeypatch.delenv(key)
    config = Config(home=tmp_path / "home", snapshot_url="memory://bucket/prefix",
                    kernel_python=sys.executable + "-other")
    added = set(kernel_env(tmp_path / "s", config)) - set(os.environ)
    assert added <= contract.ENV, added - contract.ENV
    assert {contract.SESSION_DIR, contract.SNAPSHOT_DIR, contract.SNAPSHOT_URL} <= added
    gateway = Config(home=tmp_path / "home", kernel="gateway:http://h:1")
    sent = {k.removeprefix(contract.GATEWAY_PREFIX) for k in remote_env(tmp_path / "s", gateway)}
    assert sent <= set(contract.GATEWAY_ENV)


# -- the bridge: every declared method sent by kernel_ext and answered by the host -------
def kernel_bridge_calls(source: str, where: str) -> tuple[set[str], list[str]]:
    """The declared methods kernel code sends (`bridge.request(contract.NAME, ...)`), and
    the requests that name a method any other way (a string, an undeclared constant)."""
    sent, bad = set(), []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "request" and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "bridge"):
            continue
        first = node.args[0] if node.args else None
        method = None
        if isinstance(first, ast.Attribute) and isinstance(first.value, ast.Name) \
                and first.value.id == "contract":
            method = getattr(contract, first.attr, None)
        if not isinstance(method, contract.Method) or method not in contract.METHODS:
            bad.append(f"{where}:{node.lineno}: bridge.request("
                       f"{ast.unparse(first) if first else ''}): send a method declared in "
                       "kernel_ext.contract.METHODS, as contract.NAME")
        else:
            sent.add(method.name)
    return sent, bad


def test_every_declared_bridge_method_is_sent_by_kernel_ext_and_nothing_else_is():
    sent, bad = set(), []
    for path in _files("kernel_ext"):
        names, wrong = kernel_bridge_calls(path.read_text(), str(path.relative_to(ROOT)))
        sent |= names
        bad += wrong
    assert bad == [], "\n".join(bad)
    by_kernel = {m.name for m in contract.METHODS if m.caller == "kernel_ext"}
    assert by_kernel - sent == set(), "declared, but kernel_ext never sends them"
    assert sent == by_kernel, "sent by kernel_ext, but declared as a test's diagnostic"
    assert {m.name for m in contract.METHODS if m.caller != "kernel_ext"} == {"ping"}
    from kernel_ext import wire

    assert wire.METHODS == set(contract.BY_NAME) and len(contract.BY_NAME) == len(contract.METHODS)
    # the snippet check: a string and an undeclared constant are both caught
    _, wrong = kernel_bridge_calls(
        "bridge.request(contract.FINAL, {})\nbridge.request('final', {})\n"
        "bridge.request(contract.FILE_OPS, {})\n", "k.py")
    assert [w.split(":")[1] for w in wrong] == ["2", "3"], wrong


def test_bridge_features_use_the_feature_tables_spelling_and_the_scheduler_agrees():
    from rlm.app.features import FEATURES
    from rlm.longrun.schedule import KERNEL_METHODS

    own = {m.feature for m in contract.METHODS} - set(FEATURES)
    assert own == {"core", "queries", "children", "history", "memory"}  # never gapped
    assert {f for f in FEATURES if contract.methods_of(f)} == {"compaction", "goals",
                                                                "schedules"}
    # the scheduler's table is derived from the contract (one copy): what it requires is
    # declared there, and a call without it is refused naming it
    assert all(set(m.required) <= set(m.params) for m in contract.METHODS)
    assert set(KERNEL_METHODS) == {m.name for m in contract.methods_of("schedules")}
    assert KERNEL_METHODS["cron.add"] == ({"when", "prompt"}, {"label", "delivery"})


def test_kernel_ext_refuses_an_undeclared_method_or_parameter_before_sending():
    from kernel_ext import bridge, wire

    sent = []
    bridge.set_local_handler(lambda m, p: sent.append((m, p)) or "ok")
    try:
        assert bridge.request(contract.GOAL_BLOCK, {"reason": "r"}) == "ok"
        assert bridge.request("ping", {"n": 1}) == "ok"  # a test's cell names it
        with pytest.raises(ValueError, match="not a bridge method"):
            bridge.request("file_ops", {})
        with pytest.raises(ValueError, match="goal.block takes reason, not why"):
            bridge.request(contract.GOAL_BLOCK, {"why": "r"})
    finally:
        bridge.set_local_handler(None)
    assert sent == [("goal.block", {"reason": "r"}), ("ping", {"n": 1})]
    request = wire.make_request("r1", "goal.block", {"reason": "r", "token_budget": 9})
    with pytest.raises(wire.WireError, match="no parameter 'token_budget'"):
        wire.parse_request(request)


def _built(home: Path, entry: str, **config: object):
    from rlm.app import build_agent
    from rlm.llm.inproc_models import ScriptedLLM
    from rlm.session.store import SessionStore

    session = SessionStore.create(home, model="script:t", task="t")
    return build_agent(session, Config(home=home, model="script:t", **config),  # type: ignore[arg-type]
                       entry=entry, llm=ScriptedLLM([]))


def test_every_entry_point_answers_every_declared_method(_isolated_home):
    """Built through the root, each entry point's agent has a handler for each declared
    method; a feature the entry point lacks answers with its gap's message, as do memory
    turned off and a child's memory writes."""
    from rlm.app.features import ENTRY_POINTS, GAPS
    from rlm.errors import RlmError

    for entry in ENTRY_POINTS:
        agent = _built(_isolated_home, entry)
        assert set(agent.handlers) == set(contract.BY_NAME), entry
    child = _built(_isolated_home, "child")
    with pytest.raises(RlmError, match="goals belong to the top-level session"):
        child.handle_bridge("goal.get", {})
    with pytest.raises(RlmError, match="cannot create them"):
        child.handle_bridge("cron.add", {"when": "in 1h", "prompt": "p"})
    with pytest.raises(RlmError, match="read-only in an rlm_query child"):
        child.handle_bridge("memory.log", {"action": "a"})
    compact = _built(_isolated_home, "compact")
    with pytest.raises(RlmError, match=GAPS["compact"]["goals"].message):
        compact.handle_bridge("goal.complete", {})
    off = _built(_isolated_home, "run", memory=False)
    with pytest.raises(RlmError, match="project memory is off"):
        off.handle_bridge("memory.show", {})


def test_an_agent_with_a_declared_method_unanswered_refuses_to_start(_isolated_home,
                                                                      monkeypatch):
    from rlm.app import build
    from rlm.errors import RlmError

    monkeypatch.setattr(build, "install_history", lambda handlers, session: None)
    with pytest.raises(RlmError, match=r"cannot start 'run': no handler for the bridge "
                                       r"method\(s\) history\.cell, history\.search, "
                                       r"history\.messages"):
        _built(_isolated_home, "run")
