"""Scan-based primitives, each a short composition of generated kernels: compaction
(select, remove_if), partition, unique and run-length encoding (one ScanKernel each); radix
digit offsets, radix sort and argsort (tile digit counts, a ScanKernel over them, a stable
scatter); equal-width histograms; flatnonzero (one ScanKernel)."""
from .compaction import (Partition, RunLengthEncode, Select, Unique, partition, remove_if,
                         run_length_encode, select, unique)
from .histogram import Histogram, histogram
from .nonzero import FlatNonzero, flatnonzero
from .radix import (RadixDigitOffsets, RadixSort, argsort, radix_digit_offsets,
                    radix_sort)

__all__ = ["Partition", "RunLengthEncode", "Select", "Unique", "partition", "remove_if",
           "run_length_encode", "select", "unique", "RadixDigitOffsets", "RadixSort",
           "argsort", "radix_digit_offsets", "radix_sort", "Histogram", "histogram", "FlatNonzero", "flatnonzero"]
