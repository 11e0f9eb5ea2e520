"""Every Python code block of README.md and docs/guide/ runs as written.

Each file's blocks run in order in one fresh namespace (a later block may use an earlier
one's names, as a reader following the page would), in a temporary working directory
(files the code writes stay out of the checkout), with matplotlib's Agg backend.
Blocks tagged python (```python, .. code-block:: python) run; shell, text and output
blocks are other languages and do not. Where a page says pandas works, its blocks show
the pandas call too, so running them as written covers numpy and pandas input. A block
that imports an optional package is skipped only when that package is not installed.
"""
import re
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs" / "guide").glob("*.rst")),
         *sorted((ROOT / "docs" / "guide").glob("*.md"))]
OPTIONAL = {"pandas", "matplotlib", "sklearn", "torch", "onnx", "onnxruntime", "mpi4py",
            "dask", "distributed", "sktime", "statsforecast", "aeon", "statsmodels",
            "pyarrow", "safetensors"}
_FENCE = re.compile(r"(?ms)^```(\w*)[^\n]*\n(.*?)^```")
_DIRECTIVE = re.compile(r"^(\s*)\.\. (?:code-block|code|sourcecode)::\s*(\w*)\s*$")


def blocks(path):
    """(first line, source) of each Python block of a Markdown or reST file."""
    text = path.read_text(encoding="utf-8")
    out = []
    if path.suffix == ".md":
        for m in _FENCE.finditer(text):
            if m[1] in ("python", "py"):
                out.append((text.count("\n", 0, m.start()) + 2, m[2]))
        return out
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _DIRECTIVE.match(lines[i])
        i += 1
        if not m or m[2] not in ("python", "py", "python3"):
            continue
        indent = len(m[1])
        while i < len(lines) and lines[i].strip().startswith(":"):   # directive options
            i += 1
        start, body = i + 1, []
        while i < len(lines) and (not lines[i].strip()
                                  or len(lines[i]) - len(lines[i].lstrip()) > indent):
            body.append(lines[i])
            i += 1
        out.append((start, textwrap.dedent("\n".join(body)).strip("\n") + "\n"))
    return out


def test_the_pages_have_python_blocks():
    found = {p.name: len(blocks(p)) for p in PAGES}
    assert found["README.md"] >= 3 and found["forecasting.rst"] >= 1, found


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p)],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_page_runs_as_written(page, tmp_path, monkeypatch):
    matplotlib = pytest.importorskip("matplotlib") if "matplotlib" not in sys.modules \
        else sys.modules["matplotlib"]
    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__doc_snippet__"}
    for line, source in blocks(page):
        where = f"{page.relative_to(ROOT)}:{line}"
        try:
            code = compile(source, where, "exec")
            exec(code, namespace)
        except ModuleNotFoundError as exc:
            if (exc.name or "").split(".")[0] in OPTIONAL:
                pytest.skip(f"{where} needs {exc.name}, not installed")
            raise
        finally:
            import matplotlib.pyplot as plt
            plt.close("all")
