"""Written by attnx at 36d8184 (flat layout): model files, pickles and their predictions."""
import pickle, warnings, sys
import numpy as np
import attnx
warnings.simplefilter("ignore")
out = sys.argv[1]
rng = np.random.default_rng(0)
X = rng.standard_normal((24, 12, 2)); yc = (X[:, :, 0].sum(1) > 0).astype(int)
ests = {"clf": attnx.TransformerClassifier(epochs=2, d_model=8, n_heads=2, n_layers=1, random_state=0).fit(X, yc),
        "reg": attnx.AttentionRegressor(epochs=2, random_state=0).fit(X, X.sum((1, 2))),
        "bare": attnx.TransformerRegressor(epochs=2, d_model=None, n_layers=1, n_heads=2, random_state=0).fit(X, X)}
ys = np.sin(np.arange(80) * 2 * np.pi / 12) + 0.02 * np.arange(80)
ests["fc"] = attnx.TransformerForecaster(horizon=4, epochs=2, d_model=8, n_heads=2, n_layers=1, random_state=0).fit(ys)
ests["fc_auto"] = attnx.TransformerForecaster(horizon=4, method="auto").fit(ys)
models = {"seq": attnx.SequenceModel(2, 8, 2, 1, 3, pooling="mean", random_state=1),
          "mha": attnx.MultiHeadAttention(8, 2, random_state=2),
          "opt": None}
preds = {}
for k, e in ests.items():
    e.save(f"{out}/{k}.safetensors")
    with open(f"{out}/{k}.pkl", "wb") as f:
        pickle.dump(e, f)
    preds[k] = e.predict_proba(X) if k == "clf" else (e.predict() if k.startswith("fc") else e.predict(X))
    if k == "fc":
        lo, hi = e.predict_interval(coverage=0.9); preds["fc_lo"], preds["fc_hi"] = lo, hi
x8 = rng.standard_normal((2, 5, 8)); x2 = rng.standard_normal((2, 5, 2))
for k in ("seq", "mha"):
    m = models[k]
    with open(f"{out}/{k}.pkl", "wb") as f:
        pickle.dump(m, f)
    preds[k] = m.forward((x2 if k == "seq" else x8).astype(m.dtype), grad=False)
np.savez(f"{out}/predictions.npz", X=X, x8=x8, x2=x2, **preds)
print("ok", attnx.__file__)
