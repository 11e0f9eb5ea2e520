"""The model files of this folder: model file format version 2 as the estimators wrote it
before the fit plan (no plan_: the choices in attributes of their own, as attnx 0.1.0),
written by the checkout at commit e5fd6c9 with `python make.py OUT_DIR`, with their
predictions (predictions.npz: name -> output, name/x the inputs, ragged ones
concatenated with name/lengths). tests/test_fit_plan.py loads them."""
import sys
import numpy as np
import attnx

out = sys.argv[1]
SMALL = dict(n_heads=2, n_layers=1, d_model=8, batch_size=8, epochs=2, random_state=0)
rng = np.random.default_rng(0)
cases = {}
# PPV tokens (fixed windows), standardized
x = rng.normal(size=(16, 20, 1)); y = np.arange(16) % 2
cases["cls_ppv"] = (attnx.TransformerClassifier(**SMALL, tokenizer="ppv").fit(x, y), x)
# ragged short univariate: resampled, short stem, time shifts
xr = [rng.normal(size=(15 + i, 1)) for i in range(16)]
cases["cls_short_ragged"] = (attnx.TransformerClassifier(**SMALL).fit(xr, y), xr)
# ragged PPV tokens with own-length windows (a missing step keeps them from resampling)
xo = [rng.normal(size=(14 + i // 2, 1)) for i in range(16)]
xo[0][5, 0] = np.nan
cases["cls_ppv_own"] = (attnx.TransformerClassifier(**SMALL, missing="mask", tokenizer="ppv").fit(xo, y), xo)
# patches with RevIN on a regressor
xp = rng.normal(size=(16, 24, 2)); yp = xp[:, -1, :] + 0.1
cases["reg_patch_revin"] = (attnx.TransformerRegressor(**SMALL, patch_len=3,
                                                      instance_norm="revin").fit(xp, yp), xp)
# the bare X -> Y network
xb = rng.normal(size=(8, 6, 4))
cases["reg_bare"] = (attnx.AttentionRegressor(n_heads=2, epochs=2, random_state=0).fit(
    xb, np.roll(xb, 1, axis=1)), xb)
# per-position classification labels
yl = (xp[:, :, 0] > 0).astype(int)
cases["cls_per_position"] = (attnx.AttentionClassifier(**{k: v for k, v in SMALL.items()
                                                          if k != "n_layers"}).fit(xp, yl), xp)
preds = {}
for name, (est, X) in cases.items():
    est.save(f"{out}/{name}.safetensors")
    p = est.predict_proba(X) if hasattr(est, "predict_proba") else est.predict(X)
    if isinstance(p, list):
        p = np.concatenate(p)
    preds[name] = np.asarray(p)
    preds[name + "/x"] = np.concatenate(X) if isinstance(X, list) else X
    if isinstance(X, list):
        preds[name + "/lengths"] = np.array([len(a) for a in X])
np.savez(f"{out}/predictions.npz", **preds)
