"""The network of attnx.SequenceModel written in PyTorch: an oracle for tests, the peer of
benchmarks and examples.

    from attnx.testing.torch_twin import SeqTwin   # imports torch (attnx never does)
    twin = SeqTwin(model)            # copies model's weights; dtype follows the model
    y = twin(torch.tensor(x), key_padding_mask)
    y.backward(...); twin.grads()    # name -> numpy gradient, attnx's names

Written from the formulas of the SequenceModel docstring with torch's own ops
(F.layer_norm is the kernel behind nn.LayerNorm), independent of attnx's kernels.
Attention is written out (not nn.MultiheadAttention) so that a sequence whose
keys are all padding gives zeros instead of NaN, as attnx defines it.

Dropout, as attnx applies it: in training mode (twin.train()) with
p = model.dropout > 0, each residual branch (the attention output and the MLP
output, before they are added to the residual stream) goes through torch's
F.dropout; the attention probabilities are not dropped. Tests that need attnx's
exact masks pass `masks`, a dict name -> multiplier tensor (0 or 1/(1-p)), as
returned by SequenceModel.dropout_masks(): "layers.{i}.res1" (B, T, d) on the
attention branch and "layers.{i}.res2" (B, T, d) on the MLP branch; a name
missing from `masks` is not dropped. Call twin.eval() for predictions.

The convolutional stem is a torch.nn.Conv1d per layer (weight[o, c, l] = attnx's
stem.{i}.W[l*C + c, o]) on the input zero-padded by F.pad((kernel-1)//2,
kernel-1-(kernel-1)//2), padded steps zeroed; a right-padded sequence of length t_b
keeps ceil(t_b / stride) tokens per layer.

Instance normalisation (instance_norm "input" / "revin", RevIN): each series (b, c)
of the input read as (B, T * p, C) (p = instance_steps) centred on its mean over the
valid steps and divided by sqrt(population variance + 1e-5), then times revin.g plus
revin.b (instance_affine), padded steps zero; "revin" maps the outputs, read as
(B, -1, C), back with (y - revin.b) / (revin.g + 1e-10) * std + mean.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["SeqTwin", "run_both", "sinusoidal", "rope"]


def sinusoidal(t_len: int, d: int, dtype: Any) -> Any:
    """The sinusoidal position table (t_len, d) as SequenceModel adds it."""
    import torch

    pos = torch.arange(t_len, dtype=torch.float64)[:, None]
    i2 = torch.arange(0, d, 2, dtype=torch.float64)
    ang = pos / (10000.0 ** (i2 / d))
    pe = torch.zeros((t_len, d), dtype=torch.float64)
    pe[:, 0::2] = torch.sin(ang)
    pe[:, 1::2] = torch.cos(ang[:, :d // 2])
    return pe.to(dtype)


def rope(t: Any) -> Any:
    """Rotate pairs (2i, 2i+1) of t (B, H, T, dh) by angle pos * 10000^(-2i/dh)."""
    import torch

    t_len, dh = t.shape[-2], t.shape[-1]
    i = torch.arange(dh // 2, dtype=torch.float64)
    ang = torch.arange(t_len, dtype=torch.float64)[:, None] * (10000.0 ** (-2.0 * i / dh))
    c, s = torch.cos(ang).to(t.dtype), torch.sin(ang).to(t.dtype)
    a, b = t[..., 0::2], t[..., 1::2]
    out = torch.stack((a * c - b * s, a * s + b * c), dim=-1)
    return out.flatten(-2)


def _build_seq_twin() -> Any:
    """The SeqTwin class (a torch.nn.Module), defined on first use so that importing this
    module does not import torch."""
    import torch
    import torch.nn.functional as F

    class SeqTwin(torch.nn.Module):  # type: ignore[misc]  # torch: not checked
        """SequenceModel's network in torch, initialised from an attnx model's weights."""

        def __init__(self, model: Any, dtype: Any = None) -> None:
            super().__init__()
            if dtype is None:
                dtype = torch.float32 if model.dtype == np.float32 else torch.float64
            self.names = list(model.params)
            self.p = torch.nn.ParameterDict({
                n.replace(".", "__"): torch.nn.Parameter(torch.tensor(np.array(v), dtype=dtype))
                for n, v in model.params.items() if not n.startswith("stem.")})
            self.convs = torch.nn.ModuleList()
            for i, (k, s) in enumerate(model.stem or ()):
                w = np.array(model.params[f"stem.{i}.W"])
                c, d = w.shape[0] // k, w.shape[1]
                conv = torch.nn.Conv1d(c, d, k, stride=s, dtype=dtype)
                with torch.no_grad():
                    conv.weight.copy_(torch.tensor(w.reshape(k, c, d).transpose(2, 1, 0)))
                    conv.bias.copy_(torch.tensor(np.array(model.params[f"stem.{i}.b"])))
                self.convs.append(conv)
            self.dtype = dtype
            for k in ("d_model", "n_heads", "n_layers", "pooling", "positional", "norm",
                      "causal", "bias", "dropout", "stem", "instance_norm", "instance_steps"):
                setattr(self, k, getattr(model, k))
            self.position_scale = getattr(model, "position_scale", 1.0)

        def w(self, name: str) -> Any:
            return self.p[name.replace(".", "__")]

        def has(self, name: str) -> bool:
            return name.replace(".", "__") in self.p

        def grads(self) -> dict[str, np.ndarray]:
            """name -> gradient as a float64 numpy array (zeros where torch has none)."""
            out = {}
            for i, conv in enumerate(self.convs):
                k = conv.kernel_size[0]
                for n, t in ((f"stem.{i}.W", conv.weight), (f"stem.{i}.b", conv.bias)):
                    g = (np.zeros(tuple(t.shape)) if t.grad is None
                         else t.grad.detach().to(torch.float64).numpy())
                    out[n] = g.transpose(2, 1, 0).reshape(k * g.shape[1], -1) if g.ndim == 3 else g
            for n in self.names:
                if n in out:
                    continue
                g = self.w(n).grad
                out[n] = (np.zeros(tuple(self.w(n).shape)) if g is None
                          else g.detach().to(torch.float64).numpy())
            return out

        def _drop(self, t: Any, name: str, masks: dict[str, Any] | None) -> Any:
            if masks is not None:
                m = masks.get(name)
                return t if m is None else t * m
            if self.training and self.dropout > 0:
                return F.dropout(t, self.dropout, training=True)
            return t

        def _attention(self, x: Any, i: int, allowed: Any) -> Any:
            nb, t, d = x.shape
            h = self.n_heads
            dh = d // h
            pre = f"layers.{i}."

            def lin(inp: Any, wn: str, bn: str) -> Any:
                out = inp @ self.w(pre + wn)
                return out + self.w(pre + bn) if self.has(pre + bn) else out

            def heads(z: Any) -> Any:
                return z.reshape(nb, t, h, dh).transpose(1, 2)

            q, k, v = heads(lin(x, "Wq", "bq")), heads(lin(x, "Wk", "bk")), heads(lin(x, "Wv", "bv"))
            if self.positional == "rope":
                q, k = rope(q), rope(k)
            s = (q @ k.transpose(-1, -2)) / math.sqrt(dh)
            s = s.masked_fill(~allowed, float("-inf"))
            m = s.amax(dim=-1, keepdim=True)
            m = torch.where(torch.isfinite(m), m, torch.zeros_like(m)).detach()
            e = torch.exp(s - m) * allowed
            den = e.sum(dim=-1, keepdim=True)
            a = e / torch.where(den > 0, den, torch.ones_like(den))
            z = (a @ v).transpose(1, 2).reshape(nb, t, d)
            return lin(z, "Wo", "bo")

        def _mlp(self, x: Any, i: int) -> Any:
            pre = f"layers.{i}."
            hid = x @ self.w(pre + "W1")
            if self.has(pre + "b1"):
                hid = hid + self.w(pre + "b1")
            out = F.silu(hid) @ self.w(pre + "W2")
            return out + self.w(pre + "b2") if self.has(pre + "b2") else out

        def _ln(self, x: Any, name: str) -> Any:
            return F.layer_norm(x, (self.d_model,), self.w(name + ".g"), self.w(name + ".b"),
                                eps=1e-5)

        def _stem(self, x: Any, valid: Any) -> tuple[Any, Any]:
            """The convolutional stem: (tokens, their validity) from x (B, T, C)."""
            for (k, s), conv in zip(self.stem or (), self.convs):
                lens = valid.sum(dim=1)   # right-padded: the valid lengths
                x = (x * valid[:, :, None].to(self.dtype)).transpose(1, 2)   # (B, C, T)
                left = (k - 1) // 2
                x = F.silu(conv(F.pad(x, (left, k - 1 - left)))).transpose(1, 2)
                n = x.shape[1]
                valid = torch.arange(n)[None, :] < ((lens + s - 1) // s)[:, None]
            return x, valid

        def forward(self, x: Any, key_padding_mask: Any = None,
                    masks: dict[str, Any] | None = None) -> Any:
            """x (B, T, n_features) tensor; key_padding_mask (B, T) bool array or tensor,
            True = padding. Returns Y as SequenceModel.forward does."""
            x = x.to(self.dtype)
            nb, t, _ = x.shape
            pad = (torch.zeros((nb, t), dtype=torch.bool) if key_padding_mask is None
                   else torch.as_tensor(np.asarray(key_padding_mask), dtype=torch.bool))
            stats: tuple[Any, Any] = (None, None)
            if self.instance_norm is not None:
                x, stats = self._instance_norm(x, ~pad)
            x, valid = self._stem(x, ~pad)
            t = x.shape[1]
            h = x @ self.w("embed.W") + self.w("embed.b")
            if self.positional == "sinusoidal":
                h = h + self.position_scale * sinusoidal(t, self.d_model, self.dtype)
            elif self.positional == "learned":
                h = h + self.w("pos.P")[:t]
            if self.pooling == "cls":   # the class token first, never padded, no position
                h = torch.cat((self.w("cls").expand(nb, 1, self.d_model), h), dim=1)
                valid = torch.cat((torch.ones((nb, 1), dtype=torch.bool), valid), dim=1)
                t += 1
            allowed = valid[:, None, None, :].expand(nb, 1, t, t)
            if self.causal:
                allowed = allowed & torch.ones((t, t), dtype=torch.bool).tril()
            for i in range(self.n_layers):
                pre = f"layers.{i}."
                if self.norm == "pre":
                    z = h + self._drop(self._attention(self._ln(h, pre + "ln1"), i, allowed),
                                       pre + "res1", masks)
                    h = z + self._drop(self._mlp(self._ln(z, pre + "ln2"), i), pre + "res2", masks)
                else:
                    z = h + self._drop(self._attention(h, i, allowed), pre + "res1", masks)
                    h = z + self._drop(self._mlp(z, i), pre + "res2", masks)
            if self.norm == "pre":
                h = self._ln(h, "norm")
            vf = valid.to(self.dtype)[:, :, None]
            if self.pooling == "mean":
                cnt = vf.sum(dim=1)
                pooled = (h * vf).sum(dim=1) / torch.clamp(cnt, min=1)
            elif self.pooling == "last":
                idx = torch.arange(t)[None, :].expand(nb, t)
                last = torch.where(valid, idx, torch.full_like(idx, -1)).amax(dim=1)
                pooled = h[torch.arange(nb), last.clamp(min=0)]
                pooled = pooled * (last >= 0).to(self.dtype)[:, None]
            elif self.pooling == "max":
                big = h.masked_fill(~valid[:, :, None], float("-inf")).amax(dim=1)
                pooled = torch.where(valid.any(dim=1)[:, None], big, torch.zeros_like(big))
            elif self.pooling == "cls":
                pooled = h[:, 0]
            else:
                pooled = h
            y = pooled @ self.w("head.W") + self.w("head.b")
            if self.instance_norm == "revin":
                y = self._denorm(y, *stats)
            if self.pooling is None:
                y = y * vf
            return y

        def _instance_norm(self, x: Any, valid: Any, eps: float = 1e-5) -> tuple[Any, Any]:
            """(normalised x, (mean, std) each (B, 1, C)) of x (B, T, F) read as (B, T*p, C)."""
            nb, t, f = x.shape
            p = self.instance_steps
            xs = x.reshape(nb, t * p, f // p)
            v = valid.repeat_interleave(p, dim=1).to(self.dtype)[:, :, None]
            cnt = torch.clamp(v.sum(dim=1, keepdim=True), min=1)
            mean = (xs * v).sum(dim=1, keepdim=True) / cnt
            var = (((xs - mean) * v) ** 2).sum(dim=1, keepdim=True) / cnt
            std = torch.sqrt(var + eps)
            xn = (xs - mean) / std
            if self.has("revin.g"):
                xn = xn * self.w("revin.g") + self.w("revin.b")
            return (xn * v).reshape(nb, t, f), (mean, std)

        def _denorm(self, y: Any, mean: Any, std: Any) -> Any:
            shape = y.shape
            yc = y.reshape(shape[0], -1, mean.shape[-1])
            if self.has("revin.g"):
                yc = (yc - self.w("revin.b")) / (self.w("revin.g") + 1e-10)
            return (yc * std + mean).reshape(shape)

    SeqTwin.__qualname__ = "SeqTwin"   # pickles find it as attnx.testing.torch_twin.SeqTwin
    return SeqTwin


_CLASSES: dict[str, Any] = {}


def _seq_twin_class() -> Any:
    if "SeqTwin" not in _CLASSES:
        _CLASSES["SeqTwin"] = _build_seq_twin()
    return _CLASSES["SeqTwin"]


def __getattr__(name: str) -> Any:
    """SeqTwin, built (and torch imported) on first access."""
    if name == "SeqTwin":
        return _seq_twin_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def run_both(m: Any, x: Any, kpm: Any, rng: np.random.Generator) -> tuple[Any, ...]:
    """attnx SequenceModel m and its twin on x (key padding mask kpm): forward, then
    backward of a random upstream gradient. Returns (y, dx, y_twin, dx_twin, twin)."""
    import torch

    y = m.forward(x, kpm)
    g = rng.normal(size=y.shape).astype(m.dtype)
    dx = m.backward(g)
    tw = _seq_twin_class()(m)
    xt = torch.tensor(x, requires_grad=True)
    yt = tw(xt, kpm)
    (yt * torch.tensor(g)).sum().backward()
    return y, dx, yt.detach().numpy(), xt.grad.numpy(), tw
