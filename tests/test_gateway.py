"""`--kernel gateway:URL` end to end: a real `jupyter kernelgateway` on 127.0.0.1 (started
here, kernelspec loading kernel_ext), a scripted model, the real composition root.

Assertions are on what reached the model (ScriptedLLM.calls), what the kernel holds, and
what is on disk under $RLM_HOME (never a byte of the gateway's token).
"""

from __future__ import annotations

import json
import os
import re

import pytest

from bench.gateway_server import PLAIN_KERNEL_NAME, running_gateway
from rlm.app import build_agent
from rlm.config import Config
from rlm.errors import KernelError
from rlm.events import CellFinished, CellOutput, CellStarted, KernelRestarted, Notice, RunEnded
from rlm.kernel import Kernel
from rlm.llm import ScriptedLLM
from rlm.session.store import SessionStore
from tests.rlmcli import call

pytestmark = pytest.mark.timeout(240)

TOKEN = "gw-tok-" + "7c1e9a52d4b86f03"  # looks like a secret: *_TOKEN in the env


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with running_gateway(tmp_path_factory.mktemp("gw"), TOKEN) as gw:
        yield gw


@pytest.fixture
def token_env(monkeypatch):
    monkeypatch.setenv("RLM_GATEWAY_TOKEN", TOKEN)


def tool_texts(messages: list[dict]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "tool"]


@pytest.mark.slow  # three kernel starts through the gateway and a 30 s cell timeout: 60-140 s
def test_scripted_run_through_the_gateway(gateway, token_env, _isolated_home):
    """Cells, llm_query over the bridge, an interrupt, a timeout, a crash: all through the
    gateway, with the model told what came back after each restart."""
    main = ScriptedLLM([
        call("x = 41\nprint('hello from', 'the gateway')"),
        call("a = llm_query('say pong')\nprint('sub said', a)"),
        call("import time\nprint('sleeping', flush=True)\ntime.sleep(60)"),
        call("sum(range(10**11))"),
        call("import os\nos._exit(1)"),
        call("print(x + 1)"),
        call("final(str(x))"),
    ])
    sub = ScriptedLLM(["pong"])
    config = Config(home=_isolated_home, model="script:main", sub_model="script:sub",
                    # the interrupt is sent when "sleeping" arrives (it can match twice:
                    # Kernel.interrupt sends one SIGINT per cell; two lost the cell's
                    # reply, which CI saw as a `timeout`); the `sum(range(10**11))` cell
                    # waits the whole 30 s
                    kernel=gateway.spec, cell_timeout=30, interrupt_grace_s=0.5)
    session = SessionStore.create(_isolated_home, model="script:main", task="t")
    agent = build_agent(session, config, entry="run", llm=main, llm_factory=lambda spec: sub)
    events, printed = [], ""
    with agent:
        for ev in agent.run("exercise the remote kernel"):
            events.append(ev)
            # what a cell printed arrives in chunks cut anywhere (a chunk's tail that could
            # start the gateway token is held back): match on what has arrived so far
            printed = "" if isinstance(ev, CellStarted) else printed
            printed += ev.text if isinstance(ev, CellOutput) else ""
            if "sleeping" in printed:
                printed = ""
                agent.executor.interrupt()
        assert agent.executor.pid is None  # the process is the gateway's
        listing = {n["name"] for n in agent.executor.list_namespace()["names"]}
    assert "x" in listing
    end = events[-1]
    assert isinstance(end, RunEnded) and end.final == "41"
    statuses = [e.status for e in events if isinstance(e, CellFinished)]
    assert statuses == ["ok", "ok", "interrupted", "timeout", "died", "ok", "ok"]
    notices = [e.text for e in events if isinstance(e, Notice)]
    assert any("kernel on the gateway " + gateway.url in n for n in notices)

    texts = tool_texts(main.calls[-1])
    assert "hello from the gateway" in texts[0]
    assert "sub said pong" in texts[1]
    assert sub.calls and sub.calls[0][-1]["content"] == "say pong"
    assert "KeyboardInterrupt" in texts[2]
    assert "timed out" in texts[3] and "restarted" in texts[3]
    crash = texts[4]
    assert "<kernel_restarted>" in crash and "the gateway reported the kernel" in crash
    assert "x" in crash  # the model is told x came back
    assert texts[5].strip() == "42"
    restarts = [e for e in events if isinstance(e, KernelRestarted)]
    assert len(restarts) == 2 and all("x" in r.restored for r in restarts)

    # no byte under $RLM_HOME holds the token
    leaked = [p for p in _isolated_home.rglob("*")
              if p.is_file() and TOKEN.encode() in p.read_bytes()]
    assert leaked == []
    assert TOKEN not in (session.dir / "session.jsonl").read_text()


def test_wrong_token_is_one_line(gateway, monkeypatch, tmp_path):
    monkeypatch.setenv("RLM_GATEWAY_TOKEN", "not-the-token-123")
    k = Kernel(tmp_path / "s", Config(kernel=gateway.spec))
    with pytest.raises(KernelError) as e:
        k.start()
    msg = str(e.value)
    assert "\n" not in msg and "HTTP 401" in msg and "RLM_GATEWAY_TOKEN" in msg
    assert "not-the-token" not in msg


def test_unreachable_gateway_is_one_line(tmp_path, token_env):
    k = Kernel(tmp_path / "s", Config(kernel="gateway:http://127.0.0.1:9"))
    with pytest.raises(KernelError, match=r"cannot reach the gateway at http://127.0.0.1:9 "):
        k.start()


def test_kernel_ext_version_mismatch_is_refused(gateway, token_env, tmp_path, monkeypatch):
    """The kernel reports its kernel_ext version at start; another version is refused with
    the pip line to fix it (the kernel is deleted on the gateway, not leaked)."""
    import rlm.kernel.kernel as kmod

    monkeypatch.setattr(kmod, "__version__", "9.9.9")
    k = Kernel(tmp_path / "s", Config(kernel=gateway.spec))
    with pytest.raises(KernelError) as e:
        k.start()
    assert "kernel_ext 0.1.0 but this host is rlm 9.9.9" in str(e.value)
    assert "pip install 'rlm-kernel-ext==9.9.9'" in str(e.value)
    k.stop()
    from rlm.kernel.gateway import GatewayHttp

    assert GatewayHttp(gateway.url, TOKEN).call("GET", "/api/kernels") == []


def test_kernel_env_reaches_kernel_without_secrets(gateway, token_env, tmp_path, monkeypatch):
    monkeypatch.setenv("SOME_SERVICE_API_KEY", "sk-should-not-travel-123456")
    with Kernel(tmp_path / "s", Config(kernel=gateway.spec)) as k:
        res = k.execute("import os, json\nprint(json.dumps({k: v for k, v in os.environ.items()"
                        " if 'RLM' in k or 'KEY' in k or 'TOKEN' in k}))")
        env = json.loads(res.shaped)
    assert env["RLM_SESSION_DIR"] == str(tmp_path / "s")
    assert env["RLM_SNAPSHOT_DIR"] == str(tmp_path / "s" / "snapshot")
    assert not any("TOKEN" in k or "KEY" in k for k in env), env
    assert os.environ["RLM_GATEWAY_TOKEN"] == TOKEN


def test_kernelspec_without_the_extension_gets_it_at_start(gateway, token_env, tmp_path):
    """An image's plain Python kernelspec: the host's handshake loads kernel_ext."""
    spec = f"gateway:{gateway.url}#{PLAIN_KERNEL_NAME}"
    with Kernel(tmp_path / "s", Config(kernel=spec)) as k:
        res = k.execute("import sys\nprint(any('kernel_ext' in a for a in sys.argv))\n"
                        "print(callable(llm_query), callable(final))")
    assert res.shaped == "False\nTrue True\n"  # not in the kernel's argv, yet loaded


def test_a_kernel_left_by_a_dead_host_is_deleted_at_the_next_start(gateway, token_env, tmp_path):
    """The host died without stopping its gateway kernel: the session's record of it lets
    the next start delete it (on a cluster, a pod that would run forever)."""
    from rlm.kernel.gateway import GatewayHttp

    http = GatewayHttp(gateway.url, TOKEN)
    first = Kernel(tmp_path / "s", Config(kernel=gateway.spec))
    first.start()
    record = json.loads((tmp_path / "s" / "host" / "gateway-kernel.json").read_text())
    assert record == {"url": gateway.url, "kernel_id": first._rt.kernel_id}
    assert TOKEN not in json.dumps(record)
    # as if the host died: nothing stopped, the record stays
    with Kernel(tmp_path / "s", Config(kernel=gateway.spec)) as second:
        ids = [m["id"] for m in http.call("GET", "/api/kernels")]
        assert ids == [second._rt.kernel_id]
    assert http.call("GET", "/api/kernels") == []
    assert not (tmp_path / "s" / "host" / "gateway-kernel.json").exists()
    first._rt.listener.stop()


@pytest.mark.slow  # starts a gateway of its own (the slow tier: tests/conftest.py)
def test_a_gateway_that_dies_mid_cell_is_noticed_not_waited_out(tmp_path, token_env):
    """Websocket liveness: the gateway process is killed while a cell sleeps; the cell
    ends at once (the socket closed) and the restart says the gateway is unreachable."""
    import signal
    import time

    with running_gateway(tmp_path / "gw", TOKEN) as gw:
        k = Kernel(tmp_path / "s", Config(kernel=gw.spec))
        k.start()

        printed = []

        def on_output(out):
            printed.append(out.text or "")
            if "sleeping" in "".join(printed):  # chunks can cut a word
                printed.clear()
                os.killpg(gw.proc.pid, signal.SIGKILL)

        t0 = time.monotonic()
        res = k.execute("import time\nprint('sleeping', flush=True)\ntime.sleep(600)",
                        timeout=600, on_output=on_output)
        assert time.monotonic() - t0 < 120  # hang guard: far below the cell's 600 s
        # a result, not an exception: the cell died, the restart failed and says why
        assert res.status == "died" and res.restart is None
        assert re.search(r"cannot reach the gateway at http://127\.0\.0\.1", res.restart_error)
        assert "restarting it failed" in res.shaped
        with pytest.raises(KernelError, match=r"cannot reach the gateway"):
            k.execute("1 + 1")  # the next cell tries the restart again: still gone
        k.stop()


def test_bridge_reply_mid_cell_and_images_to_artifacts(gateway, token_env, tmp_path):
    """A kernel -> host request answered while its cell runs (reply on the control channel
    of the websocket), and an image written to artifacts/, not into the text."""
    import base64

    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
    seen = []
    with Kernel(tmp_path / "s", Config(kernel=gateway.spec),
                bridge_handler=lambda m, p: seen.append((m, p)) or {"echo": p["n"] * 2}) as k:
        res = k.execute(
            "import kernel_ext.bridge as b\nfrom IPython.display import display\n"
            f"display({{'image/png': {base64.b64encode(png).decode()!r}}}, raw=True)\n"
            "print([b.request('ping', {'n': i})['echo'] for i in range(3)])")
    assert res.status == "ok", res.shaped
    assert seen == [("ping", {"n": 0}), ("ping", {"n": 1}), ("ping", {"n": 2})]
    assert "[0, 2, 4]" in res.shaped
    (ref,) = [o.refs["image/png"] for o in res.outputs if o.refs and "image/png" in o.refs]
    assert (tmp_path / "s" / ref).read_bytes() == png
    assert "[image: " in res.shaped and "iVBOR" not in res.shaped


@pytest.mark.slow  # three kernel starts through the gateway
def test_children_inherit_the_gateway_kernel_kind(gateway, token_env, _isolated_home):
    """rlm_spawn's children start their kernels where the parent's runs: through the
    gateway (the kernels are the gateway's children, not the host's)."""
    main = ScriptedLLM([
        call("hs = [rlm_spawn('where do you run?', name=f'c{i}') for i in range(2)]\n"
             "print(list(rlm_gather(hs)))"),
        call("final('ok')"),
    ])
    config = Config(home=_isolated_home, model="script:main", sub_model="script:sub",
                    kernel=gateway.spec, max_children=2)
    session = SessionStore.create(_isolated_home, model="script:main", task="t")
    agent = build_agent(session, config, entry="run", llm=main, llm_factory=lambda spec:
                        ScriptedLLM([call("import os\nfinal(str(os.getppid()))")]))
    with agent:
        events = list(agent.run("fan out on the cluster"))
    assert events[-1].final == "ok"
    out = tool_texts(main.calls[1])[0]
    parents = re.findall(r"'(\d+)'", out)
    assert len(parents) == 2 and str(os.getpid()) not in parents, out
    assert all(d.is_dir() for d in (session.dir / "children").iterdir())


@pytest.mark.slow  # one kernel start through the gateway
def test_a_lost_childs_gateway_kernel_is_deleted_when_its_session_resumes(
        gateway, token_env, _isolated_home):
    """A host that died while a child ran left the child's kernel on the gateway (on a
    cluster: a pod). When the parent session resumes, that kernel is deleted (none is
    orphaned) and the lost child is resumed on a new one, deleted when it ends."""
    from rlm.agent.children import CHILD_ENTRY
    from rlm.kernel.gateway import GatewayHttp
    from rlm.session.entries import CustomEntry

    http = GatewayHttp(gateway.url, TOKEN)
    session = SessionStore.create(_isolated_home, model="script:main", task="t")
    child_dir = session.dir / "children" / "c0ffee"
    (child_dir / "host").mkdir(parents=True)
    kernel_id = http.start_kernel(PLAIN_KERNEL_NAME, {})["id"]
    (child_dir / "host" / "gateway-kernel.json").write_text(
        json.dumps({"url": gateway.url, "kernel_id": kernel_id}))
    session.append(CustomEntry(custom_type=CHILD_ENTRY, display=False, content=None, data={
        "id": "c0ffee", "name": "scan", "task": "scan the logs", "state": "running"}))
    before = {k["id"] for k in http.call("GET", "/api/kernels")}
    assert kernel_id in before
    main = ScriptedLLM([call("from kernel_ext.children import ChildHandle\n"
                             "print(rlm_spawn('again', name='scan').name)\n"
                             "print(ChildHandle('c0ffee', 'scan').result(120))"),
                        call("final('ok')")])
    config = Config(home=_isolated_home, model="script:main", sub_model="script:sub",
                    kernel=gateway.spec)
    agent = build_agent(SessionStore.open(session.path), config, entry="run", llm=main,
                        llm_factory=lambda spec: ScriptedLLM([call("final('done')")]))
    with agent:
        events = list(agent.run("go on"))
    assert events[-1].final == "ok"
    assert "scan-2" in tool_texts(main.calls[1])[0]  # the lost child's name stays taken
    assert kernel_id not in [k["id"] for k in http.call("GET", "/api/kernels")]
    assert not (child_dir / "host" / "gateway-kernel.json").exists()
    assert "done" in tool_texts(main.calls[1])[0]  # the lost child went on
    lost = [e for e in agent.session.branch() if isinstance(e, CustomEntry)
            and e.custom_type == CHILD_ENTRY and e.data.get("id") == "c0ffee"]
    assert lost[-1].data["state"] == "done"
    # its new kernel (and the other child's) were deleted too
    assert {k["id"] for k in http.call("GET", "/api/kernels")} <= before - {kernel_id}
