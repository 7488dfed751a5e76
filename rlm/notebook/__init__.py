"""Notebooks: export sessions to .ipynb, the `%%rlm` magic, starting from a notebook.

    export_session(store_or_path, out_path=None, leaf=None) -> Path     (export.py)
    InProcessExecutor(shell, session_dir, config)                       (inprocess.py)
    import_notebook(path, executor, session, strict=False)              (from_notebook.py)
    %load_ext rlm; %%rlm [--model M] [--max-turns N]; %rlm_state        (magic.py)

Imports are lazy: `import rlm.notebook` pulls in neither nbformat nor IPython.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "export_session": "rlm.notebook.export",
    "build_notebook": "rlm.notebook.export",
    "InProcessExecutor": "rlm.notebook.inprocess",
    "import_notebook": "rlm.notebook.from_notebook",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(name)
    import importlib

    return getattr(importlib.import_module(module), name)
