"""rlm: a Recursive Language Model agent whose working memory is a live IPython kernel."""

__version__ = "0.1.0"


def run_task(task, **kw):  # type: ignore[no-untyped-def]
    """`rlm.run_task(task, model=..., config=..., context_files=...)` -> RunResult
    (rlm.app.run_task: a fresh session assembled like every other entry point)."""
    from rlm.app import run_task as _run_task

    return _run_task(task, **kw)


def load_ipython_extension(ip):  # type: ignore[no-untyped-def]
    """`%load_ext rlm`: load kernel_ext and register `%%rlm` / `%rlm_state`."""
    from kernel_ext.contract import EXTENSION
    from rlm.magic import load

    own = dict(ip.user_ns)  # a user's own `final = ...` survives the load
    ip.extension_manager.load_extension(EXTENSION)
    from kernel_ext import api

    api.withdraw(ip)  # the notebook's globals stay its own; `%%rlm` lends the names
    ip.user_ns.update({k: v for k, v in own.items() if ip.user_ns.get(k, ip) is not v})
    load(ip)


def unload_ipython_extension(ip):  # type: ignore[no-untyped-def]
    from kernel_ext.contract import EXTENSION
    from rlm.magic import unload

    unload(ip)
    ip.extension_manager.unload_extension(EXTENSION)
