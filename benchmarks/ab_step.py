"""Interleaved before/after timing of one training step in two attnx trees.

--model attention: a MultiHeadAttention layer; transformer: a 2-layer Transformer;
sequence: a 2-layer pre-norm SequenceModel with mean pooling; sequence-stem: the same
with a convolutional stem and the class token (the estimators' ends).

Each round runs one worker process per tree (alternating which goes first), each timing
--steps training steps (forward, MSE, backward, AdamW) in thread CPU time after warm-up;
the table gives per tree the median over rounds of the per-round medians, and the median
of the per-round ratios (before / after: above 1 means the second tree is faster).
Alternating short turns is what keeps a shared, noisy machine's drift out of the ratio.

  python benchmarks/ab_step.py --trees /work/main,/work/wt51 --shape 32,128,64,8
  python benchmarks/ab_step.py --trees before,after --model sequence --shape 32,64,64,4
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

WORKER = r'''
import json, sys, time, numpy as np, attnx
nb, t, d, h = (int(v) for v in sys.argv[1].split(","))
steps, causal, model = int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
rng = np.random.default_rng(0)
x = rng.standard_normal((nb, t, d)).astype(np.float32)
if model == "attention":
    layer = attnx.MultiHeadAttention(d, h, dtype=np.float32, causal=causal, random_state=0,
                                     input_grad=False)
elif model == "transformer":
    layer = attnx.Transformer(d, h, 2, dtype=np.float32, causal=causal, random_state=0)
else:
    extra = dict(stem=((3, 2),), pooling="cls") if model == "sequence-stem" else {}
    layer = attnx.SequenceModel(d, d, h, 2, 4, norm="pre", pooling=extra.pop("pooling", "mean"),
                                positional="sinusoidal", dtype=np.float32, random_state=0,
                                **extra)
    layer.input_grad = False
opt = attnx.AdamW(layer.params)
y = layer.forward(x)
tg = rng.standard_normal(y.shape).astype(np.float32)
dy = np.empty_like(y)
ts = []
for i in range(steps + 3):
    t0 = time.thread_time()
    layer.forward(x, out=y); attnx.mse_loss(y, tg, out=dy); layer.backward(dy)
    opt.step(layer.grads)
    if i >= 3:
        ts.append(time.thread_time() - t0)
print(json.dumps(float(np.median(ts))))
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", required=True, help="before,after: PYTHONPATH of each")
    ap.add_argument("--shape", default="32,128,64,8", help="batch,T,d_model,heads")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--model", default="attention",
                    choices=("attention", "transformer", "sequence", "sequence-stem"))
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    trees = args.trees.split(",")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    res = {tr: [] for tr in trees}
    for r in range(args.rounds):
        for tr in (trees if r % 2 == 0 else trees[::-1]):
            out = subprocess.run([sys.executable, "-c", WORKER, args.shape, str(args.steps),
                                  "1" if args.causal else "0", args.model], env=dict(env, PYTHONPATH=tr),
                                 capture_output=True, text=True, check=True, cwd="/")
            res[tr].append(json.loads(out.stdout.strip().splitlines()[-1]))
    a, b = (np.array(res[t]) for t in trees)
    print(f"{args.model} {args.shape}{' causal' if args.causal else ''}: "
          + "  ".join(f"{t} {np.median(res[t]) * 1e3:.2f} ms" for t in trees)
          + f"  ratio {np.median(a / b):.3f} (rounds {args.rounds} x {args.steps} steps)")


if __name__ == "__main__":
    main()
