"""A fixed panel of fitted models whose predictions must survive a redesign unchanged.

    python benchmarks/prediction_panel.py --out benchmarks/results/prediction_panel.npz
    python benchmarks/prediction_panel.py --check benchmarks/results/prediction_panel.npz

Every case fits a default-constructed model (plus the one setting the case names) with a
fixed seed on generated data, at one BLAS/OpenMP thread, and records its predictions
(probabilities for classifiers, intervals and quantiles for forecasters). `--check` refits
every case and reports, per case, whether the predictions are bit-identical to the file's
and the largest absolute difference; it exits 1 when a case differs by more than
--tolerance (default 0: bit for bit). `--save-dir` also writes each fitted model and
checks that the reloaded file predicts identically.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np
from threadpoolctl import threadpool_limits

import attnx


def _seq_data(seed, n=96, t=24, f=3, ragged=False):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, t, f))
    x[:, :, 0] += np.sin(np.arange(t) / 3.0)[None] * rng.normal(size=(n, 1))
    target = x[:, :, 0].mean(axis=1) + 0.5 * x[:, -4:, 1 % f].mean(axis=1)
    if ragged:
        x = [x[i, : t // 2 + i % (t // 2)] for i in range(n)]
    return x, target


def _labels(target):
    return np.where(target > np.median(target), "up", "down")


def _series(seed, length=144, season=12):
    rng = np.random.default_rng(seed)
    t = np.arange(length)
    return (10 + 0.02 * t + 2 * np.sin(2 * np.pi * t / season)
            + np.cumsum(rng.normal(0, 0.15, length)) + rng.normal(0, 0.3, length))


def _classifier(**options):
    def run(seed):
        kw = dict(options)
        x, target = _seq_data(seed, ragged=kw.pop("_ragged", False), f=kw.pop("_f", 3))
        est = attnx.TransformerClassifier(random_state=seed, **kw).fit(x, _labels(target))
        return est, {"proba": est.predict_proba(x)}
    return run


def _regressor(**options):
    def run(seed):
        kw = dict(options)
        per_position = kw.pop("_per_position", False)
        x, target = _seq_data(seed, ragged=kw.pop("_ragged", False))
        y = np.cumsum(x[:, :, :1], axis=1) if per_position else target
        if kw.pop("_same_shape", False):
            y = np.roll(x, 1, axis=1)
        est = attnx.TransformerRegressor(random_state=seed, **kw).fit(x, y)
        return est, {"pred": np.asarray(est.predict(x))}
    return run


def _forecaster(**options):
    def run(seed):
        kw = dict(options)
        y = [_series(seed + i) for i in range(kw.pop("_n_series", 1))]
        y = y[0] if len(y) == 1 else y
        est = attnx.TransformerForecaster(horizon=12, random_state=seed, **kw).fit(y)
        interval = est.predict_interval(coverage=0.8)   # (lower, upper), one per series
        return est, {"pred": np.asarray(est.predict()), "interval": np.asarray(interval)}
    return run


# name -> a function of the seed returning (fitted model, {output name: array})
CASES = {
    "cls_multivariate": _classifier(),
    "cls_univariate_short": _classifier(_f=1),
    "cls_ragged": _classifier(_ragged=True),
    "cls_float64": _classifier(dtype="float64"),
    "cls_tokens_ppv": _classifier(_f=1, tokenizer="ppv"),
    "cls_select": _classifier(_f=1, tokenizer="select"),
    "cls_instance_norm": _classifier(instance_norm="input"),
    "cls_pretrain": _classifier(pretrain="masked"),
    "reg_pooled": _regressor(),
    "reg_ragged": _regressor(_ragged=True),
    "reg_per_position": _regressor(_per_position=True),
    "reg_same_shape": _regressor(_same_shape=True),
    "reg_quantiles": _regressor(loss="pinball", options={"quantiles": (0.9,)}),
    "reg_revin": _regressor(_same_shape=True, instance_norm="revin"),
    "reg_huber_float64": _regressor(loss="huber", dtype="float64"),
    "fc_auto": _forecaster(),
    "fc_network": _forecaster(method="network"),
    "fc_theta": _forecaster(method="theta"),
    "fc_seasonal_naive": _forecaster(method="seasonal_naive12"),
    "fc_pretrained": _forecaster(method="pretrained"),
    "fc_ets": _forecaster(method="ets"),
    "fc_arima": _forecaster(method="arima"),
    "fc_panel_auto": _forecaster(_n_series=3),
}


def run_panel(names, seed, save_dir=None):
    out, times = {}, {}
    for name in names:
        t0 = time.perf_counter()
        model, preds = CASES[name](seed)
        times[name] = time.perf_counter() - t0
        for k, v in preds.items():
            out[f"{name}/{k}"] = np.asarray(v, dtype=np.float64)
        if save_dir is not None:
            path = os.path.join(save_dir, f"{name}.safetensors")
            model.save(path)
            back = attnx.load(path)
            ok = _reload_matches(model, back)
            print(f"  {name}: reloaded file predicts {'identically' if ok else 'DIFFERENTLY'}")
            if not ok:
                out[f"{name}/reload_mismatch"] = np.ones(1)
        print(f"{name}: {times[name]:.1f} s", flush=True)
    return out


def _reload_matches(model, back):
    if isinstance(model, attnx.TransformerForecaster):
        return np.array_equal(np.asarray(model.predict()), np.asarray(back.predict()))
    x, _ = _seq_data(0, ragged=False, f=getattr(model, "n_features_in_", 3))
    if hasattr(model, "predict_proba"):
        return np.array_equal(model.predict_proba(x), back.predict_proba(x))
    return np.array_equal(np.asarray(model.predict(x)), np.asarray(back.predict(x)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the panel's predictions to this .npz")
    ap.add_argument("--check", help="refit and compare with this .npz")
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated case names")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tolerance", type=float, default=0.0)
    ap.add_argument("--save-dir", action="store_true",
                    help="also save and reload every model (in a temporary folder)")
    a = ap.parse_args(argv)
    names = [c for c in a.cases.split(",") if c]
    unknown = sorted(set(names) - set(CASES))
    if unknown:
        ap.error(f"unknown cases {unknown}; known: {sorted(CASES)}")
    with threadpool_limits(1), tempfile.TemporaryDirectory() as tmp:
        got = run_panel(names, a.seed, tmp if a.save_dir else None)
    got["meta/attnx_version"] = np.array([0.0])
    if a.out:
        np.savez_compressed(a.out, **got)
        print(f"wrote {len(got) - 1} arrays to {a.out}")
    if a.check:
        ref = np.load(a.check)
        bad = 0
        for key in sorted(k for k in got if not k.startswith("meta/")):
            if key not in ref:
                print(f"{key}: not in {a.check}")
                continue
            r, g = ref[key], got[key]
            if r.shape != g.shape:
                print(f"{key}: shape {g.shape} vs {r.shape}")
                bad += 1
                continue
            diff = float(np.max(np.abs(r - g))) if r.size else 0.0
            same = np.array_equal(r, g)
            print(f"{key}: {'bit-identical' if same else f'max |diff| {diff:.3g}'}")
            bad += diff > a.tolerance or (a.tolerance == 0 and not same)
        print(f"{bad} of {len(got) - 1} arrays differ beyond the tolerance {a.tolerance}")
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
