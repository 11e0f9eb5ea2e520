"""The estimators' constructor defaults of the previous release, for tests written against them."""
from attnx.estimators._hyper import LEGACY_DEFAULTS

#: everything except n_heads (tests pass it)
OLD = {k: v for k, v in LEGACY_DEFAULTS.items() if k not in ("n_heads", "label_smoothing")}
OLD_CLS = {k: v for k, v in LEGACY_DEFAULTS.items() if k != "n_heads"}
