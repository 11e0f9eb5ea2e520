"""Sphinx configuration: the API reference of attnx, built from its docstrings.

Build (warnings are errors): python -m sphinx -W -b html docs docs/_build
attnx must be importable: installed, or built in place (python setup.py
build_ext --inplace) in this checkout, which is then put first on sys.path.
"""
import importlib.machinery
import os
import sys

_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the checkout's attnx/ when it is built in place (a compiled _ops next to the
# sources); else the installed attnx
if any(os.path.exists(os.path.join(_root, "attnx", "_ops" + suffix))
       for suffix in importlib.machinery.EXTENSION_SUFFIXES):
    sys.path.insert(0, _root)

import attnx  # noqa: E402

project = "attnx"
author = "attnx developers"
release = version = attnx.__version__

extensions = ["sphinx.ext.autodoc", "numpydoc"]
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "undoc-members": False}
numpydoc_show_class_members = False
numpydoc_validation_checks: set = set()
exclude_patterns = ["_build"]
html_theme = "alabaster"


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


def setup(app):
    app.connect("autodoc-process-docstring", _preformat_plain_text, priority=100)
