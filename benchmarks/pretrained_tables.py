"""The pretrained forecaster (attnx/forecasting/_pretrained_forecaster.py) next to the classical
peers: runs only the attnx_pretrained peer of benchmarks/forecasting.py on a panel and
adds its rows to a stored result of that script on the same splits (the classical
peers are deterministic, so their stored rows are what a rerun gives; the stored
attnx_auto rows are of the commit that wrote them, see its meta). Also times the
zero-shot predict alone (attnx.forecasting._pretrained_forecaster.forecast, the weights already
loaded) per series.

  OMP_NUM_THREADS=1 python benchmarks/pretrained_tables.py dev
  OMP_NUM_THREADS=1 python benchmarks/pretrained_tables.py synth 0
  OMP_NUM_THREADS=1 python benchmarks/pretrained_tables.py synth 1

writes benchmarks/results/forecasting_pretrained_{dev,synth_seed0,synth_seed1}.{md,json}
(seeds 2 and 3 too; seed 3's stored file has the classical peers only, no attnx_auto).
A last argument ft=N fine-tunes the network on each series for N epochs
(fit(y) with epochs=N; files ..._ftN); net fits the network alone (blend=False; files
..._net), without the exponential-smoothing half of the zero-shot forecast.
"""
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import forecasting as fb  # noqa: E402

STORED = {"dev": "forecasting_dev_auto", "synth0": "forecasting_synth",
          "synth1": "forecasting_synth_seed1", "synth2": "forecasting_synth_seed2",
          "synth3": "forecasting_synth_seed3_classical"}


def main(argv):
    epochs, blend = 0, True
    if argv and argv[-1] == "net":
        argv.pop()
        blend = False
    if argv and argv[-1].startswith("ft="):
        epochs = int(argv.pop()[3:])
    kind = argv[0]
    seed = int(argv[1]) if len(argv) > 1 else 0
    key = "dev" if kind == "dev" else f"synth{seed}"
    out = os.path.join(HERE, "results", "forecasting_pretrained_" +
                       ("dev" if kind == "dev" else f"synth_seed{seed}")
                       + (f"_ft{epochs}" if epochs else "") + ("" if blend else "_net"))
    if epochs or not blend:
        def tuned(y, h, m):
            import attnx
            est = attnx.TransformerForecaster.pretrained(horizon=h, season=m, blend=blend,
                                                         epochs=epochs).fit(y)
            lo, hi = est.predict_interval(coverage=fb.LEVEL / 100)
            return est.predict(), lo, hi
        fb.attnx_pretrained = tuned
    with open(os.path.join(HERE, "results", STORED[key] + ".json")) as f:
        stored = json.load(f)
    fb.PANEL_SEED = seed
    from attnx.forecasting import _pretrained_forecaster as pf
    pf.load_network()
    keep = ("seasonal_naive",) + fb.CLASSICAL + ("attnx_auto",)
    results, times = [], []
    for r in stored["results"]:
        ds = fb.load_set(r["set"])
        assert [len(s) for s in ds.series] == r["lengths"], r["set"]
        new = fb.run_set(ds, ["attnx_pretrained"], 0, print)
        peers = {p: e for p, e in r["peers"].items() if p in keep}
        peers["attnx_pretrained"] = new["peers"]["attnx_pretrained"]
        new["peers"] = peers
        results.append(new)
        for y in ds.series:
            t0 = time.perf_counter()
            pf.forecast(y[:-ds.horizon], ds.horizon, season=ds.season, blend=blend)
            times.append(time.perf_counter() - t0)
    meta = dict(stored["meta"])
    meta["stored_from"] = STORED[key] + ".json (" + stored["meta"]["date"] + ")"
    meta["targets"] = {p: fb.targets(results, p) for p in ("attnx_auto", "attnx_pretrained")}
    meta["zero_shot_predict_seconds"] = {"mean": float(np.mean(times)),
                                         "median": float(np.median(times)),
                                         "max": float(np.max(times)), "n": len(times)}
    meta["pretrained"] = pf.load_config()
    meta["pretrained"].pop("loss_curve", None)
    meta["pretrained"]["fine_tune_epochs"] = epochs
    meta["pretrained"]["blend"] = blend
    meta["pretrained"]["net_weight"] = pf.NET_WEIGHT if blend else 1.0
    with open(out + ".json", "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)
    text = fb.markdown(results, meta)
    z = meta["zero_shot_predict_seconds"]
    text += (f"\nZero-shot predict alone (attnx.forecasting._pretrained_forecaster.forecast, weights "
             f"loaded): mean {1e3 * z['mean']:.2f} ms, median {1e3 * z['median']:.2f} ms, "
             f"max {1e3 * z['max']:.2f} ms per series over {z['n']} series. Classical and "
             f"attnx_auto rows: {meta['stored_from']}; attnx_pretrained rows: this run.\n")
    with open(out + ".md", "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main(sys.argv[1:])
