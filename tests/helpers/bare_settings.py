"""Settings of the bare X -> Y transformer (no norm, positions, dropout, schedule, clipping
or standardisation; one token per step), written out for tests that train it."""

#: TransformerRegressor's (tests pass n_heads)
BARE = {
    "d_model": None, "positional": "none", "norm": None, "dropout": 0.0,
    "epochs": 100, "batch_size": 32, "n_iter_no_change": 10,
    "lr_schedule": "constant", "warmup": 0.1, "max_grad_norm": None, "decay": "all",
    "standardize": False, "patch_len": 1, "distributed": "exact",
    "stem": None, "layout": "ntc", "missing": "error", "instance_norm": None,
    "instance_affine": False, "tokenizer": "patch", "pretrain": None, "pretrain_epochs": None,
}
#: TransformerClassifier's: the same without label smoothing
BARE_CLS = {**BARE, "label_smoothing": 0.0}
