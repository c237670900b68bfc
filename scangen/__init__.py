"""scangen: generated CUDA parallel scans for any associative operator.

Public names only; see README.md for a tour.
"""
from .ops import BUILTIN_OPERATORS, LAST_NONZERO, Operator
from .reference import reference_scan
from .spec import ALGORITHMS, MODES, STRATEGIES, ScanSpec, make_spec
from .types import ELEMENT_TYPES
from .tuning import Tuning
from .usercode import UserCodeError
from .render import RenderError
from .runtime.contexts import current_context
from .runtime.pool import free_pooled_memory
from .kernel import ScanKernel
from .interop import DevicePointer
from .scan import PreparedScan, Scan, ScanCompileError, GPUUnavailableError
from .segmented import SegmentedScan
from .check import OperatorReport, check_operator
from .one_shot import cummax, cummin, cumprod, cumsum, exclusive_scan, inclusive_scan
from .operands import associative_scan, linear_recurrence, linear_recurrence_gradients
from . import primitives
# Every primitive's public names, as its own module lists them (scangen.primitives).
from .primitives import *  # noqa: F401,F403
# Past one GPU, as modules: scangen.dask.inclusive_scan(darr), scangen.out_of_core.*_scan(host).
# Neither imports Dask or CUDA until called.
from . import dask, out_of_core

__all__ = [
    # scans
    "Scan", "PreparedScan", "ScanKernel", "SegmentedScan", "DevicePointer", "Operator",
    "BUILTIN_OPERATORS", "LAST_NONZERO",
    "check_operator", "OperatorReport", "reference_scan", "inclusive_scan", "exclusive_scan",
    "cumsum", "cumprod", "cummax", "cummin", "associative_scan", "linear_recurrence",
    "linear_recurrence_gradients",
    # primitives
    *primitives.__all__,
    # specs, tables and tuning
    "ScanSpec", "make_spec", "Tuning", "ALGORITHMS", "MODES", "STRATEGIES", "ELEMENT_TYPES",
    # past one GPU (modules)
    "dask", "out_of_core",
    # errors, the CUDA context and pooled memory
    "GPUUnavailableError", "ScanCompileError", "RenderError", "UserCodeError",
    "current_context", "free_pooled_memory",
]
#: The one place the version is written (setup.cfg reads it; python -m scangen --version).
__version__ = "0.1.0"
