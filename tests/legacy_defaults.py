"""The estimators' constructor defaults of attnx 0.2, for tests written against them."""
from attnx._hyper import DEFAULTS_0_2

#: everything except n_heads (tests pass it)
OLD = {k: v for k, v in DEFAULTS_0_2.items() if k not in ("n_heads", "label_smoothing")}
OLD_CLS = {k: v for k, v in DEFAULTS_0_2.items() if k != "n_heads"}
