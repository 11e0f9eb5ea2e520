"""Central finite differences for float64 gradient checks."""
import numpy as np


def check_grads(loss_fn, arrays, analytic, rng, n_probe=40, h=1e-6, tol=1e-6):
    """Compare analytic gradients with central differences.

    loss_fn(): recomputes the scalar loss from the current contents of `arrays`.
    arrays: name -> array perturbed in place (model params or inputs).
    analytic: name -> gradient array of the same shape.
    Probes up to n_probe random entries per array; returns the worst relative error.
    """
    worst = 0.0
    overall = max(np.max(np.abs(np.asarray(g))) for g in analytic.values())
    for name, arr in arrays.items():
        g = np.asarray(analytic[name])
        assert g.shape == arr.shape, (name, g.shape, arr.shape)
        flat_idx = rng.choice(arr.size, size=min(n_probe, arr.size), replace=False)
        # floor: a gradient that is exactly zero (bk under softmax) meets FD round-off,
        # so near-zero arrays are judged on the scale of the model's other gradients
        scale = max(np.max(np.abs(g)), 1e-2 * overall, 1e-6)
        for fi in flat_idx:
            idx = np.unravel_index(fi, arr.shape)
            old = arr[idx]
            arr[idx] = old + h
            lp = loss_fn()
            arr[idx] = old - h
            lm = loss_fn()
            arr[idx] = old
            num = (lp - lm) / (2 * h)
            err = abs(num - g[idx]) / scale
            worst = max(worst, err)
            assert err < tol, f"{name}{idx}: numeric {num:.10g} vs analytic {g[idx]:.10g}"
    return worst
