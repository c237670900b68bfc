"""Scan-based primitives, each a short composition of ScanKernel: compaction (select,
remove_if), partition, unique and run-length encoding."""
from .compaction import (Partition, RunLengthEncode, Select, Unique, partition, remove_if,
                         run_length_encode, select, unique)

__all__ = ["Partition", "RunLengthEncode", "Select", "Unique", "partition", "remove_if",
           "run_length_encode", "select", "unique"]
