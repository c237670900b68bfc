"""The documentation's reference covers the public API, and the package metadata matches
the files beside it."""
import configparser
import re
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
