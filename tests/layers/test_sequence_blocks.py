"""attnx.kernels._blocks / attnx.kernels._model_pass / attnx.layers._sequence_blocks: a
SequenceModel's one path, its blocks and the whole model as one compiled call each way,
gives the values of the layer-by-layer reference (attnx.testing.reference_pass) bit for
bit (outputs, dL/dX, every gradient, attention weights, dropout masks) on every
attention path, norm, dropout, mask, stem, class token, pooling, positions, instance
norm, dtype and thread count; the stack is built once per buffers and checks its
input."""
import itertools

import numpy as np
import pytest
from attnx.runtime._threads import fixed_threads

from attnx import SequenceModel
from attnx.layers import _sequence_blocks
from attnx.kernels._blocks import (AttentionOperands, BlockActivations, BlockStack,
                                   BlockWeights, NormWeights, StackScratch)
from attnx.kernels._model_pass import (ClassToken, EmbedEnd, HeadEnd, ModelPass, PoolEnd,
                                       StemActivations, StemOperands)
from attnx.testing import reference_pass

CASES = list(itertools.product([None, "pre"], [0.0, 0.3], [False, True],
                               [np.float32, np.float64]))
PATHS = ["fused", "dense", "blocked"]


def _id(c):
    norm, drop, mask, dtype = c
    return (f"{norm or 'post'}-drop{drop}-{'mask' if mask else 'full'}-"
            f"{np.dtype(dtype).name}")


def _pair(dtype, path, **kw):
    """Two identical models (weights and dropout generator): one runs its own (compiled)
    pass, the other the layer-by-layer reference."""
    ms = []
    for _ in range(2):
        m = SequenceModel(3, 8, 2, 2, 4, d_hidden=12, max_len=13, dtype=dtype,
                          random_state=0, **kw)
        rng = np.random.default_rng(1)
        for n, v in m.params.items():   # non-trivial biases and norm gains
            if n.endswith((".b", "bq", "bk", "bv", "bo", "b1", "b2", ".g")) or n == "cls":
                v[...] = v + rng.normal(size=v.shape).astype(dtype) * 0.3
        for att in m.attn:
            att.attention = path
        ms.append(m)
    return ms


def _run(m, x, kpm, g, compiled):
    """Output, dL/dX, gradients, attention weights, inference output and dropout masks
    of one training step and one inference forward: the model's own pass when
    compiled, else the reference's."""
    if compiled:
        y = m.forward(x, kpm).copy()
        dx = m.backward(g).copy()
        masks = m.dropout_masks()
        weights = [w.copy() for w in m.attention_weights()]
        inference = m.forward(x, kpm, grad=False).copy()
    else:
        y, state = reference_pass.forward(m, x, kpm)
        dx = reference_pass.backward(m, state, g)
        masks = state.dropout_masks()
        weights = [a.attention_weights() for a in m.attn]
        inference = reference_pass.forward(m, x, kpm, grad=False)[0]
    return y, dx, m.grads.flat.copy(), weights, inference, masks


def _mask(rng, nb, t):
    lengths = np.array([t, max(t - 3, 1), 1, t - 1][:nb])
    return np.arange(t)[None, :] >= lengths[:, None]


@pytest.mark.parametrize("case", CASES, ids=_id)
@pytest.mark.parametrize("path", PATHS)
def test_compiled_blocks_equal_the_per_layer_path(case, path, rng):
    norm, drop, use_mask, dtype = case
    a, b = _pair(dtype, path, pooling="mean", positional="sinusoidal", norm=norm,
                 dropout=drop)
    x = rng.normal(size=(4, 9, 3)).astype(dtype)
    kpm = _mask(rng, 4, 9) if use_mask else None
    g = rng.normal(size=(4, 4)).astype(dtype)
    for step in range(2):   # the second step reuses the built stack
        got = _run(a, x, kpm, g, True)
        want = _run(b, x, kpm, g, False)
        for u, v in zip(got[:3] + (got[4],), want[:3] + (want[4],)):
            np.testing.assert_array_equal(u, v)
        for u, v in zip(got[3], want[3]):
            np.testing.assert_array_equal(u, v)
        assert set(got[5]) == set(want[5]) and bool(got[5]) == bool(drop)
        for n, v in got[5].items():
            np.testing.assert_array_equal(v, want[5][n])
    assert a.attn[0]._path(9, 9) == path
    assert all(buf.stacks for buf in a._bufs._items.values())       # compiled


@pytest.mark.parametrize("kw", [dict(pooling="cls", norm="pre", positional="learned"),
                                dict(pooling="max", stem=[(3, 2)], norm="pre", dropout=0.2),
                                dict(pooling=None, positional="rope", causal=True),
                                dict(pooling="last", stem=[(3, 1), (2, 2)], bias=False)],
                         ids=["cls", "stem-max", "rope-causal", "stem2-nobias"])
@pytest.mark.parametrize("threads", [1, 2])
def test_compiled_blocks_every_model_layout(kw, threads, rng):
    a, b = _pair(np.float64, "fused", **kw)
    x = rng.normal(size=(4, 13, 3))
    kpm = _mask(rng, 4, 13)
    with fixed_threads(threads):
        g = rng.normal(size=a.output_shape(4, 13))
        got = _run(a, x, kpm, g, True)
        want = _run(b, x, kpm, g, False)
    for u, v in zip(got[:3], want[:3]):
        np.testing.assert_array_equal(u, v)


WHOLE = [dict(pooling="last", positional="learned"),
         dict(pooling=None, positional="learned", norm="pre", dropout=0.2),
         dict(pooling=None, positional="none", norm="pre"),
         dict(pooling="mean", norm="pre", instance_norm="revin", n_outputs=3),
         dict(pooling=None, norm="pre", instance_norm="revin", n_outputs=3, dropout=0.1),
         dict(pooling="mean", norm="pre", instance_norm="input"),
         # max and class-token pooling, the class token, the stem (ModelPass covers all)
         dict(pooling="max"),
         dict(pooling="max", norm="pre", positional="learned", dropout=0.2),
         dict(pooling="cls", positional="sinusoidal"),
         dict(pooling="cls", norm="pre", positional="learned", dropout=0.2),
         dict(pooling="cls", norm="pre", positional="rope"),
         dict(pooling="mean", stem=((3, 1), (4, 2)), positional="learned"),
         dict(pooling=None, stem=((3, 1),), norm="pre", dropout=0.1),
         dict(pooling="cls", stem=((5, 2), (3, 2)), norm="pre", positional="learned"),
         dict(pooling="max", stem=((4, 2),), dropout=0.2, bias=False),
         dict(pooling="max", stem=((3, 2),), instance_norm="revin", n_outputs=3),
         dict(pooling="cls", stem=((3, 1),), instance_norm="input", norm="pre")]
WHOLE_IDS = ["last-learned-post", "none-learned-drop", "none-nopos", "revin-mean",
             "revin-none", "input-norm", "max-post", "max-pre-drop", "cls-post",
             "cls-pre-drop", "cls-rope", "stem-mean", "stem-none-drop", "stem-cls",
             "stem-max-drop", "revin-stem-max", "input-stem-cls"]


@pytest.mark.parametrize("kw", WHOLE, ids=WHOLE_IDS)
@pytest.mark.parametrize("mask", [False, True])
@pytest.mark.parametrize("input_grad", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_whole_pass_equals_the_per_call_path(kw, mask, input_grad, dtype, rng):
    """The embedding, blocks, final norm, pooling and head in one call (ModelPass)
    against the reference's call per stage."""
    kw = dict(kw)
    n_out = kw.pop("n_outputs", 4)
    ms = []
    for _ in range(2):
        m = SequenceModel(3, 8, 2, 2, n_out, d_hidden=12, max_len=13, dtype=dtype,
                          random_state=0, **kw)
        m.input_grad = input_grad
        ms.append(m)
    a, b = ms
    x = rng.normal(size=(4, 9, 3)).astype(dtype)
    kpm = _mask(rng, 4, 9) if mask else None
    g = rng.normal(size=a.output_shape(4, 9)).astype(dtype)
    for step in range(2):
        y, dx = a.forward(x, kpm).copy(), a.backward(g)
        ga, inf_a = a.grads.flat.copy(), a.forward(x, kpm, grad=False).copy()
        y2, state = reference_pass.forward(b, x, kpm)
        dx2 = reference_pass.backward(b, state, g)
        gb, inf_b = b.grads.flat.copy(), reference_pass.forward(b, x, kpm, grad=False)[0]
        np.testing.assert_array_equal(y, y2)
        np.testing.assert_array_equal(ga, gb)
        np.testing.assert_array_equal(inf_a, inf_b)
        if input_grad:
            np.testing.assert_array_equal(dx, dx2)
        else:
            assert dx is None and dx2 is None
    built = [c for buf in a._bufs._items.values() for c in buf.stacks.values()]
    assert built and all(c.whole is not None for c in built)


#: the constructor arguments of the typed operands, in order (they are attributes too)
FIELDS = {
    StemOperands: ("kernel", "stride", "pad_left", "pad_right", "t_in", "km", "W", "b", "dW",
                   "db", "acts"),
    StemActivations: ("su", "sz", "ss", "ssg", "dss", "dsu"),
    EmbedEnd: ("x_in", "x", "W", "b", "dW", "db", "pos", "dpos", "h0"),
    ClassToken: ("cls", "dcls", "emb", "demb"),
    PoolEnd: ("pooling", "norm", "h_top", "hf", "stf", "pooled", "idx", "dhf", "dpooled"),
    HeadEnd: ("W", "b", "dW", "db", "dy", "zero_padded")}
PASS_ARGS = ("stack", "nb", "km", "nth", "stem", "embed", "cls", "pool", "head")


def _with(obj, **change):
    """A copy of a typed operand with some arguments replaced."""
    return type(obj)(**{f: change.get(f, getattr(obj, f)) for f in FIELDS[type(obj)]})


def _pass_args(m, x, monkeypatch, grad=True):
    """The arguments the model builds its ModelPass from (name -> value)."""
    seen = []
    with monkeypatch.context() as mp:
        mp.setattr(_sequence_blocks, "ModelPass",
                   lambda *a: seen.append(dict(zip(PASS_ARGS, a))) or ModelPass(*a))
        m.forward(x, grad=grad)
    return seen[-1]


@pytest.mark.parametrize("kw", [dict(pooling="max", stem=((3, 2),)),
                                dict(pooling="cls", stem=((3, 1),), norm="pre")],
                         ids=["stem-max", "stem-cls"])
def test_whole_pass_checks_its_new_ends(kw, rng, monkeypatch):
    """The stem, class token and max pooling operands: a wrong one is named."""
    m = SequenceModel(3, 8, 2, 1, 4, random_state=0, **kw)
    x = rng.normal(size=(2, 9, 3)).astype(np.float32)
    args = _pass_args(m, x, monkeypatch)
    ModelPass(**args)   # as built
    lay = args["stem"][0]

    def bad(match, err=ValueError, **change):
        got = dict(args)
        for k, v in change.items():
            part, name = k.split("__")
            if part == "stem0":
                got["stem"] = [_with(lay, **{name: v})] + args["stem"][1:]
            elif part == "acts0":
                got["stem"] = [_with(lay, acts=_with(lay.acts, **{name: v}))]
            elif part == "pass":
                got[name] = v
            else:
                got[part] = _with(args[part], **{name: v})
        with pytest.raises(err, match=match):
            ModelPass(**got)

    bad(r"stem\.0\.su must have shape", acts0__su=np.zeros((3, 3), np.float32))
    bad(r"stem\.0\.W must be float32", stem0__W=lay.W.astype(np.float64))
    bad(r"stem\.0\.dss is required", acts0__dss=None)
    bad(r"stem\.0\.kernel, stride", stem0__kernel=10)
    bad(r"stem\.0\.t_in must be 9", stem0__t_in=8)
    bad(r"stem\.0\.km must be given", stem0__km=np.zeros((2, 9), np.uint8))
    bad(r"x must be the last stem layer's ss", embed__x=lay.acts.su[:, :8].copy())
    bad("'stem' has incorrect type", TypeError, pass__stem=tuple(args["stem"]))
    bad("the class token", pass__cls=ClassToken(np.zeros(8, np.float32), None, None, None)
        if kw["pooling"] == "max" else None)
    bad("nb must be >= 1 and divide", pass__nb=3)
    if kw["pooling"] == "max":
        bad("idx is required", pool__idx=None)
        bad("idx must be int64", pool__idx=args["pool"].idx.astype(np.int32))
    else:
        bad("the class token", pool__pooling="mean")
        bad(r"cls must have shape \(8,\)", cls__cls=np.zeros(7, np.float32))
        bad(r"emb must have shape", cls__emb=np.zeros((3, 8), np.float32))
        bad("dcls is required", cls__dcls=None)
        bad("stf must have shape", pool__stf=np.zeros((2, 3), np.float32))
        bad(r"norm\.dg is required", pool__norm=NormWeights(*(
            getattr(args["pool"].norm, f) for f in ("g", "b")), None, None, 1e-5))
    with pytest.raises(ValueError, match="pooling must be one of"):
        _with(args["pool"], pooling="median")
    # dL/dX has the input's steps, not the tokens'
    whole = ModelPass(**args)
    with pytest.raises(ValueError, match=r"dx must have shape \(18, 3\)"):
        whole.backward(np.zeros((args["stack"].scratch.dcur.shape[0], 3), np.float32))


def test_whole_pass_checks_its_arrays(rng):
    m = SequenceModel(3, 8, 2, 1, 4, pooling="mean", norm="pre", random_state=0)
    x = rng.normal(size=(2, 5, 3)).astype(np.float32)
    m.forward(x)
    whole = next(iter(next(iter(m._bufs._items.values())).stacks.values())).whole
    assert isinstance(whole, ModelPass)
    with pytest.raises(ValueError, match=r"y must have shape \(2, 4\)"):
        whole.forward(np.zeros((10, 4), np.float32))
    with pytest.raises(ValueError, match="y must be float32"):
        whole.forward(np.zeros((2, 4), np.float64))
    with pytest.raises(ValueError, match=r"dx must have shape \(10, 3\)"):
        whole.backward(np.zeros((10, 4), np.float32))
    with pytest.raises(ValueError, match="y must be C-contiguous"):
        whole.forward(np.zeros((4, 2), np.float32).T)


def test_stack_is_built_once_per_buffers_and_signature(rng):
    m = SequenceModel(3, 8, 2, 2, 4, pooling="mean", norm="pre", dropout=0.1,
                      random_state=0)
    x = rng.normal(size=(2, 5, 3)).astype(np.float32)
    for _ in range(3):
        m.forward(x)
        m.backward(np.ones((2, 4), np.float32))
    m.forward(x, grad=False)
    stacks = [s for b in m._bufs._items.values() for s in b.stacks.values()]
    assert len(stacks) == 2   # one training stack, one inference stack
    m.attn[0].attention = "dense"
    m.attn[1].attention = "dense"
    m.forward(x)   # another attention path: another stack over the same buffers
    assert sum(len(b.stacks) for b in m._bufs._items.values()) == 3


def test_block_stack_checks_its_buffers(rng):
    from attnx.layers import _block_operands
    m = SequenceModel(3, 8, 2, 1, 4, pooling="mean", norm="pre", random_state=0)
    m.forward(rng.normal(size=(2, 5, 3)).astype(np.float32))
    b = next(iter(m._bufs._items.values()))
    blk = m.stages.blocks[0]
    built = next(iter(b.stacks.values())).stack
    assert not built.f64
    att, _ = _block_operands.attention(m.attn[0], 2, 5, 5, True, 1, None, b.u1[0], None)
    assert isinstance(att, AttentionOperands)
    w = _block_operands.weights(blk.w, blk.g, "", True)
    assert isinstance(w, BlockWeights)
    names = ("h", "h_out", "zt", "u1", "u2", "st1", "st2", "hid", "s", "sg", "m1", "m2")
    kept = dict(zip(names, (b.hs[0], b.hs[1], b.zt[0], b.u1[0], b.u2[0], b.st1[0], b.st2[0],
                            b.hid[0], b.s[0], b.sg[0], None, None)))
    scratch = StackScratch(None, b.da, None, b.db, b.dzt, b.dhid, b.part)
    BlockStack([att], [w], [BlockActivations(**kept)], scratch, True, False, True, 1, 1)

    def bad(match, err=ValueError, acts=None, attention=None, weights=None, **kw):
        args = dict(attention=[att] if attention is None else attention,
                    weights=[w] if weights is None else weights,
                    acts=[BlockActivations(**dict(kept, **(acts or {})))], scratch=scratch,
                    pre=True, drop=False, store=True, nth=1, mlp_threads=1)
        args.update(kw)
        with pytest.raises(err, match=match):
            BlockStack(**args)

    bad("at least one layer", attention=[], weights=[])
    bad("one entry per block", weights=[w, w])
    bad("nth and mlp_threads must be >= 1", nth=0)
    bad("nth and mlp_threads must be >= 1", mlp_threads=0)
    bad("dropout runs in training forwards only", drop=True, store=False)
    bad("h must have shape", acts=dict(h=np.zeros((10, 7), np.float32)))
    bad(r"st2 must have shape \(2, 10\)", acts=dict(st2=np.zeros((10, 2), np.float32)))
    bad("sg is required", acts=dict(sg=None))
    bad("m1 is required", acts=dict(m1=None), drop=True, scratch=StackScratch(
        b.dzt, b.da, b.db, b.db, b.dzt, b.dhid, b.part))
    bad("ln1 is required with pre-norm",
        weights=[_block_operands.weights(blk.w, blk.g, "", False)])
    bad("W1 must be float32", weights=[BlockWeights(w.ln1, w.ln2, w.W1.astype(np.float64),
                                                    w.b1, w.W2, w.b2, w.dW1, w.db1, w.dW2,
                                                    w.db2)])
    bad("must have store=True", store=True, attention=[
        _block_operands.attention(m.attn[0], 2, 5, 5, False, 1, None, b.u1[0], None)[0]])
    bad("dcur is required", scratch=StackScratch(None, None, None, b.db, b.dzt, b.dhid,
                                                 b.part))
    bad("scratch must be a StackScratch", TypeError, scratch=None)
    with pytest.raises(ValueError, match="a training stack reads its built input"):
        built.forward(x=b.hs[0])
    with pytest.raises(ValueError, match="dctx is for a stack with cross-attention"):
        built.backward(dctx=b.hs[0])
    with pytest.raises(ValueError, match=r"dy must have shape \(10, 8\)"):
        built.backward(dy=b.hid[0])
    with pytest.raises(RuntimeError, match="store=True"):
        infer = SequenceModel(3, 8, 2, 1, 4, pooling="mean", random_state=0)
        infer.forward(rng.normal(size=(2, 5, 3)).astype(np.float32), grad=False)
        bi = next(iter(infer._bufs._items.values()))
        next(iter(bi.stacks.values())).stack.backward()


def test_training_step_allocates_no_buffers(rng):
    """After the first step, a training step (forward with dropout and a padding mask,
    backward, AdamW) and the estimators' trainer step allocate only small Python
    objects: less than one (B*T, d_model) activation buffer (64 KiB here)."""
    import tracemalloc

    from attnx import AdamW, TransformerClassifier
    from attnx.estimators import _training
    m = SequenceModel(4, 32, 4, 2, 3, pooling="mean", norm="pre", dropout=0.1,
                      positional="sinusoidal", random_state=0)
    x = rng.normal(size=(8, 64, 4)).astype(np.float32)
    kpm = np.zeros((8, 64), bool)
    kpm[0, 50:] = True
    y, dy = np.empty((8, 3), np.float32), np.ones((8, 3), np.float32)
    opt = AdamW(m.params, lr=1e-3)
    for _ in range(2):
        m.forward(x, kpm, out=y)
        m.backward(dy)
        opt.step(m.grads)
    tracemalloc.start()
    for _ in range(3):
        m.forward(x, kpm, out=y)
        m.backward(dy)
        opt.step(m.grads)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 32 * 1024, peak
    X = rng.normal(size=(64, 64, 2)).astype(np.float32)
    lab = rng.integers(0, 3, 64)
    clf = TransformerClassifier(random_state=0, epochs=1, tokenizer="patch").fit(X, lab)
    peaks = []
    step = _training.Trainer.step

    def traced(self, *a, **k):
        tracemalloc.start()
        out = step(self, *a, **k)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        return out

    try:
        _training.Trainer.step = traced
        clf.partial_fit(X, lab)
    finally:
        _training.Trainer.step = step
    assert peaks and max(peaks) < 32 * 1024, peaks   # clipping included (max_grad_norm=1)
