"""Model files carry a format version: a file saved now reloads and predicts the same bits
(classifier, regressor, forecaster); a file of a version this attnx does not read, or
without one, is refused with a ValueError naming the file, the version and those read."""
import re

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

import attnx
from attnx.estimators import _model_file

SMALL = dict(d_model=8, n_heads=2, n_layers=1, epochs=3, batch_size=8, random_state=0)


def _data(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(40, 10, 3))
    return X, (X[:, :, 0].mean(1) > 0).astype(int), X[:, :, 1].sum(1)


def _forecaster():
    t = np.arange(120)
    y = 5 + np.sin(2 * np.pi * t / 12) + 0.2 * np.random.default_rng(1).normal(size=120)
    return attnx.TransformerForecaster(6, d_model=8, n_heads=2, n_layers=1, steps=30,
                                       random_state=0, method="network").fit(y)


@pytest.fixture(scope="module")
def fitted():
    X, yc, yr = _data()
    return X, {"classifier": attnx.TransformerClassifier(**SMALL).fit(X, yc),
               "regressor": attnx.TransformerRegressor(**SMALL).fit(X, yr),
               "forecaster": _forecaster()}


def _outputs(kind, est, X):
    if kind == "classifier":
        return [est.predict_proba(X), est.predict(X)]
    if kind == "regressor":
        return [est.predict(X)]
    return [est.predict(), *est.predict_interval(coverage=0.8)]


def _metadata(path):
    with safe_open(path, framework="np") as f:
        return dict(f.metadata())


def _rewrite(src, dst, change):
    """src with its metadata changed by `change` (and a checksum that still matches)."""
    arrays, meta = load_file(src), change(_metadata(src))
    meta["checksum"] = _model_file._checksum(meta["config"], arrays)
    save_file(arrays, dst, metadata=meta)
    return dst


@pytest.mark.parametrize("kind", ["classifier", "regressor", "forecaster"])
def test_a_saved_file_carries_the_version_and_predicts_the_same_bits(kind, fitted, tmp_path):
    X, models = fitted
    est = models[kind]
    est.save(tmp_path / "m.safetensors")
    assert _metadata(tmp_path / "m.safetensors")["format_version"] == str(
        _model_file.FORMAT_VERSION)
    back = attnx.load(tmp_path / "m.safetensors")
    assert type(back) is type(est)
    for got, want in zip(_outputs(kind, back, X), _outputs(kind, est, X)):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kind", ["classifier", "regressor", "forecaster"])
@pytest.mark.parametrize("found", [str(_model_file.FORMAT_VERSION + 1), "99", "2.1", "one", ""])
def test_an_unknown_version_is_refused_naming_file_version_and_supported(kind, found, fitted,
                                                                          tmp_path):
    est = fitted[1][kind]
    est.save(tmp_path / "m.safetensors")
    p = _rewrite(tmp_path / "m.safetensors", tmp_path / f"{kind}_v.safetensors",
                 lambda m: {**m, "format_version": found, "attnx_version": "9.9.9"})
    supported = ", ".join(map(str, _model_file.SUPPORTED_VERSIONS))
    with pytest.raises(ValueError) as info:
        attnx.load(p)
    msg = str(info.value)
    assert msg.startswith(f"{p} has model file format version {found!r}, which is not "
                          f"supported: this attnx ({attnx.__version__}) reads model file "
                          f"format version")
    assert re.search(rf"versions? {supported} \(written by attnx 9\.9\.9", msg)
    assert ("a newer format than this attnx knows" in msg) == found.isdigit()


@pytest.mark.parametrize("kind", ["classifier", "forecaster"])
def test_a_file_without_a_version_is_refused(kind, fitted, tmp_path):
    fitted[1][kind].save(tmp_path / "m.safetensors")
    p = _rewrite(tmp_path / "m.safetensors", tmp_path / "none.safetensors",
                 lambda m: {k: v for k, v in m.items() if k != "format_version"})
    supported = ", ".join(map(str, _model_file.SUPPORTED_VERSIONS))
    with pytest.raises(ValueError, match=rf"^{re.escape(str(p))} has no model file format "
                                         rf"version .*reads model file format versions? "
                                         rf"{supported}$"):
        attnx.load(p)


def test_the_pretrained_forecaster_file_is_of_a_supported_version():
    from attnx.forecasting import _pretrained_forecaster
    meta = _metadata(_pretrained_forecaster.WEIGHTS)
    assert meta["format_version"] in {str(v) for v in _model_file.SUPPORTED_VERSIONS}


def test_the_pretrained_forecaster_file_loads_with_every_parameter_of_today():
    # the file shipped in the package must load as written: a refusal here would leave
    # the pretrained candidate out of every forecast
    from attnx.forecasting import _pretrained_forecaster
    net = _pretrained_forecaster.load_network(_pretrained_forecaster.WEIGHTS)
    assert set(net.get_params()) == set(attnx.TransformerRegressor().get_params())


def test_a_pretrained_file_that_does_not_load_raises_instead_of_dropping_the_candidate(
        tmp_path):
    from attnx.forecasting import _pretrained_forecaster
    p = _rewrite(_pretrained_forecaster.WEIGHTS, tmp_path / "bad.safetensors",
                 lambda m: {k: v for k, v in m.items() if k != "format_version"})
    with pytest.raises(RuntimeError, match="pretrained forecaster's weights do not load"):
        _pretrained_forecaster.load_network(p)


@pytest.mark.parametrize("kind", ["classifier", "regressor", "forecaster"])
def test_a_file_of_the_previous_format_is_refused_asking_for_a_refit(kind, fitted, tmp_path):
    """Format 2 stored the parameters before options: refused (no conversion), naming the
    version and the attnx that wrote it, and saying to refit."""
    est = fitted[1][kind]
    est.save(tmp_path / "m.safetensors")
    p = _rewrite(tmp_path / "m.safetensors", tmp_path / "old.safetensors",
                 lambda m: {**m, "format_version": "2", "attnx_version": "0.1.0"})
    with pytest.raises(ValueError, match=r"format version '2'.*written by attnx 0\.1\.0.*"
                                         r"refit the model"):
        attnx.load(p)
