"""The names a data notebook starts with: `pd`, `np`, `plt` (`contract.ALIASES`).

Each is bound before the first cell when its package is installed where the kernel runs,
to a `LazyModule` that imports the real module on first attribute use (`pd.read_csv`,
`plt.plot`) and then rebinds the name to it. A kernel start pays ~20 ms (the package
checks), not the imports: measured on the shared 2-core machine under load, pandas took
3.8 s and matplotlib.pyplot 5.2 s more on first use, which an eager alias would charge to
every kernel start and restart whether or not the cells use them.

They are hidden like the kernel API (`user_ns_hidden`), and `namespace.user_values` also
leaves out an alias bound to its own module (a cell's `import pandas as pd`): listings,
`<ipython_state>` and snapshots never carry them, and a restore finds them already bound.
A user's own binding wins: install never replaces a bound name, and `pd = df` makes `pd`
an ordinary variable (listed and snapshotted as data).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any

from kernel_ext.contract import ALIASES


class LazyModule(types.ModuleType):
    """Stands for a module until an attribute is asked for; then imports it."""

    def __init__(self, alias: str, module: str, ip: Any) -> None:
        super().__init__(module)
        self.__dict__["_rlm_lazy"] = (alias, ip)

    def _rlm_load(self) -> types.ModuleType:
        alias, ip = self.__dict__["_rlm_lazy"]
        real = importlib.import_module(self.__name__)
        if ip is not None and ip.user_ns.get(alias) is self:
            ip.user_ns[alias] = real
            ip.user_ns_hidden[alias] = real
        return real

    def __getattr__(self, attr: str) -> Any:  # only for names the stand-in lacks
        return getattr(self._rlm_load(), attr)

    def __dir__(self) -> list[str]:
        return dir(self._rlm_load())

    def __repr__(self) -> str:
        return f"<module {self.__name__!r} (imported on first use)>"


_bound: dict[str, Any] = {}


def installed(module: str) -> bool:
    """Whether `module` can be imported here, without importing it (nor its parents)."""
    if module in sys.modules:
        return True
    try:
        return importlib.util.find_spec(module.partition(".")[0]) is not None
    except (ImportError, ValueError):
        return False


def install(ip: Any) -> None:
    for alias, module in ALIASES.items():
        if alias in ip.user_ns or not installed(module):
            continue
        value = sys.modules.get(module) or LazyModule(alias, module, ip)
        ip.push({alias: value}, interactive=False)  # hidden from %who, listings, snapshots
        ip.user_ns_hidden[alias] = value
        _bound[alias] = value


def uninstall(ip: Any) -> None:
    for alias, value in list(_bound.items()):
        current = ip.user_ns.get(alias)
        if current is value or (isinstance(value, LazyModule) and
                                current is sys.modules.get(value.__name__)):
            del ip.user_ns[alias]
        ip.user_ns_hidden.pop(alias, None)
    _bound.clear()


def is_alias(name: str, value: Any) -> bool:
    """`value` is what the alias `name` stands for: its stand-in or its own module."""
    module = ALIASES.get(name)
    if module is None:
        return False
    if isinstance(value, LazyModule):
        return value.__name__ == module
    return value is sys.modules.get(module)


def defined(ip: Any) -> dict[str, str]:
    """The aliases bound now to their module (or its stand-in): name -> module."""
    return {name: ALIASES[name] for name in ALIASES
            if name in ip.user_ns and is_alias(name, ip.user_ns[name])}
