"""`rlm state` asks the running kernel when there is one, else reads the snapshot."""

from rlm.config import Config
from rlm.kernel import Kernel
from rlm.kernel.state import session_state


def test_live_kernel_then_snapshot(tmp_path):
    sdir = tmp_path / "s"
    sdir.mkdir()
    with Kernel(sdir, Config(home=tmp_path)) as k:
        k.execute("import socket\nrows = list(range(1000))\nsock = socket.socket()")
        live = session_state(sdir)
        assert live["source"] == "live"
        names = {n["name"]: n for n in live["names"]}
        assert names["rows"]["type"] == "list" and names["rows"]["restorable"] is True
        assert names["sock"]["restorable"] is False
    after = session_state(sdir)  # the kernel is gone: the snapshot answers, and says so
    assert after["source"] == "snapshot" and "no kernel is running" in after["detail"]
    assert {n["name"] for n in after["names"]} >= {"rows", "sock"}
