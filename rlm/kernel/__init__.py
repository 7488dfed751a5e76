"""The kernel runtime: lifecycle, execution, output shaping, host side of the bridge."""

from rlm.kernel.kernel import Kernel
from rlm.kernel.types import CellResult, Output, RestoreReport

__all__ = ["CellResult", "Kernel", "Output", "RestoreReport"]
