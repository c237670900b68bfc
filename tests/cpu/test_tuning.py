"""The tuning tables (scangen/tuning.py): one lookup rule (the value the user named, else the
one measured for the size, else the fallback), plain data a tuner can write and read back,
the values every element size gets, and Tuning's validation."""
import importlib
import json
import re

import numpy as np
import pytest

import scangen
from scangen import Scan, Tuning, tuning
from scangen.tuning import Table
from tests.support import COMPACTION, WIDE_STRUCTS, field_sums

# the modules, not the functions scangen.primitives names after them
compaction, histogram, radix = (importlib.import_module(f"scangen.primitives.{name}")
                                for name in ("compaction", "histogram", "radix"))

TABLES = {name: getattr(tuning, name) for name in
          ("SCAN", "COUNTING", "COUNTING_CONDITION", "COUNTING_VALUES", "RADIX", "HISTOGRAM",
           "RUN_LENGTHS", "SEGMENT_HEADS")}


# --- the lookup rule --------------------------------------------------------------------------

def test_named_value_wins_then_the_size_then_the_fallback():
    table = Table(fallback=dict(width=1, threshold=None, wait=100),
                  by_size={4: dict(width=2, threshold=0), 8: dict(width=3)},
                  per_size=("width", "threshold"))
    assert [table.value("width", size) for size in (1, 3, 4, 8, 12)] == [1, 1, 2, 3, 1]
    assert table.value("width") == 1  # no size: the fallback
    assert table.value("width", 4, named=7) == 7 and table.value("width", 5, named=7) == 7
    assert table.value("threshold", 4, named=0) == 0  # 0 is a value, not "unnamed"
    assert table.value("threshold", 4) == 0 and table.value("threshold", 8) is None
    assert table.value("wait", 4) == 100


def test_a_tuning_names_per_size_fields_or_takes_the_scan_table():
    for size in (1, 2, 3, 4, 8, 12, 16):
        default = Tuning().at(size)
        for name in ("auto_reduce_then_scan_min_bytes", "lookback_tiles_per_lane",
                     "tile_min_threads_per_sm", "tile_persistent_min_bytes"):
            assert getattr(default, name) == tuning.SCAN.value(name, size), (name, size)
        named = Tuning(auto_reduce_then_scan_min_bytes=5, lookback_tiles_per_lane=3,
                       tile_min_threads_per_sm=512, tile_persistent_min_bytes=0).at(size)
        assert (named.auto_reduce_then_scan_min_bytes, named.lookback_tiles_per_lane,
                named.tile_min_threads_per_sm, named.tile_persistent_min_bytes) == (5, 3, 512, 0)
    named = Scan("float32", tuning=Tuning(tile_min_threads_per_sm=512)).source
    # 512 threads of 128, where they fit (templates/launch_bounds.cuh.j2)
    assert "TILE_MIN_BLOCKS = SCANGEN_FITTING_BLOCKS(4, BLOCK_SIZE);" in named
    assert "__launch_bounds__(BLOCK_SIZE, TILE_MIN_BLOCKS)" in named


def test_a_table_refuses_per_size_values_of_a_constant_field():
    with pytest.raises(ValueError, match=r"\['wait'\] for 4-byte values: only width may vary"):
        Table(fallback=dict(width=1, wait=100), by_size={4: dict(wait=5)}, per_size=("width",))
    with pytest.raises(ValueError, match="element sizes are ints"):
        Table(fallback=dict(width=1), by_size={0: dict(width=2)}, per_size=("width",))
    with pytest.raises(ValueError, match=r"per-size fields \['depth'\] have no fallback"):
        Table(fallback=dict(width=1), per_size=("depth",))
    with pytest.raises(ValueError, match="lookback_first_wait_ns"):
        tuning.SCAN.with_data({"fallback": tuning.SCAN.as_data()["fallback"],
                               "by_size": {"4": {"lookback_first_wait_ns": 0}}})
    with pytest.raises(TypeError):
        tuning.SCAN.fallback["block_size"] = 64  # read-only: edit the data, not the module


@pytest.mark.parametrize("name", TABLES)
def test_every_table_goes_through_json_and_back(name):
    table = TABLES[name]
    text = json.dumps(table.as_data())
    assert table.with_data(json.loads(text)) == table
    data = json.loads(text)
    data["fallback"]["no_such_field"] = 1
    with pytest.raises(ValueError, match=r"names \['no_such_field'\], which are not fields"):
        table.with_data(data)


def test_a_table_older_than_a_field_keeps_its_defaults():
    """A tuner's table written before a field existed loads: the missing field takes the
    defaults, for every size, while the table's own values stay."""
    data = tuning.SCAN.as_data()
    data["fallback"].pop("tile_vector_runs")
    for entry in data["by_size"].values():
        entry.pop("tile_vector_runs", None)
    data["by_size"]["1"]["items_per_thread"] = 16
    table = tuning.SCAN.with_data(json.loads(json.dumps(data)))
    for size in (1, 2, 4, 8, 16):
        assert table.value("tile_vector_runs", size) == \
            tuning.SCAN.value("tile_vector_runs", size)
    assert table.value("tile_vector_runs", 1) is True
    assert table.tile(1) == tuning.TileShape(tuning.SCAN.tile(1).block_size, 16)


def test_a_tuner_can_write_a_size_of_its_own():
    data = tuning.SCAN.as_data()
    data["by_size"]["16"] = {"block_size": 128, "tile_min_threads_per_sm": 512}
    table = tuning.SCAN.with_data(json.loads(json.dumps(data)))
    assert table.tile(16) == tuning.TileShape(128, 4)  # items: the fallback's
    assert table.value("tile_min_threads_per_sm", 16) == 512
    assert table.tile(4) == tuning.SCAN.tile(4)


# --- the values every size gets (as chosen before the tables were data) -------------------------

#: size: (block_size, items_per_thread, auto_reduce_then_scan_min_bytes,
#: tile_min_threads_per_sm, tile_persistent_min_bytes); every size reads one look-back tile a
#: lane.
MEASURED = {1: (128, 32), 2: (256, 32), 4: (128, 32), 8: (256, 8)}
EXPECTED = {size: (*MEASURED[size], 1 << 40, 1024, 0) if size in MEASURED
            else (256, 4, 16 << 20, 1536, None) for size in range(1, 17)}


@pytest.mark.parametrize("size", range(1, 17))
def test_the_scan_values_of_every_size_from_1_to_16_bytes(size):
    block, items, auto, threads, persistent = EXPECTED[size]
    assert tuning.SCAN.tile(size) == tuning.TileShape(block, items)
    at = Tuning().at(size)
    assert (at.auto_reduce_then_scan_min_bytes, at.lookback_tiles_per_lane,
            at.tile_min_threads_per_sm, at.tile_persistent_min_bytes) == \
        (auto, 1, threads, persistent)
    for block_size in (32, 128, 256, 1024):
        assert at.tile_min_blocks_per_sm(block_size) == min(32, max(1, threads // block_size))
    counting = tuning.COUNTING_TUNING.at(size)
    assert (counting.auto_reduce_then_scan_min_bytes, counting.lookback_tiles_per_lane,
            counting.tile_min_threads_per_sm, counting.tile_persistent_min_bytes) == \
        (256 << 20, 1, 1536, persistent)
    condition = tuning.COUNTING_CONDITION_TUNING.at(size)
    assert (condition.auto_reduce_then_scan_min_bytes, condition.tile_min_threads_per_sm) == \
        (1 << 62, 1536)
    values = tuning.COUNTING_VALUES_TUNING.at(size)
    assert (values.auto_reduce_then_scan_min_bytes, values.tile_min_threads_per_sm,
            values.tile_persistent_min_bytes) == (1 << 62, 1024, persistent)


STRUCTS = {3: np.dtype([("a", np.uint8), ("b", np.uint8), ("c", np.uint8)]),
           12: WIDE_STRUCTS[12],
           16: np.dtype([("x", np.float64), ("y", np.float64)])}


@pytest.mark.parametrize("size", STRUCTS)
def test_structs_of_unmeasured_sizes_take_the_fallback(size):
    """3-, 12- and 16-byte structs: 256 x 4 tiles bound for 1536 threads a multiprocessor,
    one look-back tile a lane, never persistent, reduce_then_scan from 16 MiB of input."""
    dtype = STRUCTS[size]
    scan = Scan(dtype, field_sums(dtype))
    spec = scan.spec
    assert (spec.acc_itemsize, spec.block_size, spec.items_per_thread) == (size, 256, 4)
    source = scan.source
    assert re.findall(r"TILE_MIN_BLOCKS = SCANGEN_FITTING_BLOCKS\((\d+), BLOCK_SIZE\)",
                      source) == ["6"]
    assert "const int PER_LANE = 1;" in source and "scan_tiles_persistent" not in source
    switch = -(-(16 << 20) // size)
    assert scan.plan(switch - 1).strategy == "decoupled_lookback"
    assert scan.plan(switch).strategy == "reduce_then_scan"


def test_the_counting_tiles():
    assert tuning.COUNTING.tile() == tuning.TileShape(128, 16)
    assert tuning.COUNTING_VALUES.tile() == tuning.TileShape(128, 32)
    counting = scangen.ScanKernel("int32", counts=True, **COMPACTION)
    assert (counting.spec.block_size, counting.spec.items_per_thread) == (128, 16)
    assert counting.spec.tuning == tuning.COUNTING_CONDITION_TUNING
    assert scangen.Select("float32", flags=np.bool_).kernel.spec.tuning == \
        tuning.COUNTING_TUNING
    predicate = scangen.Select("float32", "x > 0").kernel
    assert (predicate.spec.block_size, predicate.spec.items_per_thread) == (128, 16)
    assert predicate.spec.tuning == tuning.COUNTING_CONDITION_TUNING
    unique = scangen.Unique("int32").kernel
    assert (unique.spec.block_size, unique.spec.items_per_thread) == (128, 32)
    assert unique.spec.tuning == tuning.COUNTING_VALUES_TUNING


def test_the_radix_histogram_and_run_lengths_values():
    assert (radix._TILE, radix._DIGIT_PLACES_TILE) == ((256, 24), (512, 12, 1536))
    assert (radix.ONESWEEP_MIN_THREADS_PER_SM, radix.ONESWEEP_LOOKBACK_TILES,
            radix.ONESWEEP_PORTION_TILES) == (1024, 2, 16384)
    assert (radix._DIGIT_COUNT_BLOCKS_PER_SM, radix._MAX_GRID_STRIDE_BLOCKS) == (4, 16384)
    module = radix.RadixPassesModule(np.dtype(np.uint32))
    assert (module.block_size, module.max_items, module.min_threads_per_sm,
            module.lookback_tiles) == (256, 24, 1024, 2)
    dest = radix.DigitPlacesModule(np.dtype(np.uint32))
    assert (dest.block_size, dest.max_items, dest.min_threads_per_sm) == (512, 12, 1536)
    assert (histogram._BLOCK_SIZE, histogram._SHARED_BINS, histogram._BLOCKS_PER_SM) == \
        (256, 8192, 6)
    assert (compaction._LENGTHS_BLOCK_SIZE, compaction._LENGTHS_ITEMS_PER_THREAD,
            compaction._LENGTHS_BLOCKS_PER_SM) == (256, 4, 8)


def test_the_constant_knobs_default_from_the_scan_table():
    default = Tuning()
    assert (default.backoff_min_ns, default.backoff_max_ns, default.lookback_first_wait_ns,
            default.status_16_byte_words, default.tile_warp_runs,
            default.mask_sections_per_block) == (8, 256, 1100, True, True, 4)
    assert default == tuning.DEFAULT_TUNING


# --- Tuning's validation ----------------------------------------------------------------------

@pytest.mark.parametrize("name,bad,message", [
    ("auto_reduce_then_scan_min_bytes", -1, "None or an int >= 0"),
    ("auto_reduce_then_scan_min_bytes", 1.5, "None or an int >= 0"),
    ("backoff_min_ns", None, "an int from 0 to 4294967295"),
    ("backoff_max_ns", 1 << 32, "an int from 0 to 4294967295"),
    ("lookback_first_wait_ns", -5, "an int from 0 to 4294967295"),
    ("lookback_tiles_per_lane", 0, "None or an int from 1 to 32"),
    ("lookback_tiles_per_lane", 33, "None or an int from 1 to 32"),
    ("lookback_tiles_per_lane", True, "None or an int from 1 to 32"),
    ("tile_min_threads_per_sm", 0, "None or an int >= 1"),
    ("tile_min_threads_per_sm", "1024", "None or an int >= 1"),
    ("tile_persistent_min_bytes", -1, "None or an int >= 0"),
    ("mask_sections_per_block", 17, "an int from 1 to 16"),
    ("mask_sections_per_block", None, "an int from 1 to 16"),
])
def test_tuning_refuses_bad_values_naming_the_field(name, bad, message):
    with pytest.raises(ValueError, match=f"Tuning.{name} must be {message}, not "):
        Tuning(**{name: bad})


@pytest.mark.parametrize("name", ["status_16_byte_words", "tile_warp_runs"])
def test_tuning_switches_are_booleans(name):
    with pytest.raises(TypeError, match=f"Tuning.{name} must be True or False, not 1"):
        Tuning(**{name: 1})


def test_per_size_switches_are_none_or_booleans():
    """tile_vector_runs varies by size: None reads the table; anything but a bool is refused,
    and the other switches still refuse None."""
    assert Tuning(tile_vector_runs=None) == Tuning()
    for bad in (1, "yes", np.bool_(True)):
        with pytest.raises(TypeError,
                           match="Tuning.tile_vector_runs must be None, True or False, not "):
            Tuning(tile_vector_runs=bad)
    with pytest.raises(TypeError, match="Tuning.tile_warp_runs must be True or False, not None"):
        Tuning(tile_warp_runs=None)


def test_numpy_ints_are_ints():
    named = Tuning(lookback_tiles_per_lane=np.int64(2), backoff_max_ns=np.uint32(512))
    assert named == Tuning(lookback_tiles_per_lane=2, backoff_max_ns=512)
    assert type(named.lookback_tiles_per_lane) is int and type(named.backoff_max_ns) is int


# --- the table of the GPU this process sees -----------------------------------------------------

@pytest.fixture
def choosing(monkeypatch, tmp_path):
    """A process that has not chosen its table yet, whose user cache and shipped tables are
    empty folders of tmp_path, and which sees no GPU (``device`` sets one)."""
    monkeypatch.setattr(tuning, "_active", None)
    monkeypatch.setenv("SCANGEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SCANGEN_TUNING", raising=False)
    monkeypatch.setattr(tuning, "SHIPPED_TABLES", tmp_path / "shipped")
    seen = {"device": None}
    monkeypatch.setattr(tuning, "visible_device_name", lambda: seen["device"])
    return seen


def measured(block_size, items_per_thread, tile_min_threads_per_sm=1024) -> Table:
    """SCAN with another 4-byte tile and register bound, as a tuner might measure."""
    data = tuning.SCAN.as_data()
    data["by_size"]["4"].update(block_size=block_size, items_per_thread=items_per_thread,
                                tile_min_threads_per_sm=tile_min_threads_per_sm)
    return tuning.SCAN.with_data(data)


def test_device_names_become_file_names():
    assert tuning.device_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert tuning.device_slug("  NVIDIA  H200 ") == "nvidia-h200"
    assert tuning.user_table_path("NVIDIA H200").name == "nvidia-h200.json"


def test_no_gpu_takes_scangens_own_table(choosing):
    assert tuning.active_scan_table() == (tuning.SCAN, "scangen's defaults")


def test_the_users_table_then_the_shipped_one_then_the_defaults(choosing, tmp_path):
    device = choosing["device"] = "NVIDIA Test GPU"
    tuning.write_table(tuning.shipped_table_path(device), measured(256, 8), device, "tune")
    assert tuning.active_scan_table()[1] == str(tuning.shipped_table_path(device))
    tuning._active = None
    tuning.write_table(tuning.user_table_path(device), measured(512, 8, 2048), device, "tune")
    table, source = tuning.active_scan_table()
    assert source == str(tuning.user_table_path(device)) and table == measured(512, 8, 2048)
    assert tuning.scan_table() is table
    # chosen once: another table written now changes nothing in this process
    tuning.write_table(tuning.user_table_path(device), measured(128, 16), device, "tune")
    assert tuning.scan_table() is table
    tuning._active = None
    choosing["device"] = "NVIDIA Other GPU"
    assert tuning.active_scan_table()[0] is tuning.SCAN


def test_the_table_in_effect_gives_the_default_tile_and_per_size_values(choosing):
    device = choosing["device"] = "NVIDIA Test GPU"
    tuning.write_table(tuning.user_table_path(device), measured(256, 8, 2048), device, "tune")
    spec = Scan(np.float32).spec
    assert (spec.block_size, spec.items_per_thread, spec.section_size) == (256, 8, 2048)
    assert spec.tuning.at(4).tile_min_threads_per_sm == 2048
    # a named value still wins, and other sizes keep their measured values
    assert Scan(np.float32, tuning=Tuning(tile_min_threads_per_sm=512)).spec.tuning.at(4) \
        .tile_min_threads_per_sm == 512
    assert Scan(np.float64).spec.section_size == tuning.SCAN.tile(8).section_size


def test_scangen_tuning_names_a_file_or_the_defaults(choosing, tmp_path, monkeypatch):
    device = choosing["device"] = "NVIDIA Test GPU"
    tuning.write_table(tuning.user_table_path(device), measured(256, 8), device, "tune")
    monkeypatch.setenv("SCANGEN_TUNING", "default")
    assert tuning.active_scan_table()[0] is tuning.SCAN
    tuning._active = None
    elsewhere = tmp_path / "mine.json"
    tuning.write_table(elsewhere, measured(128, 16), device, "tune")
    monkeypatch.setenv("SCANGEN_TUNING", str(elsewhere))
    assert tuning.active_scan_table() == (measured(128, 16), str(elsewhere))


def test_a_broken_table_is_named(choosing, tmp_path, monkeypatch):
    bad = tmp_path / "bad.json"
    data = {"device": "x", "scan": tuning.SCAN.as_data()}
    data["scan"]["by_size"]["4"]["lookback_first_wait_ns"] = 5  # not a per-size field
    bad.write_text(json.dumps(data))
    monkeypatch.setenv("SCANGEN_TUNING", str(bad))
    with pytest.raises(ValueError, match=r"tuning table .*bad.json cannot be read.*"
                                         r"lookback_first_wait_ns"):
        tuning.active_scan_table()
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json cannot be read"):
        tuning._choose_scan_table()


def test_the_driver_is_asked_only_where_a_table_exists(choosing, monkeypatch):
    """No saved or shipped table: the device is not looked up (which would initialise the
    CUDA driver in a process that may fork later)."""
    asked = []
    monkeypatch.setattr(tuning, "visible_device_name", lambda: asked.append(1) or "NVIDIA X")
    assert tuning.active_scan_table()[0] is tuning.SCAN and not asked
    tuning._active = None
    tuning.write_table(tuning.user_table_path("NVIDIA Y"), measured(256, 8), "NVIDIA Y", "t")
    assert tuning.active_scan_table()[0] is tuning.SCAN and asked == [1]


def test_every_shipped_table_loads_and_names_its_device():
    """The tables in scangen/tables: each a measured table for the device its name says,
    with the command that measured it and a report row per size it tuned."""
    for path in sorted(tuning.SHIPPED_TABLES.glob("*.json")):
        data = json.loads(path.read_text())
        assert path == tuning.shipped_table_path(data["device"])
        assert re.fullmatch(r"([A-Z_]+=\S+ )*python -m scangen tune .*", data["command"])
        table = tuning.load_table(path)
        for row in data["report"]:
            assert row["chosen_us"] <= row["in_effect_us"]  # never slower than replaced
            assert table.value("block_size", np.dtype(row["dtype"]).itemsize) > 0
