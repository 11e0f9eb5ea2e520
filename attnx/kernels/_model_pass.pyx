"""A SequenceModel's whole pass as one compiled call each way.

attnx.kernels._blocks.BlockStack runs the transformer blocks; a ModelPass runs them between
the two ends of the model, on the same buffers:

    forward:  A_0 = X; per stem layer i (attnx.layers._stem):
                  U_i = windows of A_i (its steps' key mask),
                  A_{i+1} = silu(U_i W_i + b_i)          (attnx.kernels._embed, _seq, _mlp)
              E = A_L W_emb + b_emb (+ positions)        (attnx.kernels._seq linear core)
              H_0 = [cls; E] with the class token, else E
              H_L = blocks(H_0)                          (the BlockStack)
              F = LN_f(H_L) (pre-norm; else F = H_L)
              P = pool(F): mean or last valid token, per-feature maximum over the valid
                  tokens, the class token's row; none: P = F
              Y = P W_head + b_head (padded rows zeroed without pooling)
    backward: the same in reverse, every gradient written (not added), dL/dX when
              asked for.

The ends are built from typed operands, one class per stage: StemOperands (with its
StemActivations) per stem layer, EmbedEnd (input, embedding, positions), ClassToken,
PoolEnd (final norm, pooling) and HeadEnd. It covers every SequenceModel
configuration (any stem, the class token, every pooling);
the input X is the model's input buffer (or its instance-normalised copy), and Y the
array the caller passes: the instance norm / RevIN (its statistics, the
de-normalisation of Y and their backward) stays with the caller
(attnx.layers._instance_norm). The kernels and their order are the per-layer path's
(attnx.layers.sequence, which tests keep as the reference), so both compute the same
values bit for bit.
"""
from libc.stdint cimport uint8_t, int64_t
from libc.stdlib cimport calloc, free

cimport numpy as cnp

from attnx.kernels._blas cimport floating
from attnx.kernels._seq cimport (Norm, norm_forward, norm_backward, linear_fwd, linear_bwd,
                         positions_bwd, pool_fwd, pool_bwd, zero_rows)
from attnx.kernels._blocks cimport (BlockStack, NormWeights, Stack, Block, stack_forward,
                                   stack_backward, ptr, norm_of)
from attnx.kernels._embed cimport (Geom, unfold, fold, maxpool_fwd, maxpool_bwd, cls_fwd, cls_bwd,
                           first_fwd, first_bwd)
from attnx.kernels._mlp cimport silu_fwd_rows, silu_bwd_rows

cnp.import_array()

# pooling
cdef enum:
    POOL_NONE = 0
    POOL_MEAN = 1
    POOL_LAST = 2
    POOL_MAX = 3
    POOL_CLS = 4

POOLINGS = (None, "mean", "last", "max", "cls")


# One stem layer: windows of its input, one GEMM + bias, SiLU (the activations named
# as the model's buffers: su, sz, ss, ssg, dss, dsu).
cdef struct StemLayer:
    Geom g                  # the windows over the input (nb, t_in, c) -> (nb, n, l * c)
    const void *a           # the input A_i (nb * t_in, c)
    const uint8_t *km       # its steps' key padding mask (nb, t_in) or NULL
    void *su                # the windows (nb * n, l * c)
    const void *w           # (l * c, d), (d,)
    const void *b
    void *sz                # U W + b (nb * n, d)
    void *ss                # silu(sz): the output A_{i+1}
    void *ssg               # sigmoid(sz) (training) or NULL
    void *dss               # backward: dL/dA_{i+1}, then dL/dsz in place
    void *dsu               # dL/dU
    void *dw
    void *db
    void *da                # dL/dA_i: the previous layer's dss (NULL for layer 0: dL/dX)


cdef void stem_forward(floating *tag, const StemLayer *layers, Py_ssize_t n_stem,
                       Py_ssize_t d, int nth) noexcept nogil:
    cdef Py_ssize_t i, rows
    cdef const StemLayer *L
    for i in range(n_stem):
        L = &layers[i]
        rows = L.g.nb * L.g.n
        unfold(&L.g, <const floating *> L.a, L.km, <floating *> L.su, nth)
        linear_fwd(<const floating *> L.su, <const floating *> L.w, <const floating *> L.b,
                   <floating *> L.sz, <const floating *> NULL, rows, L.g.l * L.g.c, d, 1, nth)
        silu_fwd_rows(<const floating *> L.sz, <floating *> L.ss, <floating *> L.ssg, rows, d,
                      nth)


cdef void stem_backward(floating *tag, const StemLayer *layers, Py_ssize_t n_stem,
                        Py_ssize_t d, int nth, floating *dx) noexcept nogil:
    cdef Py_ssize_t i, rows
    cdef const StemLayer *L
    cdef floating *target
    for i in reversed(range(n_stem)):
        L = &layers[i]
        rows = L.g.nb * L.g.n
        silu_bwd_rows(<const floating *> L.dss, <const floating *> L.sz,
                      <const floating *> L.ssg, <floating *> L.dss, rows, d, nth)
        target = <floating *> L.da if i > 0 else dx
        linear_bwd(<const floating *> L.dss, <const floating *> L.su, <const floating *> L.w,
                   <floating *> L.dw, <floating *> L.db,
                   <floating *> L.dsu if target != NULL else NULL, rows, L.g.l * L.g.c, d)
        if target != NULL:
            fold(&L.g, <const floating *> L.dsu, L.km, target, nth)


# The two ends' sizes and operands (pointers into the model's buffers and weights,
# named as the buffers).
cdef struct Ends:
    Py_ssize_t nb, t, rows, k, d, n_out
    Py_ssize_t n            # tokens the embedding makes per sequence (t - 1 with cls)
    Py_ssize_t rows_in, k_in    # the model's input X (dL/dX): nb * steps, n_features
    StemLayer *stem         # the stem's layers (n_stem of them; the last one's ss is x)
    Py_ssize_t n_stem
    const void *cls         # the class token (d,) or NULL
    void *emb               # with it: the embedding's rows before the token (nb * n, d)
    void *demb
    void *dcls
    int64_t *idx            # max pooling's step per (sequence, feature) (nb, d)
    Py_ssize_t tp           # rows of the learned position table (its gradient's)
    int nth                 # threads of the elementwise passes
    int pool
    bint final_norm
    bint zero_padded        # zero the padded rows of Y (forward) and dY (backward)
    const void *x           # the embedding's input (nb * n, k)
    const void *w_emb       # (k, d), (d,)
    const void *b_emb
    void *h0                # H_0 (rows, d): the blocks' input
    const void *pos         # positions added with the bias ((>= t, d)) or NULL
    Norm norm               # the final LayerNorm (pre-norm) and its row statistics
    void *stf
    void *h_top             # H_L
    void *hf                # LN_f(H_L) (H_L without)
    const uint8_t *km       # the blocks' key padding mask (nb, t) or NULL
    void *pooled            # (nb, d) (hf without pooling)
    const void *w_head      # (d, n_out), (n_out,)
    const void *b_head
    # backward (the blocks' dL/dH_L: the stack's dcur, dhf without the final norm)
    void *dy                # dL/dY (the head's output rows)
    void *dpooled           # (nb, d) with pooling
    void *dhf               # dL/dF
    void *dw_emb
    void *db_emb
    void *dw_head
    void *db_head
    void *dpos              # learned positions' gradient (tp, d) or NULL


cdef void pass_forward(floating *tag, const Ends *e, const Stack *st, const Block *blocks,
                       floating *y) noexcept nogil:
    cdef Py_ssize_t head_rows = e.rows if e.pool == POOL_NONE else e.nb
    if e.n_stem:
        stem_forward(tag, e.stem, e.n_stem, e.d, e.nth)
    linear_fwd(<const floating *> e.x, <const floating *> e.w_emb,
               <const floating *> e.b_emb, <floating *> (e.emb if e.cls != NULL else e.h0),
               <const floating *> e.pos, e.nb * e.n, e.k, e.d, e.n, e.nth)
    if e.cls != NULL:
        cls_fwd(<const floating *> e.emb, <const floating *> e.cls, <floating *> e.h0, e.nb,
                e.n, e.d, e.nth)
    stack_forward(tag, st, blocks, <const floating *> NULL, <floating *> NULL)
    if e.final_norm:
        norm_forward(<const floating *> e.h_top, <floating *> e.hf, <floating *> e.stf,
                     &e.norm)
    if e.pool == POOL_MAX:
        maxpool_fwd(<const floating *> e.hf, e.km, <floating *> e.pooled, e.idx, e.nb, e.t,
                    e.d, e.nth)
    elif e.pool == POOL_CLS:
        first_fwd(<const floating *> e.hf, <floating *> e.pooled, e.nb, e.t, e.d, e.nth)
    elif e.pool != POOL_NONE:
        pool_fwd(<const floating *> e.hf, e.km, <floating *> e.pooled, e.nb, e.t, e.d,
                 e.pool == POOL_LAST, e.nth)
    linear_fwd(<const floating *> e.pooled, <const floating *> e.w_head,
               <const floating *> e.b_head, y, <const floating *> NULL, head_rows, e.d,
               e.n_out, 1, e.nth)
    if e.zero_padded:
        zero_rows(y, e.km, e.rows, e.n_out)


cdef void pass_backward(floating *tag, const Ends *e, const Stack *st, const Block *blocks,
                        floating *dx) noexcept nogil:
    cdef floating *dy = <floating *> e.dy
    cdef floating *dcur = <floating *> st.dcur
    if e.zero_padded:   # padded positions' dY is ignored
        zero_rows(dy, e.km, e.rows, e.n_out)
    if e.pool == POOL_NONE:
        linear_bwd(<const floating *> dy, <const floating *> e.pooled,
                   <const floating *> e.w_head, <floating *> e.dw_head,
                   <floating *> e.db_head, <floating *> e.dhf, e.rows, e.d, e.n_out)
    else:
        linear_bwd(<const floating *> dy, <const floating *> e.pooled,
                   <const floating *> e.w_head, <floating *> e.dw_head,
                   <floating *> e.db_head, <floating *> e.dpooled, e.nb, e.d, e.n_out)
        if e.pool == POOL_MAX:
            maxpool_bwd(<const floating *> e.dpooled, e.idx, <floating *> e.dhf, e.nb, e.t,
                        e.d, e.nth)
        elif e.pool == POOL_CLS:
            first_bwd(<const floating *> e.dpooled, <floating *> e.dhf, e.nb, e.t, e.d, e.nth)
        else:
            pool_bwd(<const floating *> e.dpooled, e.km, <floating *> e.dhf, e.nb, e.t, e.d,
                     e.pool == POOL_LAST, e.nth)
    if e.final_norm:
        norm_backward(<const floating *> e.dhf, <const floating *> e.h_top,
                      <const floating *> e.stf, dcur, <const floating *> NULL, &e.norm)
    stack_backward(tag, st, blocks, dcur, dcur, <floating *> NULL)
    if e.cls != NULL:   # the class token's rows
        cls_bwd(dcur, <floating *> e.demb, <floating *> e.dcls, e.nb, e.n, e.d, False, e.nth)
        dcur = <floating *> e.demb
    if e.dpos != NULL:
        positions_bwd(dcur, <floating *> e.dpos, e.nb * e.n, e.d, e.n, e.tp, e.nth)
    linear_bwd(dcur, <const floating *> e.x, <const floating *> e.w_emb,
               <floating *> e.dw_emb, <floating *> e.db_emb,
               <floating *> e.stem[e.n_stem - 1].dss if e.n_stem else dx, e.nb * e.n, e.k, e.d)
    if e.n_stem:
        stem_backward(tag, e.stem, e.n_stem, e.d, e.nth, dx)


# ---------------------------------------------------------------- the ends' operands
cdef class StemActivations:
    """One stem layer's buffers: the windows su, sz = su W + b, ss = silu(sz), ssg =
    sigmoid(sz) (training) and the backward's dss, dsu (None at inference)."""
    cdef readonly object su, sz, ss, ssg, dss, dsu

    def __init__(self, su, sz, ss, ssg, dss, dsu):
        self.su, self.sz, self.ss, self.ssg, self.dss, self.dsu = su, sz, ss, ssg, dss, dsu


cdef class StemOperands:
    """One stem layer: its windows (kernel, stride, pad_left, pad_right over t_in
    input steps), its input steps' key padding mask km (uint8 (nb, t_in) or None),
    weights W (kernel * c, d), b (d,), gradients dW, db (None at inference) and
    activations (StemActivations)."""
    cdef readonly Py_ssize_t kernel, stride, pad_left, pad_right, t_in
    cdef readonly object km, W, b, dW, db
    cdef readonly StemActivations acts

    def __init__(self, Py_ssize_t kernel, Py_ssize_t stride, Py_ssize_t pad_left,
                 Py_ssize_t pad_right, Py_ssize_t t_in, km, W, b, dW, db,
                 StemActivations acts):
        if acts is None:
            raise TypeError("acts must be a StemActivations, got None")
        self.kernel, self.stride, self.pad_left, self.pad_right = kernel, stride, pad_left, pad_right
        self.t_in, self.km, self.W, self.b, self.dW, self.db = t_in, km, W, b, dW, db
        self.acts = acts


cdef class EmbedEnd:
    """The input end: the model's input x_in (nb * steps, n_features: X or its
    instance-normalised copy), the embedding's input x (x_in, or the last stem
    layer's ss), its weights W, b and gradients dW, db (None at inference), the
    positions pos added with the bias (None, or a (>= n, d) table), the learned
    table's gradient dpos (None unless trained) and h0, the blocks' input."""
    cdef readonly object x_in, x, W, b, dW, db, pos, dpos, h0

    def __init__(self, x_in, x, W, b, dW, db, pos, dpos, h0):
        self.x_in, self.x, self.W, self.b, self.dW, self.db = x_in, x, W, b, dW, db
        self.pos, self.dpos, self.h0 = pos, dpos, h0


cdef class ClassToken:
    """The class token cls (d,) put before the embedding's rows emb (nb * n, d), and
    their gradients dcls, demb (None at inference)."""
    cdef readonly object cls, dcls, emb, demb

    def __init__(self, cls, dcls, emb, demb):
        self.cls, self.dcls, self.emb, self.demb = cls, dcls, emb, demb


cdef class PoolEnd:
    """The blocks' output end: pooling (None, "mean", "last", "max" or "cls"), the
    final LayerNorm (NormWeights, None for post-norm) from h_top (the last block's
    output) into hf with row statistics stf (without it hf is h_top), the pooled
    rows (nb, d; hf without pooling), max pooling's idx (int64 (nb, d)) and the
    backward's dhf (the stack's dcur without the final norm) and dpooled."""
    cdef readonly object pooling
    cdef readonly NormWeights norm
    cdef readonly object h_top, hf, stf, pooled, idx, dhf, dpooled

    def __init__(self, pooling, NormWeights norm, h_top, hf, stf, pooled, idx, dhf,
                 dpooled):
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        self.pooling, self.norm, self.h_top, self.hf, self.stf = pooling, norm, h_top, hf, stf
        self.pooled, self.idx, self.dhf, self.dpooled = pooled, idx, dhf, dpooled


cdef class HeadEnd:
    """The head: Y = pooled W + b, W (d, n_outputs), b (n_outputs,), gradients dW, db
    and dy, dL/dY (None at inference); zero_padded: without pooling, whether the pass
    zeroes the padded rows of Y and dY (not when the caller de-normalises Y first)."""
    cdef readonly object W, b, dW, db, dy
    cdef readonly bint zero_padded

    def __init__(self, W, b, dW, db, dy, bint zero_padded):
        self.W, self.b, self.dW, self.db, self.dy = W, b, dW, db, dy
        self.zero_padded = zero_padded


cdef class ModelPass:
    """The whole model over one set of buffers (see the module docstring): a built
    BlockStack between the ends, for nb sequences with the blocks' key padding
    mask km (uint8 (nb, t) or None) and nth threads in the elementwise passes; stem
    a list of StemOperands (empty without a stem), embed an EmbedEnd, cls a
    ClassToken (None without the class token), pool a PoolEnd and head a HeadEnd.
    The sizes come from the arrays (t: the stack's rows per sequence; steps and
    n_features: x_in's; n_outputs: the head's). The final norm's backward scratch
    is the stack's (scratch.part). Holds references to everything it points into.
    """
    cdef Ends e
    cdef BlockStack stack
    cdef readonly bint f64
    cdef list keep

    def __init__(self, BlockStack stack, Py_ssize_t nb, km, int nth, list stem,
                 EmbedEnd embed, ClassToken cls, PoolEnd pool, HeadEnd head):
        cdef Ends *e = &self.e
        cdef Stack *st
        cdef Py_ssize_t t, rows, d
        cdef int tn
        cdef void *v
        if stack is None or embed is None or pool is None or head is None:
            raise TypeError("stack, embed, pool and head must not be None")
        st = &stack.st
        d = st.d
        if nb < 1 or st.rows % nb:
            raise ValueError(f"nb must be >= 1 and divide the stack's {st.rows} rows, got {nb}")
        if nth < 1:
            raise ValueError(f"nth must be >= 1, got {nth}")
        self.stack, self.keep, self.f64 = stack, [stem, embed, cls, pool, head], stack.f64
        tn = cnp.NPY_FLOAT64 if stack.f64 else cnp.NPY_FLOAT32
        t = st.rows // nb
        rows = st.rows
        e.nb, e.t, e.rows, e.d, e.nth = nb, t, rows, d, nth
        e.n = t - (cls is not None)
        e.pool = POOLINGS.index(pool.pooling)
        if (cls is not None) != (e.pool == POOL_CLS):
            raise ValueError("the class token (cls) goes with pooling='cls' only")
        # the input end
        x_in = embed.x_in
        if not isinstance(x_in, cnp.ndarray) or x_in.ndim != 2 or x_in.shape[0] % nb:
            raise ValueError(f"x_in must be a 2-D array of nb * steps rows (nb={nb}), got "
                             f"{getattr(x_in, 'shape', type(x_in).__name__)}")
        e.rows_in, e.k_in = x_in.shape[0], x_in.shape[1]
        e.k = e.k_in
        ptr("h0", embed.h0, rows, d, tn, False, &e.h0)
        if e.h0 != stack.blocks[0].h:
            raise ValueError("h0 must be the first block's input")
        ptr("km", km, nb, t, cnp.NPY_UINT8, True, &v)
        e.km = <const uint8_t *> v
        self._class_token(cls, tn, st.store)
        self._stem(stem, x_in, tn, st.store)
        if e.n_stem:
            e.k = d
            ptr("x", embed.x, nb * e.n, d, tn, False, &v)
            if v != e.stem[e.n_stem - 1].ss:
                raise ValueError("with a stem x must be the last stem layer's ss")
        else:
            ptr("x", embed.x, nb * e.n, e.k, tn, False, &v)
        e.x = v
        ptr("embed.W", embed.W, e.k, d, tn, False, &v)
        e.w_emb = v
        ptr("embed.b", embed.b, d, -1, tn, False, &v)
        e.b_emb = v
        ptr("pos", embed.pos, -e.n, d, tn, True, &v)
        e.pos = v
        self._pool(pool, tn)
        head_rows = rows if e.pool == POOL_NONE else nb
        W = head.W
        e.n_out = W.shape[1] if isinstance(W, cnp.ndarray) and W.ndim == 2 else 0
        ptr("head.W", W, d, e.n_out, tn, False, &v)
        e.w_head = v
        ptr("head.b", head.b, e.n_out, -1, tn, False, &v)
        e.b_head = v
        e.zero_padded = head.zero_padded and e.pool == POOL_NONE and e.km != NULL
        if not st.store:
            return
        ptr("dy", head.dy, head_rows, e.n_out, tn, False, &e.dy)
        ptr("dpooled", pool.dpooled, nb, d, tn, e.pool == POOL_NONE, &e.dpooled)
        ptr("dhf", pool.dhf, rows, d, tn, False, &e.dhf)
        if not e.final_norm and e.dhf != st.dcur:
            raise ValueError("without the final norm dhf must be the stack's dcur")
        ptr("embed.dW", embed.dW, e.k, d, tn, False, &e.dw_emb)
        ptr("embed.db", embed.db, d, -1, tn, False, &e.db_emb)
        ptr("head.dW", head.dW, d, e.n_out, tn, False, &e.dw_head)
        ptr("head.db", head.db, e.n_out, -1, tn, False, &e.db_head)
        ptr("dpos", embed.dpos, -e.n, d, tn, True, &e.dpos)
        e.tp = 0 if embed.dpos is None else embed.dpos.shape[0]

    cdef int _class_token(self, ClassToken cls, int tn, bint store) except -1:
        cdef Ends *e = &self.e
        cdef void *v
        if cls is None:
            e.cls = e.emb = e.demb = e.dcls = NULL
            return 0
        ptr("cls", cls.cls, e.d, -1, tn, False, &v)
        e.cls = v
        ptr("emb", cls.emb, e.nb * e.n, e.d, tn, False, &e.emb)
        ptr("demb", cls.demb, e.nb * e.n, e.d, tn, not store, &e.demb)
        ptr("dcls", cls.dcls, e.d, -1, tn, not store, &e.dcls)
        return 0

    cdef int _pool(self, PoolEnd pool, int tn) except -1:
        """The final norm and the pooling from pool (see PoolEnd)."""
        cdef Ends *e = &self.e
        cdef Stack *st = &self.stack.st
        cdef void *v
        e.final_norm = pool.norm is not None
        ptr("h_top", pool.h_top, e.rows, e.d, tn, False, &e.h_top)
        if e.h_top != self.stack.blocks[st.n_layers - 1].h_out:
            raise ValueError("h_top must be the last block's output")
        ptr("hf", pool.hf, e.rows, e.d, tn, False, &e.hf)
        if e.final_norm:
            norm_of("norm", pool.norm, self.stack.scratch.part if st.store else None, e.rows,
                    e.d, tn, e.nth, &e.norm)
            ptr("stf", pool.stf, 2, e.rows, tn, False, &e.stf)
        elif e.hf != e.h_top:
            raise ValueError("without the final norm hf must be h_top")
        ptr("pooled", pool.pooled, e.rows if e.pool == POOL_NONE else e.nb, e.d, tn, False,
            &e.pooled)
        if e.pool == POOL_NONE and e.pooled != e.hf:
            raise ValueError("without pooling, pooled must be hf")
        ptr("idx", pool.idx, e.nb, e.d, cnp.NPY_INT64, e.pool != POOL_MAX, &v)
        e.idx = <int64_t *> v
        return 0

    cdef int _stem(self, list layers, object x_in, int tn, bint store) except -1:
        """The stem's layers (StemOperands, see there) over the input x_in."""
        cdef Ends *e = &self.e
        cdef Py_ssize_t i, c, d = e.d, nb = e.nb, t_in = e.rows_in // e.nb
        cdef StemLayer *L
        cdef StemOperands lay
        cdef StemActivations a
        cdef void *v
        if layers is None:
            raise TypeError("stem must be a list of StemOperands (empty without a stem)")
        free(e.stem)   # __init__ called again
        e.stem = <StemLayer *> calloc(max(len(layers), 1), sizeof(StemLayer))
        if e.stem == NULL:
            raise MemoryError()
        e.n_stem = len(layers)
        ptr("x_in", x_in, e.rows_in, e.k_in, tn, False, &v)
        c = e.k_in
        for i in range(e.n_stem):
            lay = layers[i]
            if lay is None:
                raise TypeError(f"stem[{i}] must be a StemOperands, got None")
            a = lay.acts
            L = &e.stem[i]
            p = f"stem.{i}."
            if lay.t_in != t_in:
                raise ValueError(f"{p}t_in must be {t_in} (the previous layer's output), "
                                 f"got {lay.t_in}")
            L.g.nb, L.g.t, L.g.c = nb, t_in, c
            L.g.l, L.g.s = lay.kernel, lay.stride
            L.g.pl, L.g.pr, L.g.rep = lay.pad_left, lay.pad_right, False
            if L.g.l < 1 or L.g.s < 1 or L.g.pl < 0 or L.g.pr < 0 or L.g.l > t_in:
                raise ValueError(f"{p}kernel, stride, pad_left, pad_right must fit the "
                                 f"layer's {t_in} steps, got {L.g.l}, {L.g.s}, {L.g.pl}, "
                                 f"{L.g.pr}")
            L.g.n = (t_in + L.g.pl + L.g.pr - L.g.l) // L.g.s + 1
            L.a = v
            ptr(p + "km", lay.km, nb, t_in, cnp.NPY_UINT8, True, &v)
            L.km = <const uint8_t *> v
            if (L.km == NULL) != (e.km == NULL):
                raise ValueError(f"{p}km must be given exactly when the blocks' km is")
            ptr(p + "su", a.su, nb * L.g.n, L.g.l * c, tn, False, &L.su)
            ptr(p + "W", lay.W, L.g.l * c, d, tn, False, &v)
            L.w = v
            ptr(p + "b", lay.b, d, -1, tn, False, &v)
            L.b = v
            ptr(p + "sz", a.sz, nb * L.g.n, d, tn, False, &L.sz)
            ptr(p + "ss", a.ss, nb * L.g.n, d, tn, False, &L.ss)
            ptr(p + "ssg", a.ssg, nb * L.g.n, d, tn, not store, &L.ssg)
            if store:
                ptr(p + "dss", a.dss, nb * L.g.n, d, tn, False, &L.dss)
                ptr(p + "dsu", a.dsu, nb * L.g.n, L.g.l * c, tn, False, &L.dsu)
                ptr(p + "dW", lay.dW, L.g.l * c, d, tn, False, &L.dw)
                ptr(p + "db", lay.db, d, -1, tn, False, &L.db)
                L.da = e.stem[i - 1].dss if i > 0 else NULL
            v, c, t_in = L.ss, d, L.g.n
        if t_in != e.n:
            raise ValueError(f"the stem makes {t_in} tokens per sequence, the blocks take "
                             f"{e.n}")
        return 0

    def __dealloc__(self):
        free(self.e.stem)

    def forward(self, y):
        """The whole forward, the head's rows written to y ((nb, n_outputs) with
        pooling, else (nb * t, n_outputs))."""
        cdef void *out
        ptr("y", y, self.e.nb if self.e.pool != POOL_NONE else self.e.rows, self.e.n_out,
            cnp.NPY_FLOAT64 if self.f64 else cnp.NPY_FLOAT32, False, &out)
        with nogil:
            if self.f64:
                pass_forward(<double *> NULL, &self.e, &self.stack.st, self.stack.blocks,
                             <double *> out)
            else:
                pass_forward(<float *> NULL, &self.e, &self.stack.st, self.stack.blocks,
                             <float *> out)

    def backward(self, dx=None):
        """Every gradient from dL/dY in the head's dy (after a training forward); dL/dX
        into dx ((nb * steps, n_features)) when given."""
        cdef void *out
        if not self.stack.st.store:
            raise RuntimeError("backward needs a pass built for training")
        ptr("dx", dx, self.e.rows_in, self.e.k_in,
            cnp.NPY_FLOAT64 if self.f64 else cnp.NPY_FLOAT32, True, &out)
        with nogil:
            if self.f64:
                pass_backward(<double *> NULL, &self.e, &self.stack.st, self.stack.blocks,
                              <double *> out)
            else:
                pass_backward(<float *> NULL, &self.e, &self.stack.st, self.stack.blocks,
                              <float *> out)
