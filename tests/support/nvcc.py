"""The nvcc harness of the CPU tests: modules compiled exactly as rendered (no GPU needed).

Each module is compiled byte for byte as the text PyCUDA compiles (C++ with ``extern "C"
__global__`` entry points, ``no_extern_c``), as its own translation unit with no wrapper.
Modules cannot share a translation unit (they define the same extern "C" names, and a
namespace does not separate those), so every module is one ``nvcc -cubin -arch=sm_90
--resource-usage`` process, and ``compiling`` runs them all on a thread pool as wide as the
machine, each distinct module once. The price is nvcc's fixed cost per translation unit
(~0.3 s: host preprocessing and cicc parsing the CUDA headers), which one-file batching used
to share.

``Compiled`` holds what a test checks: the return code and log, the user piece (input_expr,
operator, ...) each diagnostic falls in, the entry points in the cubin's symbol table, and
ptxas's per-kernel static shared memory and spill stores.
"""
import concurrent.futures
import contextlib
import os
import re
import shutil
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

# The nvcc fixture's mark: a test module that compiles skips where nvcc is not on PATH, and
# fails there under SCANGEN_REQUIRE_NVCC=1.
from tests.support import needs_nvcc, skip_or_fail  # noqa: F401  (needs_nvcc: re-exported)

NVCC = shutil.which("nvcc")
ARCH = "sm_90"

@dataclass
class Entry:
    """One module to compile: a label saying what it is, and its module (a ScanKernel's
    ScanModule, or another module such as the radix passes')."""

    label: str
    scan_module: object
    #: Scan's mode, or "" for a ScanKernel of its own.
    mode: str = ""
    #: Text to compile instead of the rendered one (only the harness's own canary).
    text: str = None


@dataclass
class Compiled:
    entry: Entry
    path: Path
    source: object  # the ModuleSource
    returncode: int
    log: str
    #: kernel name -> static shared bytes, from ptxas --resource-usage (in ptxas's order)
    shared: dict = field(default_factory=dict)
    #: names of the global functions in the cubin's symbol table
    symbols: list = field(default_factory=list)
    #: kernel name -> bytes of register spill stores, from ptxas --resource-usage
    spills: dict = field(default_factory=dict)

    @property
    def label(self):
        return self.entry.label

    def diagnostics(self, kind):
        """'[label] line N (in <piece>): message' for each error or warning nvcc printed."""
        found = []
        for line in self.log.splitlines():
            located = re.search(r"\.cu\((\d+)\): (?:catastrophic )?" + kind, line)
            if located:
                number = int(located.group(1))
                piece = self.source.user_piece_at(number)
                where = f"line {number}" + (f" (in the user's {piece})" if piece else "")
                found.append(f"[{self.label}] {where}: {line.strip()}")
            elif re.search(rf"\b{kind}\b", line, re.IGNORECASE) and "ptxas info" not in line:
                found.append(f"[{self.label}] {line.strip()}")
        return found


def cubin_functions(data: bytes) -> list:
    """The global FUNC symbols of an ELF64 (little-endian) cubin: the entry points a
    driver's cuModuleGetFunction finds by name."""
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, "not an ELF64 LE cubin"
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + k * shentsize)
                for k in range(shnum)]
    names = []
    for _, sh_type, _, _, offset, size, link, _, _, entsize in sections:
        if sh_type != 2:  # SHT_SYMTAB
            continue
        strtab_offset = sections[link][4]
        for position in range(offset, offset + size, entsize):
            st_name, st_info = struct.unpack_from("<IB", data, position)
            if st_info >> 4 == 1 and st_info & 0xF == 2:  # STB_GLOBAL, STT_FUNC
                end = data.index(b"\0", strtab_offset + st_name)
                names.append(data[strtab_offset + st_name:end].decode())
    return names


#: nvcc options that keep every stage (front end, code generation, ptxas, the cubin) but
#: optimise nothing: about a quarter of the time of an optimised build, for matrices whose
#: point is whether C code of each type compiles at all, not what ptxas makes of it.
UNOPTIMISED = ("-Xcicc", "-O0", "-Xptxas", "-O0")


def compile_entry(entry: Entry, path: Path, options: tuple = ()) -> Compiled:
    """nvcc the entry's module (with ``options`` added) and read what ptxas reports."""
    source = entry.scan_module.module_source()
    text = source.text if entry.text is None else entry.text
    path.write_text(text)
    cubin = path.with_suffix(".cubin")
    result = subprocess.run([NVCC, "-cubin", f"-arch={ARCH}", "--resource-usage", *options,
                             "-o", str(cubin), str(path)],
                            capture_output=True, text=True, timeout=600)
    compiled = Compiled(entry, path, source, result.returncode, result.stderr + result.stdout)
    kernel = None
    for line in compiled.log.splitlines():
        match = re.search(r"Compiling entry function '(\w+)'", line)
        if match:
            kernel = match.group(1)
            continue
        match = re.search(r"(\d+) bytes spill stores", line)
        if match and kernel is not None:
            compiled.spills[kernel] = int(match.group(1))
            continue
        match = re.search(r"ptxas info\s*: Used \d+ registers", line)
        if match and kernel is not None:
            smem = re.search(r"(\d+) bytes smem", line)
            compiled.shared[kernel] = int(smem.group(1)) if smem else 0
            kernel = None
    if result.returncode == 0:
        compiled.symbols = cubin_functions(cubin.read_bytes())
    return compiled


def probe(directory):
    """Can this nvcc build sm_90 device code at all (host preprocessor, arch support)?"""
    path = directory / "probe.cu"
    path.write_text('extern "C" __global__ void k(int *p) { *p = 1; }\n')
    result = subprocess.run([NVCC, "-cubin", f"-arch={ARCH}", "-o",
                             str(path.with_suffix(".cubin")), str(path)],
                            capture_output=True, text=True, timeout=300)
    return None if result.returncode == 0 else (result.stderr or result.stdout)[-2000:]


@contextlib.contextmanager
def compiling(batches: dict, directory: Path, options: tuple = ()):
    """Compile every Entry of ``batches`` (name -> list of Entry) on a pool of nvcc processes
    as wide as the machine, all queued at once; yields name -> list of Futures of Compiled,
    one per entry. A module (kernel spec and text) that several entries share compiles
    once; ``options`` are added to every nvcc command (e.g. UNOPTIMISED). Skips the calling
    test where this nvcc cannot build sm_90 code at all."""
    problem = probe(directory)
    if problem:
        skip_or_fail(f"nvcc cannot build {ARCH} code here:\n{problem}",
                     required_by="SCANGEN_REQUIRE_NVCC")
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2))
    seen, futures = {}, {}
    for name, entries in batches.items():
        futures[name] = []
        for index, entry in enumerate(entries):
            key = (entry.scan_module, entry.text)
            if key not in seen:
                seen[key] = pool.submit(compile_entry, entry, directory / f"{name}_{index}.cu",
                                        options)
            futures[name].append(seen[key])
    try:
        yield futures
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def results(compiled: dict, name: str) -> list:
    """The Compiled of every entry of one batch, waiting for them."""
    return [future.result() for future in compiled[name]]
