"""Interleaved before/after wall time of default estimator fits in two attnx trees.

Each round runs one fresh worker process per tree (alternating which goes first) that
fits each case with its defaults (no thread variables set: what a user gets) and
prints the fit's wall time; the table gives per tree and case the median over rounds
and the median of the per-round ratios (before / after: above 1 means the second tree
is faster). Only default constructors are used, so trees whose parameter spellings
differ compare alike.

  python benchmarks/ab_fit.py --trees /work/before,/work/main --rounds 5
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

WORKER = r'''
import json, time, numpy as np, attnx
from attnx.datasets import load_japanese_vowels
Xtr, ytr = load_japanese_vowels("TRAIN")
rng = np.random.default_rng(0)
Xr = rng.standard_normal((256, 48, 3)).astype(np.float32)
yr = Xr[:, :, 0].mean(axis=1) + 0.5 * Xr[:, -6:, 1].mean(axis=1)
cases = {
    "TransformerClassifier, JapaneseVowels (270 ragged, 12 ch)":
        lambda: attnx.TransformerClassifier(random_state=0).fit(Xtr, ytr),
    "TransformerRegressor, 256 x 48 x 3 generated":
        lambda: attnx.TransformerRegressor(random_state=0).fit(Xr, yr),
    "AttentionRegressor, 256 x 48 x 3 generated":
        lambda: attnx.AttentionRegressor(random_state=0).fit(Xr, yr),
}
out = {}
for name, fit in cases.items():
    t0 = time.perf_counter()
    fit()
    out[name] = time.perf_counter() - t0
print(json.dumps(out))
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", required=True, help="before,after: PYTHONPATH of each")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    trees = args.trees.split(",")
    env = {k: v for k, v in os.environ.items()
           if not k.endswith("_NUM_THREADS") and k != "OMP_PROC_BIND"}
    res = {tr: [] for tr in trees}
    for r in range(args.rounds):
        for tr in (trees if r % 2 == 0 else trees[::-1]):
            out = subprocess.run([sys.executable, "-c", WORKER], env=dict(env, PYTHONPATH=tr),
                                 capture_output=True, text=True, check=True, cwd="/")
            res[tr].append(json.loads(out.stdout.strip().splitlines()[-1]))
    for case in res[trees[0]][0]:
        a = np.array([d[case] for d in res[trees[0]]])
        b = np.array([d[case] for d in res[trees[1]]])
        print(f"{case}: {trees[0]} {np.median(a):.2f} s  {trees[1]} {np.median(b):.2f} s  "
              f"ratio {np.median(a / b):.3f} (rounds {args.rounds})")


if __name__ == "__main__":
    main()
