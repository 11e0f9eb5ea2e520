"""A small workload for valgrind memcheck (see README, "Checking memory safety").

Runs every kernel family once: dense and blocked attention (causal, mask,
cross, rope, bias), the transformer, AdamW, MSE, in float32 and float64.
"""
import numpy as np

import attnx

rng = np.random.default_rng(0)
for dtype in (np.float32, np.float64):
    for attention in ("dense", "blocked"):
        layer = attnx.MultiHeadAttention(16, 4, causal=True, bias=True, rope=True, dtype=dtype,
                                         attention=attention, random_state=0)
        x = rng.normal(size=(2, 70, 16)).astype(dtype)
        c = rng.normal(size=(2, 90, 16)).astype(dtype)
        m = rng.random((2, 90)) < 0.3
        y = layer.forward(x, c, m)
        layer.backward(np.ones_like(y))
        layer.attention_weights(sample=1, head=2)
    model = attnx.Transformer(16, 4, n_layers=2, dtype=dtype, random_state=0)
    opt = attnx.AdamW(model.params)
    y = model.forward(x)
    loss, dy = attnx.mse_loss(y, x)
    model.backward(dy)
    opt.step(model.grads)
    model.forward(x, grad=False)
print("memcheck workload done")
