"""Plain reference implementations for the tests: NumPy (loops over heads) and
PyTorch (autograd). Written from the formulas, independent of attnx's kernels."""
import numpy as np


def _rope_np(x, d_head, sign=1.0):
    """x: (T, d_head) of one head; rotate pairs (2i, 2i+1) by sign * t * 10000^(-2i/d_head)."""
    t_len = x.shape[0]
    i = np.arange(d_head // 2)
    ang = sign * np.arange(t_len)[:, None] * (10000.0 ** (-2.0 * i / d_head))[None, :]
    c, s = np.cos(ang), np.sin(ang)
    out = x.copy()
    out[:, 0::2] = x[:, 0::2] * c - x[:, 1::2] * s
    out[:, 1::2] = x[:, 0::2] * s + x[:, 1::2] * c
    return out


def mha_numpy(p, x, n_heads, causal=False, context=None, key_padding_mask=None, rope=False):
    """Multi-head attention forward, one sample and one head at a time."""
    x = np.asarray(x, dtype=np.float64)
    ctx = x if context is None else np.asarray(context, dtype=np.float64)
    nb, tq, d = x.shape
    tk = ctx.shape[1]
    dh = d // n_heads
    g = lambda k: np.asarray(p[k], dtype=np.float64) if k in p else 0.0  # noqa: E731
    y = np.zeros((nb, tq, d))
    for b in range(nb):
        q = x[b] @ g("Wq") + g("bq")
        k = ctx[b] @ g("Wk") + g("bk")
        v = ctx[b] @ g("Wv") + g("bv")
        z = np.zeros((tq, d))
        for h in range(n_heads):
            sl = slice(h * dh, (h + 1) * dh)
            qh, kh = q[:, sl], k[:, sl]
            if rope:
                qh, kh = _rope_np(qh, dh), _rope_np(kh, dh)
            s = qh @ kh.T / np.sqrt(dh)
            allowed = np.ones((tq, tk), dtype=bool)
            if causal:
                allowed &= np.tril(np.ones((tq, tk), dtype=bool))
            if key_padding_mask is not None:
                allowed &= ~key_padding_mask[b][None, :]
            s = np.where(allowed, s, -np.inf)
            a = np.zeros_like(s)
            for i in range(tq):
                if allowed[i].any():
                    e = np.exp(s[i] - s[i].max())
                    a[i] = e / e.sum()
            z[:, sl] = a @ v[:, sl]
        y[b] = z @ g("Wo") + g("bo")
    return y


def mha_numpy_backward(p, x, dy, n_heads, causal=False, context=None, key_padding_mask=None,
                       rope=False):
    """Gradients of sum(Y * dy) by hand, one sample and head at a time:
    returns (grads dict, dX, dcontext or None)."""
    x = np.asarray(x, dtype=np.float64)
    cross = context is not None
    ctx = np.asarray(context, dtype=np.float64) if cross else x
    dy = np.asarray(dy, dtype=np.float64)
    nb, tq, d = x.shape
    tk = ctx.shape[1]
    dh = d // n_heads
    W = {k: np.asarray(v, dtype=np.float64) for k, v in p.items()}
    b_ = lambda k: W.get(k, 0.0)  # noqa: E731
    g = {k: np.zeros_like(v) for k, v in W.items()}
    dx = np.zeros_like(x)
    dc = np.zeros_like(ctx)
    for b in range(nb):
        q, k, v = x[b] @ W["Wq"] + b_("bq"), ctx[b] @ W["Wk"] + b_("bk"), ctx[b] @ W["Wv"] + b_("bv")
        zcat = np.zeros((tq, d))
        dq, dk, dv = np.zeros((tq, d)), np.zeros((tk, d)), np.zeros((tk, d))
        cache = []
        for h in range(n_heads):
            sl = slice(h * dh, (h + 1) * dh)
            qh, kh = q[:, sl], k[:, sl]
            if rope:
                qh, kh = _rope_np(qh, dh), _rope_np(kh, dh)
            allowed = np.ones((tq, tk), dtype=bool)
            if causal:
                allowed &= np.tri(tq, tk, dtype=bool)
            if key_padding_mask is not None:
                allowed &= ~key_padding_mask[b][None, :]
            s = np.where(allowed, qh @ kh.T / np.sqrt(dh), -np.inf)
            a = np.zeros((tq, tk))
            for i in range(tq):
                if allowed[i].any():
                    e = np.exp(s[i] - s[i].max())
                    a[i] = e / e.sum()
            zcat[:, sl] = a @ v[:, sl]
            cache.append((sl, qh, kh, a))
        g["Wo"] += zcat.T @ dy[b]
        if "bo" in g:
            g["bo"] += dy[b].sum(0)
        dz = dy[b] @ W["Wo"].T
        for sl, qh, kh, a in cache:
            dv[:, sl] = a.T @ dz[:, sl]
            da = dz[:, sl] @ v[:, sl].T
            ds = a * (da - (da * a).sum(1, keepdims=True)) / np.sqrt(dh)
            dqh, dkh = ds @ kh, ds.T @ qh
            if rope:
                dqh, dkh = _rope_np(dqh, dh, -1.0), _rope_np(dkh, dh, -1.0)
            dq[:, sl], dk[:, sl] = dqh, dkh
        g["Wq"] += x[b].T @ dq
        g["Wk"] += ctx[b].T @ dk
        g["Wv"] += ctx[b].T @ dv
        for name, grad in (("bq", dq), ("bk", dk), ("bv", dv)):
            if name in g:
                g[name] += grad.sum(0)
        dx[b] += dq @ W["Wq"].T
        (dc if cross else dx)[b] += dk @ W["Wk"].T + dv @ W["Wv"].T
    return g, dx, (dc if cross else None)


def mha_torch(torch, p, x, n_heads, causal=False, context=None, key_padding_mask=None,
              rope=False):
    """The same forward in torch ops (differentiable); p maps names to tensors."""
    nb, tq, d = x.shape
    ctx = x if context is None else context
    tk = ctx.shape[1]
    dh = d // n_heads

    def lin(inp, w, b):
        out = inp @ p[w]
        return out + p[b] if b in p else out

    def heads(t, n):
        return t.reshape(nb, n, n_heads, dh).transpose(1, 2)

    q = heads(lin(x, "Wq", "bq"), tq)
    k = heads(lin(ctx, "Wk", "bk"), tk)
    v = heads(lin(ctx, "Wv", "bv"), tk)
    if rope:
        q, k = _rope_torch(torch, q), _rope_torch(torch, k)
    s = q @ k.transpose(-1, -2) / (dh ** 0.5)
    allowed = torch.ones((nb, 1, tq, tk), dtype=torch.bool)
    if causal:
        allowed = allowed & torch.ones((tq, tk), dtype=torch.bool).tril()
    if key_padding_mask is not None:
        allowed = allowed & ~torch.as_tensor(key_padding_mask)[:, None, None, :]
    s = s.masked_fill(~allowed, float("-inf"))
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m)).detach()
    e = torch.exp(s - m) * allowed
    den = e.sum(dim=-1, keepdim=True)
    a = e / torch.where(den > 0, den, torch.ones_like(den))
    z = (a @ v).transpose(1, 2).reshape(nb, tq, d)
    return lin(z, "Wo", "bo")


def _rope_torch(torch, t):
    """t: (B, H, T, dh)."""
    t_len, dh = t.shape[-2], t.shape[-1]
    i = torch.arange(dh // 2, dtype=torch.float64)
    ang = torch.arange(t_len, dtype=torch.float64)[:, None] * (10000.0 ** (-2.0 * i / dh))[None, :]
    c, s = torch.cos(ang).to(t.dtype), torch.sin(ang).to(t.dtype)
    even, odd = t[..., 0::2], t[..., 1::2]
    out = torch.stack([even * c - odd * s, even * s + odd * c], dim=-1)
    return out.flatten(-2)


def transformer_torch(torch, p, x, n_heads, n_layers, causal=False, context=None,
                      key_padding_mask=None, rope=False):
    """Seed 001's transformer in torch ops: per layer Z~ = MHA(X) + X,
    X' = silu(Z~ W1 + b1) W2 + b2 + Z~."""
    for i in range(n_layers):
        lp = {k.split(".", 2)[2]: v for k, v in p.items() if k.startswith(f"layers.{i}.")}
        zt = mha_torch(torch, lp, x, n_heads, causal=causal, context=context,
                       key_padding_mask=key_padding_mask, rope=rope) + x
        h = zt @ lp["W1"] + (lp["b1"] if "b1" in lp else 0)
        s = h * torch.sigmoid(h)
        x = s @ lp["W2"] + (lp["b2"] if "b2" in lp else 0) + zt
    return x
