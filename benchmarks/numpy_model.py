"""Plain NumPy versions of attnx's models, the baseline of the benchmark race.

Written the way a competent NumPy user writes them: whole-batch np.matmul on
(B, H, T, d_head) views made by reshape + transpose (no Python loop over
samples or heads), one fused [Wq | Wk | Wv] projection, in-place updates where
they come for free, a hand-written backward and AdamW. Nothing here calls attnx.

Models (the same as attnx's: attention + SiLU MLP with two residuals per layer, no biases):

    attention:    Y = concat_h(softmax(Q_h K_h^T / sqrt(d_head) [+ causal mask]) V_h) Wo
                  Q, K, V = X Wq, X Wk, X Wv
    transformer:  per layer  Z~ = attention(X) + X;  H = Z~ W1;  X' = silu(H) W2 + Z~

`params` / `grads` use attnx's names and layout (Y = X @ W, W of shape (in, out)):
Wq, Wk, Wv, Wo for the attention layer, layers.{i}.Wq ... layers.{i}.W2 for the
transformer. They are views into the arrays the model computes with, so
`load_params` copies attnx weights in, and `buffers` / `grad_buffers` (the
contiguous storage behind them) are what the optimizer updates.
"""
import numpy as np

__all__ = ["NumpyAttention", "NumpyTransformer", "NumpyAdamW", "mse_loss", "train_step"]


def _causal_mask(t, dtype):
    """(t, t) additive mask: 0 where key j <= query i, -inf above the diagonal."""
    m = np.zeros((t, t), dtype=dtype)
    m[np.triu_indices(t, 1)] = -np.inf
    return m


def _sigmoid(h):
    # 1/(1+exp(-h)) written through tanh: no overflow warning for very negative h
    s = np.multiply(h, 0.5)
    np.tanh(s, out=s)
    s *= 0.5
    s += 0.5
    return s


class _Attention:
    """Forward/backward of one attention block on (B*T, d) row matrices."""

    def __init__(self, d_model, n_heads, causal, dtype):
        if d_model % n_heads:
            raise ValueError("n_heads must divide d_model")
        self.d, self.h, self.dh = d_model, n_heads, d_model // n_heads
        self.causal = causal
        self.dtype = np.dtype(dtype)
        self.scale = 1.0 / np.sqrt(self.dh)
        d = d_model
        self.Wqkv = np.zeros((d, 3 * d), self.dtype)
        self.Wo = np.zeros((d, d), self.dtype)
        self.dWqkv = np.zeros_like(self.Wqkv)
        self.dWo = np.zeros_like(self.Wo)
        self._masks = {}

    def named(self, grads=False):
        wqkv, wo = (self.dWqkv, self.dWo) if grads else (self.Wqkv, self.Wo)
        d = self.d
        return {"Wq": wqkv[:, :d], "Wk": wqkv[:, d:2 * d], "Wv": wqkv[:, 2 * d:], "Wo": wo}

    def _mask(self, t):
        m = self._masks.get(t)
        if m is None:
            m = self._masks[t] = _causal_mask(t, self.dtype)
        return m

    def forward(self, x2, nb, t, keep):
        """x2: (B*T, d). Returns (Y (B*T, d), cache for backward or None)."""
        qkv = x2 @ self.Wqkv                                     # (B*T, 3d)
        # (B, T, 3, H, dh) -> (3, B, H, T, dh): three strided views, no copy
        q, k, v = qkv.reshape(nb, t, 3, self.h, self.dh).transpose(2, 0, 3, 1, 4)
        p = q @ k.swapaxes(-1, -2)                               # (B, H, T, T)
        p *= self.scale
        if self.causal:
            p += self._mask(t)
        p -= p.max(axis=-1, keepdims=True)
        np.exp(p, out=p)
        p /= p.sum(axis=-1, keepdims=True)
        z = (p @ v).transpose(0, 2, 1, 3).reshape(nb * t, self.d)  # heads side by side
        y = z @ self.Wo
        return y, ((x2, q, k, v, p, z, nb, t) if keep else None)

    def backward(self, dy2, cache, need_dx):
        """Fill dWqkv, dWo from dY (B*T, d); return dX (B*T, d) when need_dx."""
        x2, q, k, v, p, z, nb, t = cache
        np.matmul(z.T, dy2, out=self.dWo)
        dz = (dy2 @ self.Wo.T).reshape(nb, t, self.h, self.dh).transpose(0, 2, 1, 3)
        dqkv = np.empty((nb, t, 3, self.h, self.dh), dtype=self.dtype)
        dq, dk, dv = dqkv.transpose(2, 0, 3, 1, 4)
        np.matmul(p.swapaxes(-1, -2), dz, out=dv)               # dV = P^T dZ
        ds = dz @ v.swapaxes(-1, -2)                             # dP = dZ V^T
        # softmax backward: dS = P * (dP - rowsum(dP * P))
        ds -= np.einsum("...ij,...ij->...i", ds, p)[..., None]
        ds *= p
        ds *= self.scale
        np.matmul(ds, k, out=dq)                                 # dQ = dS K
        np.matmul(ds.swapaxes(-1, -2), q, out=dk)                # dK = dS^T Q
        dqkv2 = dqkv.reshape(nb * t, 3 * self.d)
        np.matmul(x2.T, dqkv2, out=self.dWqkv)
        return dqkv2 @ self.Wqkv.T if need_dx else None


class NumpyAttention:
    """Multi-head self-attention layer (attnx.MultiHeadAttention without bias/rope)."""

    def __init__(self, d_model, n_heads, *, causal=False, dtype=np.float32, input_grad=False):
        self.att = _Attention(d_model, n_heads, causal, dtype)
        self.d_model, self.dtype, self.input_grad = d_model, self.att.dtype, input_grad
        self.params = self.att.named()
        self.grads = self.att.named(grads=True)
        self.buffers = {"Wqkv": self.att.Wqkv, "Wo": self.att.Wo}
        self.grad_buffers = {"Wqkv": self.att.dWqkv, "Wo": self.att.dWo}
        self._cache = None

    def load_params(self, src):
        for k, v in self.params.items():
            v[...] = src[k]

    def forward(self, x, *, grad=True):
        nb, t, d = x.shape
        y, self._cache = self.att.forward(x.reshape(nb * t, d), nb, t, grad)
        return y.reshape(nb, t, d)

    def backward(self, dy):
        nb, t, d = dy.shape
        dx = self.att.backward(dy.reshape(nb * t, d), self._cache, self.input_grad)
        return None if dx is None else dx.reshape(nb, t, d)


class NumpyTransformer:
    """Stack of (attention + residual, SiLU MLP + residual) layers, as attnx.Transformer."""

    def __init__(self, d_model, n_heads, n_layers=2, d_hidden=None, *, causal=False,
                 dtype=np.float32, input_grad=False):
        d_hidden = 4 * d_model if d_hidden is None else d_hidden
        self.d_model, self.n_layers, self.d_hidden = d_model, n_layers, d_hidden
        self.dtype, self.input_grad = np.dtype(dtype), input_grad
        self.atts = [_Attention(d_model, n_heads, causal, dtype) for _ in range(n_layers)]
        z = lambda *s: np.zeros(s, self.dtype)  # noqa: E731
        self.W1 = [z(d_model, d_hidden) for _ in range(n_layers)]
        self.W2 = [z(d_hidden, d_model) for _ in range(n_layers)]
        self.dW1 = [np.zeros_like(w) for w in self.W1]
        self.dW2 = [np.zeros_like(w) for w in self.W2]
        self.params, self.grads, self.buffers, self.grad_buffers = {}, {}, {}, {}
        for i, a in enumerate(self.atts):
            for k, v in a.named().items():
                self.params[f"layers.{i}.{k}"] = v
            for k, v in a.named(grads=True).items():
                self.grads[f"layers.{i}.{k}"] = v
            self.params[f"layers.{i}.W1"], self.params[f"layers.{i}.W2"] = self.W1[i], self.W2[i]
            self.grads[f"layers.{i}.W1"], self.grads[f"layers.{i}.W2"] = self.dW1[i], self.dW2[i]
            self.buffers.update({f"{i}.Wqkv": a.Wqkv, f"{i}.Wo": a.Wo,
                                 f"{i}.W1": self.W1[i], f"{i}.W2": self.W2[i]})
            self.grad_buffers.update({f"{i}.Wqkv": a.dWqkv, f"{i}.Wo": a.dWo,
                                      f"{i}.W1": self.dW1[i], f"{i}.W2": self.dW2[i]})
        self._cache = None

    def load_params(self, src):
        for k, v in self.params.items():
            v[...] = src[k]

    def forward(self, x, *, grad=True):
        nb, t, d = x.shape
        cur = x.reshape(nb * t, d)
        caches = []
        for i, a in enumerate(self.atts):
            zt, ca = a.forward(cur, nb, t, grad)
            zt += cur                                   # Z~ = attention(X) + X
            h = zt @ self.W1[i]
            sig = _sigmoid(h)
            s = h * sig                                 # silu(H)
            out = s @ self.W2[i]
            out += zt
            if grad:
                caches.append((ca, zt, h, sig, s))
            cur = out
        self._cache = (caches, nb, t) if grad else None
        return cur.reshape(nb, t, d)

    def backward(self, dy):
        caches, nb, t = self._cache
        d = self.d_model
        dcur = dy.reshape(nb * t, d)
        for i in reversed(range(self.n_layers)):
            ca, zt, h, sig, s = caches[i]
            np.matmul(s.T, dcur, out=self.dW2[i])
            dh = dcur @ self.W2[i].T                    # dL/d silu(H)
            # silu'(h) = sig * (1 + h * (1 - sig))
            g = np.subtract(1.0, sig)
            g *= h
            g += 1.0
            g *= sig
            dh *= g
            np.matmul(zt.T, dh, out=self.dW1[i])
            dzt = dh @ self.W1[i].T
            dzt += dcur                                 # residual of the MLP
            need_dx = i > 0 or self.input_grad
            dxa = self.atts[i].backward(dzt, ca, need_dx)
            if need_dx:
                dzt += dxa                              # residual of the attention
            dcur = dzt
        return dcur.reshape(nb, t, d) if self.input_grad else None


class NumpyAdamW:
    """torch.optim.AdamW's update, in place on each array of `params`:

        p *= 1 - lr * wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
        p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        self.params = dict(params)
        self.lr, self.betas, self.eps, self.wd = lr, betas, eps, weight_decay
        self.m = {k: np.zeros_like(p) for k, p in self.params.items()}
        self.v = {k: np.zeros_like(p) for k, p in self.params.items()}
        self.t = 0

    def step(self, grads):
        self.t += 1
        b1, b2 = self.betas
        step_size = self.lr / (1.0 - b1 ** self.t)
        bc2_sqrt = np.sqrt(1.0 - b2 ** self.t)
        for k, p in self.params.items():
            g, m, v = grads[k], self.m[k], self.v[k]
            p *= 1.0 - self.lr * self.wd
            m *= b1
            m += (1.0 - b1) * g
            v *= b2
            v += (1.0 - b2) * (g * g)
            denom = np.sqrt(v)
            denom /= bc2_sqrt
            denom += self.eps
            p -= step_size * (m / denom)


def mse_loss(y, target):
    """(mean((y - target)^2), dL/dy = 2 (y - target) / N)."""
    diff = y - target
    loss = float(np.vdot(diff, diff)) / diff.size
    diff *= 2.0 / diff.size
    return loss, diff


def train_step(model, opt, x, target):
    """forward, MSE loss, backward, AdamW; returns the loss."""
    y = model.forward(x)
    loss, dy = mse_loss(y, target)
    model.backward(dy)
    opt.step(model.grad_buffers)
    return loss
