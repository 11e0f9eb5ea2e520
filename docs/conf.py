"""Sphinx configuration of attnx's documentation: the user guide, the results pages
(built from benchmarks/results/ by docs/_ext/attnx_results.py), the examples gallery
(sphinx-gallery runs examples/*.py and shows what they print and plot), the
contributor guide and the API reference from the docstrings.

Build (warnings are errors), with the docs extra installed (pip install ".[docs]"):
    sphinx-build -W -b html docs docs/_build
attnx must be importable: installed, or built in place (python setup.py
build_ext --inplace) in this checkout, which is then put first on sys.path.
ATTNX_DOCS_GALLERY=0 skips running the examples (their pages then show the code
only): a build of the text in seconds.
"""
import importlib.machinery
import os
import re
import sys

_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the checkout's attnx/ when it is built in place (a compiled _ops next to the
# sources); else the installed attnx
if any(os.path.exists(os.path.join(_root, "attnx", "kernels", "_ops" + suffix))
       for suffix in importlib.machinery.EXTENSION_SUFFIXES):
    sys.path.insert(0, _root)

import attnx  # noqa: E402

project = "attnx"
author = "attnx developers"
copyright = "attnx developers"
release = version = attnx.__version__

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ext"))

extensions = ["sphinx.ext.autodoc", "numpydoc", "myst_parser", "sphinx_gallery.gen_gallery",
              "attnx_results"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "undoc-members": False}
numpydoc_show_class_members = False
numpydoc_validation_checks: set = set()
exclude_patterns = ["_build", "_ext", "README.md"]
myst_heading_anchors = 3

# The examples gallery: every examples/classify_*.py and forecast_*.py runs during the
# build (one thread each, about a minute in all); _common.py trains their PyTorch twins
# when run from the checkout (the scripts run without it after download).
sphinx_gallery_conf = {
    "examples_dirs": "../examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/(classify|forecast)_",
    "ignore_pattern": r"(__init__|_common)\.py",
    "plot_gallery": os.environ.get("ATTNX_DOCS_GALLERY", "1") != "0",
    "download_all_examples": False,
    "min_reported_time": 1,
    "abort_on_example_error": True,
}

# furo: a maintained theme whose code blocks and tables scroll sideways when wide;
# attnx.css wraps the gallery's printed output and keeps wide result tables scrolling
html_theme = "furo"
html_title = f"attnx {release}"
html_theme_options = {"sidebar_hide_name": False, "navigation_with_keys": True}
html_static_path = ["_static"]
html_css_files = ["attnx.css"]


def _preformat_plain_text(app, what, name, obj, options, lines):
    """Keep the layout of plain-text docstring parts written for help(): where a
    description (the part before the first numpydoc section) indents a line under
    a non-blank one -- aligned formulas, wrapped "name: text" lists, which reST
    would reject -- show that part as a literal block after its summary line."""
    end = next((i for i in range(1, len(lines))
                if lines[i].strip() and set(lines[i].strip()) == {"-"}
                and lines[i - 1].strip()), len(lines) + 1) - 1
    body = lines[1:end]

    def indent(s):
        return len(s) - len(s.lstrip())

    prev = lines[0] if lines else ""
    clash = False
    for line in body:
        if line.strip() and prev.strip() and indent(line) > indent(prev):
            clash = True
            break
        prev = line
    if clash:
        text = [line for line in body]
        while text and not text[0].strip():
            text.pop(0)
        lines[1:end] = ["", "::", ""] + ["    " + t for t in text] + [""]


_LITERAL = re.compile(r"(``.*?``|`[^`]*`)")
_TRAILING_UNDERSCORE = re.compile(r"(?<![\w\\])([A-Za-z]\w*)_(?=[\s,.;:)\]]|$)")


def _escape_fitted_names(app, what, name, obj, options, lines):
    """Plain-text docstrings name fitted attributes (loss_curve_, classes_); reST reads
    a word ending in '_' as a link. Escape that underscore outside backticks."""
    block = None   # the indent of a line ending in "::" while its literal block runs
    for i, line in enumerate(lines):
        indent = len(line) - len(line.lstrip())
        if block is not None and (not line.strip() or indent > block):
            continue
        block = indent if line.rstrip().endswith("::") else None
        if "_" not in line:
            continue
        parts = _LITERAL.split(line)
        lines[i] = "".join(p if k % 2 else _TRAILING_UNDERSCORE.sub(r"\1\\_", p)
                           for k, p in enumerate(parts))


def setup(app):
    app.connect("autodoc-process-docstring", _escape_fitted_names, priority=90)
    app.connect("autodoc-process-docstring", _preformat_plain_text, priority=100)
