"""Snapshot + restore of a 100 MB namespace to S3-compatible storage vs the local disk.

A moto standalone S3 server is started on 127.0.0.1 (a real HTTP server in another
process: every byte goes through s3fs, aiobotocore and a socket, as it would to S3, minus
the network's latency and bandwidth). The same in-process InteractiveShell snapshots the
same namespace to a local dir and to s3://bucket/..., in the same run, alternating:

  * snapshot: a full snapshot of every name (a 100 MiB float64 array + 200 small names);
  * restore: a fresh Snapshotter on the same location restores every name, then every
    byte of the array is read (a local restore maps data files and reads them on first
    touch; an object store's restore downloads them: the sum makes both pay the read).

Also a floor for the store itself: one pickle (protocol 5) of the same objects put with
s3fs `pipe_file` and read back with `cat_file` (what any client pays this server).

Prints medians and the ratio S3/local. Run:
    .venv/bin/python bench/bench_snapshot_s3.py [--repeat N] [--mib 100]
Needs s3fs and moto[server] (pip install -e '.[dev]').
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import pickle
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@contextlib.contextmanager
def moto_server(log_path: str) -> Iterator[str]:
    """A moto S3 server on a free 127.0.0.1 port; yields its endpoint URL once it accepts
    connections (the socket is polled; the process ending first is an error)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    with open(log_path, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                                 "-p", str(port)], stdout=out, stderr=subprocess.STDOUT)
    try:
        while True:
            if proc.poll() is not None:
                with open(log_path, errors="replace") as f:
                    raise RuntimeError(f"moto server exited: {f.read()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                threading.Event().wait(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _round(ip, snapshot, location: str) -> tuple[float, float]:
    names = [k for k in ip.user_ns if k == "arr" or k.startswith("v")]
    st = snapshot.Snapshotter(ip, location, 1 << 40, 1 << 40)
    t0 = time.perf_counter()
    st.snapshot(full=True)
    t_snap = time.perf_counter() - t0
    saved = {k: ip.user_ns.pop(k) for k in names}
    gc.collect()
    fresh = snapshot.Snapshotter(ip, location, 1 << 40, 1 << 40)
    t0 = time.perf_counter()
    rep = fresh.restore()
    float(ip.user_ns["arr"].sum())  # every byte read
    t_rest = time.perf_counter() - t0
    assert sorted(rep["restored"]) == sorted(names), rep
    assert (ip.user_ns["arr"] == saved["arr"]).all()
    for k in names:
        ip.user_ns[k] = saved[k]
    return t_snap, t_rest


def _raw_s3(ip, fs, key: str) -> float:
    objs = {k: v for k, v in ip.user_ns.items() if k == "arr" or k.startswith("v")}
    t0 = time.perf_counter()
    fs.pipe_file(key, pickle.dumps(objs, protocol=5))
    back = pickle.loads(fs.cat_file(key))
    dt = time.perf_counter() - t0
    del back
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--mib", type=int, default=100, help="size of the array (MiB)")
    ap.add_argument("--dir", default=None, help="where the local side writes (default: a temp dir)")
    args = ap.parse_args()
    import numpy as np
    import s3fs
    from IPython.core.interactiveshell import InteractiveShell

    from kernel_ext import snapshot

    base = tempfile.mkdtemp(prefix="rlm-bench-s3-", dir=args.dir)
    try:
        with moto_server(os.path.join(base, "moto.log")) as endpoint:
            os.environ.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="bench",
                              AWS_SECRET_ACCESS_KEY="bench-secret", AWS_DEFAULT_REGION="us-east-1",
                              AWS_EC2_METADATA_DISABLED="true")
            fs = s3fs.S3FileSystem(skip_instance_cache=True)
            fs.mkdir("bench")
            ip = InteractiveShell.instance()
            rng = np.random.default_rng(0)
            ip.user_ns["arr"] = rng.random(args.mib * 1024 * 1024 // 8)
            for i in range(200):
                ip.user_ns[f"v{i}"] = {"k": i, "l": list(range(20))}
            rows: list[tuple[float, ...]] = []
            for r in range(args.repeat):
                local = _round(ip, snapshot, os.path.join(base, f"local{r}"))
                remote = _round(ip, snapshot, f"s3://bench/run{r}/session")
                rows.append((*local, *remote, _raw_s3(ip, fs, f"bench/raw{r}.pkl")))
            ls, lr, rs, rr, raw = (statistics.median(c) for c in zip(*rows, strict=True))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"{args.mib} MiB array + 200 small names, medians of {args.repeat} (same run):")
    print(f"  local disk : snapshot {ls * 1000:.0f} ms + restore {lr * 1000:.0f} ms = {(ls + lr) * 1000:.0f} ms")
    print(f"  moto S3    : snapshot {rs * 1000:.0f} ms + restore {rr * 1000:.0f} ms = {(rs + rr) * 1000:.0f} ms")
    print(f"  ratio S3/local: snapshot {rs / ls:.2f}x, restore {rr / lr:.2f}x, "
          f"total {(rs + rr) / (ls + lr):.2f}x")
    print(f"  the server's floor: raw s3fs put + get of one pickle of the same objects "
          f"{raw * 1000:.0f} ms; ours/raw = {(rs + rr) / raw:.2f}x")


if __name__ == "__main__":
    main()
