"""Fit time of TransformerClassifier/Regressor with and without pretrain="masked" on
full training splits, at one thread, the two fits alternating (ROUNDS rounds, seed 0)
so that the load of other processes falls on both alike.

    python benchmarks/pretrain_time.py --sets ACSF1,UnitTest,JapaneseVowels,Coffee,Covid3Month

Prints a markdown table (median and min seconds per fit, and the median ratio)."""
import argparse
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", default="ACSF1,UnitTest,JapaneseVowels,Coffee,Covid3Month")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    sys.path.insert(0, str(HERE))
    import accuracy as acc
    import attnx
    attnx.set_num_threads(1)
    print("| set | fit s, no pretrain (median / min) | fit s, pretrain='masked' (median / min) "
          "| ratio of medians |")
    print("|---|---|---|---|")
    for name in args.sets.split(","):
        d = acc.LOADERS[name]()
        cls = attnx.TransformerClassifier if d.task == "classify" else attnx.TransformerRegressor
        X = acc.for_attnx(d.Xtr)
        times = {None: [], "masked": []}
        for _ in range(args.rounds):
            for pre in times:
                est = cls(random_state=0, pretrain=pre)
                t0 = time.perf_counter()
                est.fit(X, d.ytr)
                times[pre].append(time.perf_counter() - t0)
        a, b = statistics.median(times[None]), statistics.median(times["masked"])
        print(f"| {name} | {a:.2f} / {min(times[None]):.2f} | {b:.2f} / "
              f"{min(times['masked']):.2f} | {b / a:.2f} |", flush=True)


if __name__ == "__main__":
    main()
