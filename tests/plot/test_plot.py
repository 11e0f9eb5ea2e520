"""attnx.plot with the Agg backend: the PNGs exist and are not blank; matplotlib is optional."""
import sys

import numpy as np
import pytest

import attnx
from attnx.datasets import max_position_task

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.image as mpimg  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

from attnx import plot  # noqa: E402


@pytest.fixture(scope="module")
def fitted():
    X, Y = max_position_task(128, 6, 4, random_state=0)
    est = attnx.AttentionRegressor(2, epochs=6, lr=0.03, random_state=0, options={"validation_fraction": 0.25}).fit(X, Y)
    return est, X


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def _saved_pixels(ax, path):
    ax.figure.savefig(path, dpi=60)
    assert path.exists() and path.stat().st_size > 1000
    img = mpimg.imread(path)
    return img[..., :3]


def _not_blank(img):
    # a blank canvas is one colour; a drawn map has many grey levels and real spread
    grey = img.mean(axis=-1)
    return grey.var() > 1e-3 and len(np.unique(np.round(grey, 2))) > 10


def test_heatmap_of_a_fitted_estimator(fitted, tmp_path):
    est, X = fitted
    ax = plot.attention_heatmap(est, X=X, sample=3, head=1)
    assert isinstance(ax, matplotlib.axes.Axes)
    assert ax.get_title() == "attention weights: sample 3, head 1"
    assert ax.get_xlabel() == "key position" and ax.get_ylabel() == "query position"
    im = ax.get_images()[0].get_array()
    np.testing.assert_allclose(im, est.attention_weights(X[3:4])[0, 1], rtol=1e-6)
    assert len(ax.texts) == 36          # T = 6: every cell annotated
    assert _not_blank(_saved_pixels(ax, tmp_path / "heat.png"))


def test_heatmap_from_arrays_models_and_layers(tmp_path):
    rng = np.random.default_rng(0)
    w = rng.random((2, 3, 12, 12))
    fig, axs = plt.subplots(1, 3)
    plot.attention_heatmap(w, sample=1, head=2, ax=axs[0])
    np.testing.assert_array_equal(axs[0].get_images()[0].get_array(), w[1, 2])
    assert len(axs[0].texts) == 0       # T = 12: no numbers in the cells
    tr = attnx.Transformer(4, 2, n_layers=3, random_state=0)
    X = rng.normal(size=(2, 5, 4))
    tr.forward(X)
    plot.attention_heatmap(tr, layer=2, head=1, ax=axs[1], colorbar=False)
    np.testing.assert_allclose(axs[1].get_images()[0].get_array(),
                               tr.attention_weights(layer=2)[0, 1], rtol=1e-6)
    assert axs[1].get_title().endswith("layer 2")
    plot.attention_heatmap(attnx.MultiHeadAttention(4, 1, random_state=0), X=X, sample=1,
                           ax=axs[2], title="one head")
    assert axs[2].get_title() == "one head"
    assert _not_blank(_saved_pixels(axs[0], tmp_path / "three.png"))


def test_heatmap_argument_errors(fitted):
    est, X = fitted
    with pytest.raises(ValueError, match="needs X"):
        plot.attention_heatmap(est)
    with pytest.raises(ValueError, match="sample must be in"):
        plot.attention_heatmap(np.ones((2, 1, 3, 3)), sample=2)
    with pytest.raises(ValueError, match="head must be in"):
        plot.attention_heatmap(np.ones((2, 1, 3, 3)), head=1)
    with pytest.raises(ValueError, match="layer must be"):
        plot.attention_heatmap([np.ones((1, 1, 3, 3))], layer=1)
    with pytest.raises(ValueError, match=r"\(B, n_heads, Tq, Tk\)"):
        plot.attention_heatmap(np.ones((3, 3, 3)))


def test_loss_curve_of_an_estimator_and_of_a_list(fitted, tmp_path):
    est, _ = fitted
    ax = plot.loss_curve(est)
    lines = ax.get_lines()
    assert [ln.get_label() for ln in lines] == ["training", "validation"]
    np.testing.assert_array_equal(lines[0].get_ydata(), est.loss_curve_)
    np.testing.assert_array_equal(lines[1].get_ydata(), est.validation_loss_curve_)
    assert ax.get_yscale() == "log" and ax.get_xlabel() == "epoch"
    assert _not_blank(_saved_pixels(ax, tmp_path / "loss.png"))
    ax2 = plot.loss_curve([3.0, -1.0, 0.5])
    assert len(ax2.get_lines()) == 1 and ax2.get_yscale() == "linear"
    with pytest.raises(ValueError, match="not fitted"):
        plot.loss_curve(attnx.AttentionRegressor())
    assert ax.get_ylabel() == "MSE loss" and ax2.get_ylabel() == "loss"


@pytest.mark.parametrize("make,label", [
    (lambda: attnx.AttentionClassifier(epochs=2, random_state=0), "cross-entropy loss"),
    (lambda: attnx.AttentionClassifier(epochs=2, random_state=0, options={"label_smoothing": 0.1}),
     "cross-entropy loss (label smoothing 0.1)"),
    (lambda: attnx.AttentionRegressor(epochs=2, loss="absolute_error", random_state=0),
     "MAE loss"),
    (lambda: attnx.AttentionRegressor(epochs=2, loss="huber", random_state=0), "Huber loss"),
])
def test_loss_curve_labels_the_loss_the_estimator_was_trained_on(make, label):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 5, 4))
    est = make()
    y = (X[:, 0, 0] > 0).astype(int) if "Classifier" in type(est).__name__ else X[:, 0, 0]
    ax = plot.loss_curve(est.fit(X, y))
    assert ax.get_ylabel() == label


def test_without_matplotlib_the_message_says_what_to_install(monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)   # import matplotlib -> ImportError
    with pytest.raises(ImportError, match=r"pip install attnx\[plot\]"):
        plot.attention_heatmap(np.ones((3, 3)))
    with pytest.raises(ImportError, match=r"pip install attnx\[plot\]"):
        plot.loss_curve([1.0, 0.5])


def test_forecast_plot(tmp_path):
    rng = np.random.default_rng(0)
    hist = np.sin(np.arange(60) / 4) + rng.normal(0, 0.1, 60)
    pred = np.sin(np.arange(60, 72) / 4)
    ax = plot.forecast(hist, pred, lower=pred - 0.3, upper=pred + 0.3, actual=pred + 0.05,
                       coverage=0.9)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["history", "90% interval", "actual", "forecast"]
    line = next(ln for ln in ax.lines if ln.get_label() == "forecast")
    np.testing.assert_allclose(line.get_ydata(), pred)
    np.testing.assert_allclose(line.get_xdata(), np.arange(60, 72))
    assert _not_blank(_saved_pixels(ax, tmp_path / "fc.png"))
    with pytest.raises(ValueError, match="both lower and upper"):
        plot.forecast(hist, pred, lower=pred)
    with pytest.raises(ValueError, match="actual must have one value per forecast step"):
        plot.forecast(hist, pred, actual=pred[:3])
    with pytest.raises(ValueError, match="index"):
        plot.forecast(hist, pred, index=np.arange(10))
    with pytest.raises(TypeError, match="history must be a 1-D series of numbers, got object"):
        plot.forecast(object(), pred)
    with pytest.raises(TypeError, match="upper must be a 1-D series of numbers, got str"):
        plot.forecast(hist, pred, lower=pred, upper="high")


def test_forecast_plot_reads_pandas_indexes():
    """A pandas history is drawn against its dates (the prediction's dates after it, or
    the next steps of the history's frequency), and lower / upper may be the columns of
    predict_interval's DataFrame."""
    pd = pytest.importorskip("pandas")
    import matplotlib.dates as mdates

    t = pd.date_range("2000-01-01", periods=60, freq="MS")
    future = pd.date_range("2005-01-01", periods=12, freq="MS")
    hist = pd.Series(np.sin(np.arange(60) / 4), index=t)
    pred = pd.Series(np.sin(np.arange(60, 72) / 4), index=future)
    iv = pd.DataFrame({"lower": pred - 0.3, "upper": pred + 0.3}, index=future)
    for p in (pred, pred.to_numpy()):
        ax = plot.forecast(hist, p, lower=iv["lower"], upper=iv["upper"])
        line = next(ln for ln in ax.lines if ln.get_label() == "forecast")
        got = pd.DatetimeIndex(mdates.num2date(mdates.date2num(line.get_xdata()))
                               ).tz_localize(None)
        assert list(got) == list(future)
        band = next(c for c in ax.collections if c.get_label() == "interval")
        ys = band.get_paths()[0].vertices[:, 1]
        assert ys.min() == pytest.approx(iv["lower"].min())
    # an index without a regular step: positions 0, 1, ...
    irregular = hist.set_axis(t.delete([5, 9]).append(pd.DatetimeIndex(["2010-01-01",
                                                                          "2011-01-01"])))
    ax = plot.forecast(irregular, pred.to_numpy())
    line = next(ln for ln in ax.lines if ln.get_label() == "forecast")
    np.testing.assert_array_equal(line.get_xdata(), np.arange(60, 72))
    with pytest.raises(TypeError, match=r"lower is the column name 'lower', not its values: "
                                        r"on pandas input predict_interval returns a DataFrame"):
        lo, hi = iv
        plot.forecast(hist, pred, lower=lo, upper=hi)


def test_attention_over_series(tmp_path):
    t = np.arange(40, dtype=float)
    series = np.sin(t / 3)
    w = np.zeros((2, 10, 10))
    w[:, :, 4] = 1.0                      # every query looks at key 4
    ax = plot.attention_over_series(series, w, patch_len=4, patch_stride=4)
    shade = ax.get_images()[0].get_array()[0]
    assert shade.shape == (40,)
    assert np.all(shade[16:20] == 1.0) and np.all(shade[:16] == 0) and np.all(shade[20:] == 0)
    assert _not_blank(_saved_pixels(ax, tmp_path / "att.png"))
    with pytest.raises(ValueError, match="cover"):
        plot.attention_over_series(series[:10], w, patch_len=4)
    with pytest.raises(ValueError, match="weights must be"):
        plot.attention_over_series(series, np.ones((1, 1, 1, 1)))
    with pytest.raises(ValueError, match="patch_len"):
        plot.attention_over_series(series, w, patch_len=0)


def _fresh_python(code):
    """Run code in a new interpreter that imports the attnx this suite tests."""
    import os
    import subprocess
    import tempfile
    parent = os.path.dirname(os.path.dirname(os.path.abspath(attnx.__file__)))
    env = dict(os.environ, PYTHONPATH=parent)
    return subprocess.run([sys.executable, "-c", code], cwd=tempfile.gettempdir(),
                          env=env, capture_output=True, text=True, timeout=120)


def test_attnx_plot_is_reachable_after_import_attnx_and_matplotlib_stays_unloaded():
    code = (
        "import sys\n"
        "import attnx\n"
        "assert 'matplotlib' not in sys.modules, 'import attnx imported matplotlib'\n"
        "assert 'attnx.plot' not in sys.modules, 'import attnx imported attnx.plot'\n"
        "f = attnx.plot.loss_curve\n"
        "assert callable(f) and f is sys.modules['attnx.plot'].loss_curve\n"
        "assert 'matplotlib' not in sys.modules, 'attnx.plot imported matplotlib'\n"
        "import matplotlib\n"
        "matplotlib.use('Agg')\n"
        "ax = attnx.plot.loss_curve([1.0, 0.5, 0.25])\n"
        "assert len(ax.get_lines()) == 1\n"
        "try:\n"
        "    attnx.no_such_name\n"
        "except AttributeError as exc:\n"
        "    assert 'no_such_name' in str(exc)\n"
        "else:\n"
        "    raise AssertionError('attnx.no_such_name did not raise AttributeError')\n"
        "print('ok')\n")
    r = _fresh_python(code)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
