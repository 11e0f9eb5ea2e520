"""Settings of the bare X -> Y transformer (no norm, positions, dropout, schedule, clipping
or standardisation; one token per step), written out for tests that train it."""

#: TransformerRegressor's (tests pass n_heads)
BARE = {
    "d_model": None, "positional": "none", "norm": None, "dropout": 0.0,
    "epochs": 100, "batch_size": 32, "patch_len": 1, "stem": None, "layout": "ntc",
    "missing": "error", "instance_norm": None, "tokenizer": "patch", "pretrain": None,
    "options": {"n_iter_no_change": 10, "lr_schedule": "constant", "warmup": 0.1,
                "max_grad_norm": None, "decay": "all", "standardize": False,
                "distributed": "exact", "instance_affine": False, "pretrain_epochs": None},
}
#: TransformerClassifier's: the same without label smoothing
BARE_CLS = {**BARE, "options": {**BARE["options"], "label_smoothing": 0.0}}


def merged(*settings, **kw):
    """The settings (dicts of constructor keywords) one over the other, left to right,
    their options merged key by key rather than replaced."""
    out, options = {}, {}
    for s in settings + (kw,):
        s = dict(s)
        options.update(s.pop("options", None) or {})
        out.update(s)
    return {**out, "options": options}
