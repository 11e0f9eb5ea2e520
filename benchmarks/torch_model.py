"""PyTorch versions of attnx's models for the benchmark race (autograd + AdamW).

Two attention flavours:
  * "matmul": plain  softmax(Q K^T * scale + causal mask) V  in torch ops;
  * "sdpa":   torch.nn.functional.scaled_dot_product_attention(is_causal=...),
              PyTorch's fused CPU attention kernel.

Same models, names and weight layout as attnx (Y = X @ W, W of shape (in, out);
Wq, Wk, Wv, Wo / layers.{i}.Wq ... layers.{i}.W2); Q, K and V come from one
fused (d, 3d) parameter, and `params` / `grads` are views of it, so weights copy
straight in from attnx with `load_params`.

Import this module only when torch imports (benchmarks/run.py checks).
"""
import math

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["TorchAttention", "TorchTransformer", "make_optimizer", "train_step", "predict",
           "torch_dtype"]


def torch_dtype(dtype):
    return {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64}[
        np.dtype(dtype)]


class _Attention(torch.nn.Module):
    def __init__(self, d_model, n_heads, causal, dtype, sdpa):
        super().__init__()
        if d_model % n_heads:
            raise ValueError("n_heads must divide d_model")
        self.d, self.h, self.dh = d_model, n_heads, d_model // n_heads
        self.causal, self.sdpa = causal, sdpa
        self.scale = 1.0 / math.sqrt(self.dh)
        self.Wqkv = torch.nn.Parameter(torch.zeros(d_model, 3 * d_model, dtype=dtype))
        self.Wo = torch.nn.Parameter(torch.zeros(d_model, d_model, dtype=dtype))
        self._masks = {}

    def named(self, grads=False):
        wqkv, wo = (self.Wqkv.grad, self.Wo.grad) if grads else (self.Wqkv.data, self.Wo.data)
        if wqkv is None:
            return {}
        d = self.d
        return {"Wq": wqkv[:, :d], "Wk": wqkv[:, d:2 * d], "Wv": wqkv[:, 2 * d:], "Wo": wo}

    def _mask(self, t):
        m = self._masks.get(t)
        if m is None:  # True above the diagonal: key j > query i is hidden
            with torch.inference_mode(False):  # usable by autograd when made in predict
                m = self._masks[t] = torch.ones(t, t, dtype=torch.bool).triu(1)
        return m

    def forward(self, x):
        nb, t, d = x.shape
        qkv = x @ self.Wqkv                                            # (B, T, 3d)
        q, k, v = qkv.view(nb, t, 3, self.h, self.dh).permute(2, 0, 3, 1, 4).unbind(0)
        if self.sdpa:
            z = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        else:
            s = (q @ k.transpose(-2, -1)) * self.scale                 # (B, H, T, T)
            if self.causal:
                s = s.masked_fill(self._mask(t), float("-inf"))
            z = torch.softmax(s, dim=-1) @ v
        z = z.transpose(1, 2).reshape(nb, t, d)
        return z @ self.Wo


class _ModelBase(torch.nn.Module):
    @property
    def params(self):
        """name -> tensor view of the weights (attnx names and layout)."""
        return self._named(False)

    @property
    def grads(self):
        """name -> tensor view of the gradients of the last backward."""
        return self._named(True)

    def load_params(self, src):
        """Copy weights from a dict of arrays with attnx's names (e.g. attnx model.params)."""
        with torch.no_grad():
            for k, v in self._named(False).items():
                v.copy_(torch.from_numpy(np.ascontiguousarray(src[k])))


class TorchAttention(_ModelBase):
    """Multi-head self-attention layer (attnx.MultiHeadAttention without bias/rope)."""

    def __init__(self, d_model, n_heads, *, causal=False, dtype=np.float32, sdpa=False):
        super().__init__()
        self.att = _Attention(d_model, n_heads, causal, torch_dtype(dtype), sdpa)

    def _named(self, grads):
        return self.att.named(grads)

    def forward(self, x):
        return self.att(x)


class _Layer(torch.nn.Module):
    def __init__(self, d_model, n_heads, d_hidden, causal, dtype, sdpa):
        super().__init__()
        self.att = _Attention(d_model, n_heads, causal, dtype, sdpa)
        self.W1 = torch.nn.Parameter(torch.zeros(d_model, d_hidden, dtype=dtype))
        self.W2 = torch.nn.Parameter(torch.zeros(d_hidden, d_model, dtype=dtype))

    def forward(self, x):
        zt = self.att(x) + x
        return F.silu(zt @ self.W1) @ self.W2 + zt


class TorchTransformer(_ModelBase):
    """Stack of (attention + residual, SiLU MLP + residual) layers, as attnx.Transformer."""

    def __init__(self, d_model, n_heads, n_layers=2, d_hidden=None, *, causal=False,
                 dtype=np.float32, sdpa=False):
        super().__init__()
        d_hidden = 4 * d_model if d_hidden is None else d_hidden
        tdt = torch_dtype(dtype)
        self.layers = torch.nn.ModuleList(
            _Layer(d_model, n_heads, d_hidden, causal, tdt, sdpa) for _ in range(n_layers))

    def _named(self, grads):
        out = {}
        for i, layer in enumerate(self.layers):
            for k, v in layer.att.named(grads).items():
                out[f"layers.{i}.{k}"] = v
            for k in ("W1", "W2"):
                w = getattr(layer, k)
                w = w.grad if grads else w.data
                if w is not None:
                    out[f"layers.{i}.{k}"] = w
        return out

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def make_optimizer(model, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
    """torch.optim.AdamW; fused=True (one CPU kernel for every tensor) when this
    torch build supports it, else PyTorch's default implementation."""
    kw = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    try:
        return torch.optim.AdamW(model.parameters(), fused=True, **kw)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(model.parameters(), **kw)


def train_step(model, opt, x, target):
    """zero_grad, forward, MSE loss, backward, AdamW step; returns the loss."""
    opt.zero_grad(set_to_none=True)
    loss = F.mse_loss(model(x), target)
    loss.backward()
    opt.step()
    return loss.item()


def predict(model, x):
    with torch.inference_mode():
        return model(x)
