import inspect, json, sys, numpy as np, attnx
out = {}
for c in [attnx.AttentionRegressor, attnx.TransformerRegressor, attnx.AttentionClassifier, attnx.TransformerClassifier, attnx.TransformerForecaster]:
    out[c.__name__] = {n: [repr(p.default), p.kind == p.POSITIONAL_OR_KEYWORD]
                       for n, p in inspect.signature(c).parameters.items()}
json.dump(out, open(sys.argv[1], "w"), indent=1, sort_keys=True)
