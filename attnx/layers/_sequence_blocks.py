"""A SequenceModel's whole pass as one compiled call each way: its only path.

attnx.kernels._blocks.BlockStack runs every block's forward (or backward) on pointers
it checked once; attnx.kernels._model_pass.ModelPass runs the stem, the embedding, the
class token, that stack, the final norm, the pooling and the head, for every
configuration. `stack_for` builds both per signature of a set of buffers (the
blocks' key padding mask, one of the buffers' own arrays, training or inference,
dropout, thread counts, the attention layers' paths) and keeps them on those
buffers, so a training step spends no Python between the kernels. The same stages
one kernel call at a time, the reference this pass is tested against, live in
attnx.testing.reference_pass.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np

from ..kernels import _attnargs
from ..kernels._blocks import BlockStack
from ..kernels._model_pass import ModelPass
from ._model_plan import stages
from .attention import _Last as _AttentionLast

if TYPE_CHECKING:
    import numpy.typing as npt

    from ..runtime._typing import FloatArray
    from ._model_plan import Stage
    from ._sequence_buffers import _Buffers
    from .attention import MultiHeadAttention

    _U8Array = npt.NDArray[np.uint8]

    class SequenceView(Protocol):
        """What building the pass reads of its SequenceModel (which imports this
        module, so it is declared here); it goes once the builders below take their
        operands explicitly."""

        attn: list[MultiHeadAttention]
        plan: tuple[Stage, ...]
        norm: str | None
        n_features: int
        n_outputs: int
        _w: dict[str, FloatArray]
        _g: dict[str, FloatArray]

        def _positions(self, n: int) -> FloatArray | None: ...

# LayerNorm's epsilon (as torch's default)
LN_EPS = 1e-5


class _Compiled(NamedTuple):
    stack: BlockStack
    lasts: list[_AttentionLast]   # each attention layer's state after a training forward
    whole: ModelPass              # the whole pass


def stack_for(m: SequenceView, b: _Buffers, km: _U8Array | None, nb: int, grad: bool,
              drop: bool, threads: int, nth: int) -> _Compiled:
    """The compiled blocks over the buffers b (built on first use, then kept on b)."""
    t = b.tt
    paths = tuple(a._path(t, t, grad) for a in m.attn)
    key = (grad, drop, None if km is None else id(km), threads, nth, paths,
           _attnargs.block_sizes() if "blocked" in paths else None)
    got: _Compiled | None = b.stacks.get(key)
    if got is None:
        got = b.stacks[key] = _build(m, b, km, nb, grad, drop, threads, nth)
    return got


def _build(m: SequenceView, b: _Buffers, km: _U8Array | None, nb: int, grad: bool,
           drop: bool, threads: int, nth: int) -> _Compiled:
    t, w, g, pre = b.tt, m._w, m._g, m.norm == "pre"
    if grad:
        b.for_backward()
    layers: list[dict[str, Any]] = []
    lasts = []
    for blk in stages(m.plan, "block"):
        i, att = blk.layer, m.attn[blk.layer]
        ws, _ = att._workspace(nb, t, t, False, grad, threads)
        run = threads if ws.parallel else 1
        rope = att._rope_tables(t) if att.rope else None
        ain = b.u1[i] if pre else b.hs[i]
        p = blk.prefix
        lay: dict[str, Any] = {
            "ws": ws, "threads": run, "mask": km, "rope": rope, "eps": LN_EPS,
            "h": b.hs[i], "h_out": b.hs[i + 1], "zt": b.zt[i],
            "u1": b.u1[i] if pre else None, "u2": b.u2[i] if pre else None,
            "st1": b.st1[i] if pre else None, "st2": b.st2[i] if pre else None,
            "hid": b.hid[i], "s": b.s[i], "sg": b.sg[i] if grad else None,
            "m1": b.m1[i] if drop else None, "m2": b.m2[i] if drop else None}
        for name in ("W1", "b1", "W2", "b2"):
            lay[name] = w.get(p + name)
            lay["d" + name] = g.get(p + name)
        for ln in ("ln1", "ln2"):
            for part in ("g", "b"):
                lay[f"{ln}.{part}"] = w.get(f"{p}{ln}.{part}")
                lay[f"{ln}.d{part}"] = g.get(f"{p}{ln}.{part}")
        layers.append(lay)
        rc, rs = rope if rope is not None else (None, None)
        lasts.append(_AttentionLast(ain, None, nb, t, t, ws, threads, rc, rs, km))
    shared = {"branch": b.branch, "mlp_threads": threads}
    if grad:
        shared.update(dcur=b.da if b.stf is not None else b.dhf, db=b.db, dzt=b.dzt,
                      dbr=b.dbr, dhid=b.dhid, part=b.part)
    stack = BlockStack(layers, shared, pre, drop, grad, nth)
    return _Compiled(stack, lasts, _whole(m, b, km, nb, grad, nth, stack))


def _whole(m: SequenceView, b: _Buffers, km: _U8Array | None, nb: int, grad: bool,
           nth: int, stack: BlockStack) -> ModelPass:
    """The whole pass around `stack`: its ends read stage by stage from the model's
    description (attnx.layers._model_plan), pointing into the buffers b."""
    w, g = m._w, m._g

    def weights(prefix: str, *names: str) -> None:
        for name in names:
            ends[prefix + name] = w[prefix + name]
            ends[f"{prefix}d{name}"] = g[prefix + name]

    x = b.x if b.xn is None else b.xn
    ends: dict[str, Any] = {
        "nb": nb, "t": b.tt, "n": b.n, "steps": b.lens[0], "n_features": m.n_features,
        "n_outputs": m.n_outputs, "nth": nth, "x_in": x, "x": x, "stem": [], "pos": None,
        "pos.dP": None, "cls": None, "pooling": None, "final_norm": False, "eps": LN_EPS,
        "h0": b.hs[0], "h_top": b.hs[-1], "hf": b.hf, "km": km, "pooled": b.pooled,
        "idx": b.idx, "st": b.stf, "part": b.part if grad else None,
        # revin de-normalises the head's output (b.yn) and runs its gradient first
        "dy": (b.dy if b.rdy is None else b.rdy) if grad else None,
        "zero_padded": b.yn is None, "dpooled": b.dpooled if grad else None,
        "dhf": b.dhf if grad else None,
        "dcur": (b.da if b.stf is not None else b.dhf) if grad else None}
    for st in m.plan:
        if st.kind == "stem":
            i = st.layer
            ends["stem"].append({
                "kernel": st.kernel, "stride": st.stride, "pad_left": st.pad_left,
                "pad_right": st.pad_right, "t_in": b.lens[i],
                "km": None if km is None else b.mask if i == 0 else b.smask[i - 1],
                "W": w[st.prefix + "W"], "b": w[st.prefix + "b"], "u": b.su[i],
                "z": b.sz[i], "s": b.ss[i], "sg": b.ssg[i] if grad else None,
                "dW": g[st.prefix + "W"] if grad else None,
                "db": g[st.prefix + "b"] if grad else None,
                "ds": b.dss[i] if grad else None, "du": b.dsu[i] if grad else None})
            ends["x"] = b.ss[i]
        elif st.kind in ("embed", "head"):
            weights(st.prefix, "W", "b")
        elif st.kind == "positions":
            ends["pos"] = m._positions(b.n)
            if st.how == "learned" and grad:
                ends["pos.dP"] = g[st.prefix + "P"]
        elif st.kind == "cls":
            ends.update(cls=w[st.prefix], emb=b.emb, demb=b.demb if grad else None,
                        dcls=g[st.prefix] if grad else None)
        elif st.kind == "final_norm":
            ends["final_norm"] = True
            weights(st.prefix, "g", "b")
        elif st.kind == "pool":
            ends["pooling"] = st.how
    return ModelPass(stack, ends)
