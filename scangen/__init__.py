"""scangen: generated CUDA parallel scans for any associative operator.

Public names only; see README.md for a tour.
"""
from .ops import BUILTIN_OPERATORS, LAST_NONZERO, Operator
from .reference import reference_scan
from .spec import ALGORITHMS, MODES, STRATEGIES, ScanSpec, make_spec
from .types import ELEMENT_TYPES
from .render import RenderError
from .compile import current_context
from .kernel import ScanKernel
from .usercode import UserCodeError
from .primitives import (Partition, RunLengthEncode, Select, Unique, partition, remove_if,
                         run_length_encode, select, unique)
from .scan import Scan, ScanCompileError, GPUUnavailableError
from .segmented import SegmentedScan
from .check import OperatorReport, check_operator
from .tuning import Tuning

__all__ = [
    "ALGORITHMS", "BUILTIN_OPERATORS", "current_context", "ELEMENT_TYPES", "GPUUnavailableError", "LAST_NONZERO",
    "MODES", "Operator", "RenderError", "STRATEGIES", "Scan", "ScanCompileError", "ScanKernel", "ScanSpec", "SegmentedScan",
    "Tuning", "UserCodeError", "make_spec", "reference_scan", "check_operator",
    "OperatorReport",
    "Partition", "RunLengthEncode", "Select", "Unique", "partition", "remove_if",
    "run_length_encode", "select", "unique",
]
__version__ = "0.1.0"
