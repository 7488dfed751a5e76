"""Remote kernels through a Jupyter Kernel Gateway vs the local kernel (issue 17).

(a) trivial-cell round trip: `Kernel.execute("1+1")` on a gateway kernel and on a local
    kernel, same run, interleaved in blocks (load drifts on a shared machine); medians and
    the ratio.
    Baseline in the same run: a bare tornado websocket client sending the same
    execute_request to a kernel on the same gateway and waiting for reply + idle (what the
    gateway itself costs, without rlm).
(b) crash to ready through the gateway: a cell calls os._exit(1); timed from the execute
    call to its return (death noticed through the gateway's IOPub status, old kernel
    deleted, a new one started over REST, websocket opened, snapshot restored), next to the
    local crash to ready; and the detection alone (os._exit to `poll()` reporting it).

The gateway runs on 127.0.0.1 (bench/gateway_server.py) with KernelRestarter.time_to_dead
= 0.5 s (`--time-to-dead` to change; jupyter_client's default is 3 s).

    python bench/bench_gateway.py [--n 200] [--crashes 3] [--time-to-dead 0.5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.gateway_server import running_gateway  # noqa: E402
from rlm.config import Config  # noqa: E402
from rlm.kernel import Kernel  # noqa: E402
from rlm.kernel.gateway import GatewayHttp  # noqa: E402

TOKEN = "bench-gateway-token-5e1f"


def round_trips(k: Kernel, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        res = k.execute("1+1")
        out.append(time.perf_counter() - t0)
        assert res.shaped == "2\n", res
    return out


def raw_websocket_round_trips(url: str, kernel_name: str, n: int) -> list[float]:
    """The gateway alone: one websocket, execute_request, wait for reply + idle."""
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    http = GatewayHttp(url, TOKEN)
    kid = http.start_kernel(kernel_name, {})["id"]

    async def run() -> list[float]:
        conn = await websocket_connect(HTTPRequest(
            "ws" + url[4:] + f"/api/kernels/{kid}/channels", headers=http.headers()))
        times = []
        for _ in range(n + 10):
            mid = uuid.uuid4().hex
            msg = {"header": {"msg_id": mid, "msg_type": "execute_request", "username": "b",
                              "session": "b", "date": "2026-01-01T00:00:00Z", "version": "5.3"},
                   "parent_header": {}, "metadata": {}, "channel": "shell",
                   "content": {"code": "1+1", "silent": False, "store_history": True,
                               "user_expressions": {}, "allow_stdin": False}}
            t0 = time.perf_counter()
            await conn.write_message(json.dumps(msg))
            reply = idle = False
            while not (reply and idle):
                m = json.loads(await conn.read_message())
                if m.get("parent_header", {}).get("msg_id") != mid:
                    continue
                reply = reply or m["channel"] == "shell"
                idle = idle or (m["msg_type"] == "status"
                                and m["content"]["execution_state"] == "idle")
            times.append(time.perf_counter() - t0)
        conn.close()
        return times[10:]

    try:
        return asyncio.run(run())
    finally:
        http.delete(kid)


def crash_to_ready(k: Kernel) -> float:
    k.execute("x = list(range(1000))\ny = {'a': 1}")
    t0 = time.perf_counter()
    res = k.execute("import os; os._exit(1)", timeout=120)
    dt = time.perf_counter() - t0
    assert res.status == "died" and res.restart and "x" in res.restart.restored, res
    assert k.execute("print(len(x), y)").shaped.strip() == "1000 {'a': 1}"
    return dt


def detection(k: Kernel) -> float:
    """os._exit sent straight to the runtime; time until its poll() reports the death (the
    gateway's `restarting` status reached the host), then a restart for the next round."""
    rt = k._runtime()
    msg = rt.session.msg("execute_request", {"code": "import os; os._exit(1)", "silent": True,
                                             "store_history": False, "user_expressions": {},
                                             "allow_stdin": False})
    t0 = time.perf_counter()
    rt.send_shell(msg)
    while rt.poll() is None:
        if time.perf_counter() - t0 > 60:
            raise AssertionError("death not noticed in 60 s")
        time.sleep(0.002)
    dt = time.perf_counter() - t0
    k.restart("bench")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200, help="round trips per kind")
    ap.add_argument("--crashes", type=int, default=3)
    ap.add_argument("--time-to-dead", type=float, default=0.5)
    a = ap.parse_args()
    os.environ["RLM_GATEWAY_TOKEN"] = TOKEN
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with running_gateway(work / "gw", TOKEN, time_to_dead=a.time_to_dead) as gw:
            remote = Kernel(work / "remote", Config(home=work, kernel=gw.spec))
            local = Kernel(work / "local", Config(home=work))
            t0 = time.perf_counter()
            remote.start()
            remote_start = time.perf_counter() - t0
            t0 = time.perf_counter()
            local.start()
            local_start = time.perf_counter() - t0
            try:
                round_trips(remote, 10)
                round_trips(local, 10)  # warm both
                rt_remote: list[float] = []
                rt_local: list[float] = []
                block = 20
                for _ in range(max(1, a.n // block)):
                    rt_remote += round_trips(remote, block)
                    rt_local += round_trips(local, block)
                rt_raw = raw_websocket_round_trips(gw.url, "rlm-remote", a.n)
                crash_remote = [crash_to_ready(remote) for _ in range(a.crashes)]
                noticed = [detection(remote) for _ in range(a.crashes)]
                crash_local = [crash_to_ready(local) for _ in range(a.crashes)]
            finally:
                remote.stop()
                local.stop()
    med = statistics.median
    print(f"load (1-min) at end: {os.getloadavg()[0]:.1f}")
    print(f"kernel start to ready: gateway {remote_start:.2f} s, local {local_start:.2f} s")
    print(f"round trip 1+1 (median of {len(rt_remote)}): gateway {med(rt_remote) * 1000:.1f} ms, "
          f"local {med(rt_local) * 1000:.1f} ms, ratio {med(rt_remote) / med(rt_local):.2f}x "
          f"(p90 gateway {statistics.quantiles(rt_remote, n=10)[-1] * 1000:.1f} ms, "
          f"local {statistics.quantiles(rt_local, n=10)[-1] * 1000:.1f} ms)")
    print(f"bare websocket client through the same gateway (median of {len(rt_raw)}): "
          f"{med(rt_raw) * 1000:.1f} ms; rlm over it: {med(rt_remote) / med(rt_raw):.2f}x")
    print(f"crash to ready (os._exit, median of {a.crashes}): gateway {med(crash_remote):.2f} s "
          f"{[round(v, 2) for v in crash_remote]}, local {med(crash_local):.2f} s "
          f"{[round(v, 2) for v in crash_local]}")
    print(f"death noticed through the gateway (os._exit to poll() != None, median of "
          f"{a.crashes}): {med(noticed):.2f} s {[round(v, 2) for v in noticed]} "
          f"(gateway KernelRestarter.time_to_dead {a.time_to_dead} s)")


if __name__ == "__main__":
    main()
