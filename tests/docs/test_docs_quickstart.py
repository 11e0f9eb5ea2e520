"""The landing page's quick start (docs/index.rst, the block named "quickstart") runs as
written, and its figure has the history, forecast, interval and held-out values."""
import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _figure_script():
    spec = importlib.util.spec_from_file_location(
        "quickstart_figure", os.path.join(ROOT, "docs", "_ext", "quickstart_figure.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_quickstart_runs_as_written(capsys):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    code = _figure_script().quickstart_code()
    assert 8 <= len([line for line in code.splitlines() if line.strip()]) <= 14
    plt.close("all")
    try:
        exec(compile(code, "docs/index.rst (quickstart)", "exec"), {"__name__": "qs"})
        out = capsys.readouterr().out
        assert out.startswith("forecast by '") and "MASE " in out
        ax = plt.gca()
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert {"history", "forecast", "actual", "90% interval"} <= set(labels)
        assert len(ax.lines[0].get_xdata()) == 120
    finally:
        plt.close("all")


def test_quickstart_block_is_found_and_missing_block_is_named(tmp_path):
    mod = _figure_script()
    bad = tmp_path / "index.rst"
    bad.write_text(".. code-block:: python\n\n   print(1)\n")
    with pytest.raises(ValueError, match="no '.. code-block:: python' with ':name: quickstart'"):
        mod.quickstart_code(str(bad))
