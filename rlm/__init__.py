"""rlm: a Recursive Language Model agent whose working memory is a live IPython kernel."""

__version__ = "0.1.0"


def load_ipython_extension(ip):  # type: ignore[no-untyped-def]
    """`%load_ext rlm`: load kernel_ext and register `%%rlm` / `%rlm_state`."""
    from rlm.notebook.magic import load

    ip.extension_manager.load_extension("kernel_ext")
    load(ip)


def unload_ipython_extension(ip):  # type: ignore[no-untyped-def]
    from rlm.notebook.magic import unload

    unload(ip)
    ip.extension_manager.unload_extension("kernel_ext")
