"""Nothing reaches the network at import, whichever path imports litellm."""

import os
import subprocess
import sys

PROBE = """
import socket
tried = []
def refuse(self, addr, *a, **k):
    tried.append(addr)
    raise OSError("network disabled in this test")
socket.socket.connect = refuse
socket.create_connection = lambda addr, *a, **k: refuse(None, addr)
import rlm.llm.seam
rlm.llm.seam._litellm()  # the one import of litellm (the path that used to fetch a cost map)
print("connects:", tried)
"""


def test_importing_litellm_paths_tries_no_network():
    env = {k: v for k, v in os.environ.items() if not k.startswith("LITELLM")}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip().endswith("connects: []"), out.stdout + out.stderr
    assert "cost map" not in out.stderr
