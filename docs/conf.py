"""Sphinx configuration of scangen's documentation: the user guide (Markdown, read by
MyST), the algorithms page and the API reference (autodoc over scangen's public names).
Build it with ``python -m sphinx -W --keep-going -b html docs docs/_build/html`` (the
``docs`` extra installs what it needs; .ci/run builds it warning-free)."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docs"))  # generated_code, this site's extension

import scangen  # noqa: E402

project = "scangen"
author = "The scangen developers"
copyright = "2026, the scangen developers"
release = version = scangen.__version__

extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "myst_parser", "generated_code"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
# Not part of the site: the developers' notes (the pages link the raw results, whose
# Markdown files are pages too, listed in no table of contents).
exclude_patterns = ["_build", "_generated", "developer.md"]

# Inherited members too (a primitive's source, plan and check_compile may come from a base),
# but not an exception's args and with_traceback.
autodoc_default_options = {"members": True, "inherited-members": "BaseException",
                           "undoc-members": False, "show-inheritance": False}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_numpy_docstring = True
napoleon_google_docstring = False
myst_heading_anchors = 3
html_theme = "alabaster"
html_title = f"scangen {release}"
