"""The documentation site: its reference covers the public API, its algorithms page shows
the code scangen generates, and the package metadata matches the files beside it."""
import configparser
import importlib
import re
import sys
from pathlib import Path

import scangen

ROOT = Path(__file__).resolve().parents[2]
API = ROOT / "docs" / "api"
#: Public names that are modules: each has a page of its own under docs/api/.
MODULES = {"dask", "out_of_core"}


def documented_names() -> list[str]:
    """The scangen names docs/api/index.rst documents, in order (with repeats)."""
    text = (API / "index.rst").read_text()
    return re.findall(r"^\.\. (?:autoclass|autofunction|autodata|data|class|function)::"
                      r" scangen\.(\w+)$", text, re.MULTILINE)


def test_the_reference_documents_every_public_name_once():
    names = documented_names()
    assert len(names) == len(set(names)), "a name is documented twice"
    assert set(names) == set(scangen.__all__) - MODULES


def test_each_public_module_has_its_page():
    index = (API / "index.rst").read_text()
    for module in MODULES:
        assert module in scangen.__all__
        page = API / f"{module}.rst"
        assert f".. automodule:: scangen.{module}" in page.read_text()
        assert f"   {module}\n" in index  # in the page's table of contents


def test_the_license_file_is_the_license_the_metadata_names():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    assert config["metadata"]["license"] == "MIT"
    assert config["metadata"]["license_files"].strip() == "LICENSE"
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")


def test_the_algorithms_page_shows_each_block_scan_and_plan_as_generated(tmp_path,
                                                                        monkeypatch):
    """docs/generated_code.py (the site's extension) writes every block algorithm's whole
    block_scan function and every strategy's plan, and the page includes each."""
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        generated_code = importlib.import_module("generated_code")
    finally:
        sys.path.remove(str(ROOT / "docs"))
    monkeypatch.setattr(generated_code, "GENERATED", tmp_path)
    generated_code.write_generated()
    page = (ROOT / "docs" / "algorithms.md").read_text()
    for name in scangen.ALGORITHMS:
        code = (tmp_path / f"block-scan-{name}.cu").read_text()
        assert code.startswith("//") and "block_scan(acc_t *data)" in code
        assert code.rstrip().endswith("}") and code.count("{") == code.count("}")
        assert code.count("block_scan(") == 1  # one function, not the next one too
        assert f"_generated/block-scan-{name}.cu" in page
    for strategy in scangen.STRATEGIES:
        plan = (tmp_path / f"plan-{strategy}.txt").read_text()
        assert plan.startswith("plan: inclusive scan with add over n=1048576 float32")
        assert f"_generated/plan-{strategy}.txt" in page
