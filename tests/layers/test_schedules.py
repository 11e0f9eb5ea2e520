"""Learning-rate schedules and gradient clipping: PyTorch's schedulers as oracles,
plus the properties each schedule promises."""
import math

import numpy as np
import pytest

import attnx
from attnx.layers import schedules


def _opt(lr=1e-3):
    return attnx.AdamW({"w": np.zeros(3)}, lr=lr)


def _ours(make, n):
    opt = _opt()
    s = make(opt)
    out = []
    for _ in range(n):
        out.append(opt.lr)
        s.step()
    return np.array(out)


def _theirs(torch, make, n):
    p = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
    opt = torch.optim.AdamW([p], lr=1e-3)
    s = make(torch, opt)
    out = []
    for i in range(n):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        if i < n - 1:   # the last step is never read (and OneCycleLR refuses a step
            s.step()    # past total_steps)
    return np.array(out)


@pytest.mark.parametrize("total,warmup,ratio", [(100, 10, 0.0), (57, 5, 0.1), (40, 1, 0.0)])
def test_warmup_cosine_matches_torch(torch, total, warmup, ratio):
    ours = _ours(lambda o: schedules.WarmupCosine(o, total, warmup=warmup, min_lr_ratio=ratio),
                 total)

    def make(torch, opt):
        lin = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1 / warmup, end_factor=1.0,
                                                total_iters=max(warmup - 1, 0))
        cos = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total - warmup,
                                                         eta_min=ratio * 1e-3)
        return torch.optim.lr_scheduler.SequentialLR(opt, [lin, cos], milestones=[warmup])
    theirs = _theirs(torch, make, total)
    np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize("total,pct,div,fdiv", [(100, 0.3, 25.0, 1e4), (37, 0.25, 10.0, 100.0)])
def test_one_cycle_matches_torch(torch, total, pct, div, fdiv):
    ours = _ours(lambda o: schedules.OneCycle(o, total, pct_start=pct, div_factor=div,
                                               final_div_factor=fdiv), total)

    def make(torch, opt):
        return torch.optim.lr_scheduler.OneCycleLR(
            opt, max_lr=1e-3, total_steps=total, pct_start=pct, div_factor=div,
            final_div_factor=fdiv, cycle_momentum=False)
    theirs = _theirs(torch, make, total)
    np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-15)


def test_reduce_on_plateau_matches_torch(torch):
    rng = np.random.default_rng(0)
    metrics = np.concatenate([np.linspace(1, 0.5, 10), 0.5 + rng.uniform(0, 0.01, 30),
                              np.linspace(0.49, 0.3, 5), np.full(20, 0.3)])
    opt = _opt()
    ours_s = schedules.ReduceOnPlateau(opt, factor=0.5, patience=3, threshold=1e-3)
    p = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
    topt = torch.optim.AdamW([p], lr=1e-3)
    theirs_s = torch.optim.lr_scheduler.ReduceLROnPlateau(topt, factor=0.5, patience=3,
                                                          threshold=1e-3)
    ours, theirs = [], []
    for m in metrics:
        ours_s.step(m)
        theirs_s.step(m)
        ours.append(opt.lr)
        theirs.append(topt.param_groups[0]["lr"])
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)
    assert ours[-1] < 1e-3   # it did reduce


def test_warmup_cosine_shape():
    lr = _ours(lambda o: schedules.WarmupCosine(o, 50, warmup=0.2), 60)
    assert lr[0] == pytest.approx(1e-3 / 10)
    assert lr[9] == pytest.approx(1e-3)                 # end of warm-up: the peak
    assert np.all(np.diff(lr[:10]) > 0) and np.all(np.diff(lr[10:50]) < 0)
    assert lr[50:] == pytest.approx(0.0, abs=1e-18)      # stays at the floor past the end


def test_schedule_state_round_trip():
    opt = _opt()
    s = schedules.OneCycle(opt, 30)
    for _ in range(11):
        s.step()
    opt2 = _opt()
    s2 = schedules.OneCycle(opt2, 30)
    s2.load_state_dict(s.state_dict())
    assert opt2.lr == opt.lr and s2.last_step == 11
    s.step(), s2.step()
    assert opt2.lr == opt.lr


@pytest.mark.parametrize("bad,err", [
    (dict(total_steps=0), ValueError), (dict(total_steps=10, warmup=10), ValueError),
    (dict(total_steps=10, warmup=1.5), ValueError), (dict(total_steps=10, warmup="a"), TypeError),
    (dict(total_steps=10, min_lr_ratio=2.0), ValueError)])
def test_warmup_cosine_bad_input(bad, err):
    with pytest.raises(err, match=list(bad)[-1]):
        schedules.WarmupCosine(_opt(), **bad)


def test_schedule_rejects_non_optimizer():
    with pytest.raises(TypeError, match="optimizer"):
        schedules.WarmupCosine(object(), 10)
    with pytest.raises(ValueError, match="pct_start"):
        schedules.OneCycle(_opt(), 10, pct_start=1.0)


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-12), (np.float32, 1e-5)])
@pytest.mark.parametrize("max_norm", [0.5, 100.0])
def test_clip_grad_norm_matches_torch(torch, dtype, tol, max_norm):
    rng = np.random.default_rng(3)
    layer = attnx.MultiHeadAttention(8, 2, bias=True, dtype=dtype, random_state=0)
    layer.grads.flat[...] = rng.normal(size=layer.grads.flat.shape)
    tg = [torch.tensor(layer.grads[k].copy(), dtype=torch.float64) for k in layer.grads]
    ps = [torch.nn.Parameter(torch.zeros_like(g)) for g in tg]
    for p, g in zip(ps, tg):
        p.grad = g.clone()
    before = layer.grads.flat.copy()
    n = schedules.clip_grad_norm(layer.grads, max_norm)
    tn = torch.nn.utils.clip_grad_norm_(ps, max_norm)
    assert n == pytest.approx(float(tn), rel=tol)
    for k, p in zip(layer.grads, ps):
        np.testing.assert_allclose(layer.grads[k], p.grad.numpy(), rtol=tol, atol=0)
    if max_norm > n:
        assert np.array_equal(layer.grads.flat, before)
    else:
        assert schedules.global_norm(layer.grads) == pytest.approx(max_norm, rel=1e-4)


def test_clip_grad_norm_dict_and_errors():
    g = {"a": np.array([3.0, 0.0]), "b": np.array([[4.0]])}
    assert schedules.clip_grad_norm(g, 1.0) == pytest.approx(5.0)
    assert math.hypot(g["a"][0], g["b"][0, 0]) == pytest.approx(1.0, rel=1e-6)
    with pytest.raises(ValueError, match="max_norm"):
        schedules.clip_grad_norm(g, 0.0)
    with pytest.raises(TypeError, match="grads"):
        schedules.clip_grad_norm({"a": [1.0]}, 1.0)
    nan = {"a": np.array([np.nan, 1.0])}
    assert math.isnan(schedules.clip_grad_norm(nan, 1.0))
    assert nan["a"][1] == 1.0   # untouched


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_adamw_decay_matrices_matches_torch_param_groups(torch, dtype):
    """decay="matrices": torch.optim.AdamW with two groups (weights decayed; biases,
    norms and the position table not), same gradients for 3 steps."""
    m = attnx.SequenceModel(3, 8, 2, 1, 2, positional="learned", max_len=6, norm="pre",
                            pooling="mean", dtype=dtype, random_state=0)
    opt = attnx.AdamW(m.params, lr=1e-2, weight_decay=0.1, decay="matrices")
    tp = {k: torch.nn.Parameter(torch.tensor(v.copy())) for k, v in m.params.items()}
    dec = [p for k, p in tp.items() if p.ndim >= 2 and not k.startswith("pos.")]
    rest = [p for k, p in tp.items() if not (p.ndim >= 2 and not k.startswith("pos."))]
    assert dec and rest
    topt = torch.optim.AdamW([{"params": dec, "weight_decay": 0.1},
                              {"params": rest, "weight_decay": 0.0}], lr=1e-2)
    rng = np.random.default_rng(1)
    for _ in range(3):
        m.grads.flat[...] = rng.normal(size=m.grads.flat.shape)
        for k, p in tp.items():
            p.grad = torch.tensor(m.grads[k].copy())
        opt.step(m.grads)
        topt.step()
    tol = 1e-12 if dtype == np.float64 else 1e-5
    for k, p in tp.items():
        np.testing.assert_allclose(m.params[k], p.detach().numpy(), rtol=tol, atol=tol)


def test_adamw_decay_all_is_one_run_and_rule_checked():
    m = attnx.SequenceModel(3, 8, 2, 1, 2, random_state=0)
    assert len(attnx.AdamW(m.params).__dict__["_runs"][0]) == 1
    runs = attnx.AdamW(m.params, decay="matrices")._runs[0]
    assert runs[0][0] == 0 and runs[-1][1] == m.params.flat.shape[0]
    assert all(a[1] == b[0] and a[2] != b[2] for a, b in zip(runs, runs[1:]))
    with pytest.raises(ValueError, match="decay"):
        attnx.AdamW(m.params, decay="weights")
    d = {"w": np.zeros((2, 2)), "b": np.zeros(2)}
    opt = attnx.AdamW(d, lr=0.1, weight_decay=0.5, decay=lambda name, a: name == "w")
    d["w"][...] = 1.0
    d["b"][...] = 1.0
    opt.step({"w": np.zeros((2, 2)), "b": np.zeros(2)})
    assert np.allclose(d["w"], 0.95) and np.allclose(d["b"], 1.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_clip_flat_with_scratch_equals_without_and_allocates_nothing(dtype):
    import tracemalloc
    g = np.random.default_rng(3).normal(size=20000).astype(dtype) * 0.1
    want = g.copy()
    n_want = schedules.clip_flat(want, 1.0)
    scratch = np.empty(g.shape, np.float64)
    got = g.copy()
    tracemalloc.start()
    n_got = schedules.clip_flat(got, 1.0, scratch)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert n_got == n_want and n_want > 1.0
    np.testing.assert_array_equal(got, want)   # the same scale, bit for bit
    # no copy of the 20000 gradients (160 KB; the norm's loop keeps ~1.3 KB of iterator)
    assert peak < 4096
