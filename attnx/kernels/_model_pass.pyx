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

It covers every SequenceModel configuration (any stem, the class token, every pooling);
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
from attnx.kernels._blocks cimport (BlockStack, Stack, Block, stack_forward, stack_backward, ptr,
                            norm_of)
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


# One stem layer: windows of its input, one GEMM + bias, SiLU.
cdef struct StemLayer:
    Geom g                  # the windows over the input (nb, t_in, c) -> (nb, n, l * c)
    const void *a           # the input A_i (nb * t_in, c)
    const uint8_t *km       # its steps' key padding mask (nb, t_in) or NULL
    void *u                 # the windows (nb * n, l * c)
    const void *w           # (l * c, d), (d,)
    const void *b
    void *z                 # U W + b (nb * n, d)
    void *s                 # silu(z): the output A_{i+1}
    void *sg                # sigmoid(z) (training) or NULL
    void *ds                # backward: dL/dA_{i+1}, then dL/dz in place
    void *du                # dL/dU
    void *dw
    void *db
    void *da                # dL/dA_i: the previous layer's ds (NULL for layer 0: dL/dX)


cdef void stem_forward(floating *tag, const StemLayer *layers, Py_ssize_t n_stem,
                       Py_ssize_t d, int nth) noexcept nogil:
    cdef Py_ssize_t i, rows
    cdef const StemLayer *L
    for i in range(n_stem):
        L = &layers[i]
        rows = L.g.nb * L.g.n
        unfold(&L.g, <const floating *> L.a, L.km, <floating *> L.u, nth)
        linear_fwd(<const floating *> L.u, <const floating *> L.w, <const floating *> L.b,
                   <floating *> L.z, <const floating *> NULL, rows, L.g.l * L.g.c, d, 1, nth)
        silu_fwd_rows(<const floating *> L.z, <floating *> L.s, <floating *> L.sg, rows, d,
                      nth)


cdef void stem_backward(floating *tag, const StemLayer *layers, Py_ssize_t n_stem,
                        Py_ssize_t d, int nth, floating *dx) noexcept nogil:
    cdef Py_ssize_t i, rows
    cdef const StemLayer *L
    cdef floating *target
    for i in reversed(range(n_stem)):
        L = &layers[i]
        rows = L.g.nb * L.g.n
        silu_bwd_rows(<const floating *> L.ds, <const floating *> L.z,
                      <const floating *> L.sg, <floating *> L.ds, rows, d, nth)
        target = <floating *> L.da if i > 0 else dx
        linear_bwd(<const floating *> L.ds, <const floating *> L.u, <const floating *> L.w,
                   <floating *> L.dw, <floating *> L.db,
                   <floating *> L.du if target != NULL else NULL, rows, L.g.l * L.g.c, d)
        if target != NULL:
            fold(&L.g, <const floating *> L.du, L.km, target, nth)


# The two ends' sizes and operands (pointers into the model's buffers and weights).
cdef struct Ends:
    Py_ssize_t nb, t, rows, k, d, n_out
    Py_ssize_t n            # tokens the embedding makes per sequence (t - 1 with cls)
    Py_ssize_t rows_in, k_in    # the model's input X (dL/dX): nb * steps, n_features
    StemLayer *stem         # the stem's layers (n_stem of them; the last one's s is x)
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
    Norm lnf                # the final LayerNorm (pre-norm)
    void *h_top             # H_L
    void *hf                # LN_f(H_L) (H_L without)
    const uint8_t *km       # the blocks' key padding mask (nb, t) or NULL
    void *pooled            # (nb, d) (hf without pooling)
    const void *w_head      # (d, n_out), (n_out,)
    const void *b_head
    # backward
    void *dy                # dL/dY (the head's output rows)
    void *dpooled           # (nb, d) with pooling
    void *dhf               # dL/dF
    void *dcur              # the blocks' dL/dH_L on entry (da with the final norm,
                            # else dhf), dL/dH_0 after them
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
    stack_forward(tag, st, blocks)
    if e.final_norm:
        norm_forward(<const floating *> e.h_top, <floating *> e.hf, &e.lnf)
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
    cdef floating *dcur = <floating *> e.dcur
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
        norm_backward(<const floating *> e.dhf, <const floating *> e.h_top, dcur,
                      <const floating *> NULL, &e.lnf)
    stack_backward(tag, st, blocks)
    if e.cls != NULL:   # the class token's rows
        cls_bwd(dcur, <floating *> e.demb, <floating *> e.dcls, e.nb, e.n, e.d, False, e.nth)
        dcur = <floating *> e.demb
    if e.dpos != NULL:
        positions_bwd(dcur, <floating *> e.dpos, e.nb * e.n, e.d, e.n, e.tp, e.nth)
    linear_bwd(dcur, <const floating *> e.x, <const floating *> e.w_emb,
               <floating *> e.dw_emb, <floating *> e.db_emb,
               <floating *> e.stem[e.n_stem - 1].ds if e.n_stem else dx, e.nb * e.n, e.k, e.d)
    if e.n_stem:
        stem_backward(tag, e.stem, e.n_stem, e.d, e.nth, dx)


cdef class ModelPass:
    """The whole model over one set of buffers (see the module docstring): a built
    BlockStack and `ends`, a dict of the ends' arrays and sizes:

    sizes: nb, t (the blocks' tokens per sequence), n (the embedding's: t - 1 with the
        class token, else t), steps (the input's steps per sequence), n_features,
        n_outputs, nth, pooling (None, "mean", "last", "max" or "cls"), final_norm,
        zero_padded (without pooling, whether the pass zeroes the padded rows of Y and
        dY: not when the caller de-normalises Y first);
    x_in (nb * steps, n_features) the model's input; x the embedding's input (x_in, or
        the last stem layer's s); stem: a list of one dict per stem layer with kernel,
        stride, pad_left, pad_right, t_in (its input steps), km (its input's key mask,
        uint8 (nb, t_in), or None), W, b, u, z, s, sg (None at inference) and for
        training dW, db, ds, du; embed.W, embed.b, pos (None, or the (>= n, d) table
        added with the bias), cls (None, or the (d,) class token) and emb (the
        embedding's rows before it), h0, h_top, hf, km (the blocks' uint8 (nb, t) or
        None), pooled, idx (max pooling's int64 (nb, d)), head.W, head.b; the final
        norm's norm.g, norm.b, norm.dg, norm.db, st, part and eps (final_norm);
    for a training pass dy, dpooled, dhf, dcur, demb and the weights' gradients
        (embed.dW, embed.db, head.dW, head.db, pos.dP or None, dcls).

    Missing keys of an optional part (no stem, no class token) read as absent. Holds
    references to everything it points into.
    """
    cdef Ends e
    cdef BlockStack stack
    cdef readonly bint f64
    cdef list keep

    def __init__(self, BlockStack stack, dict ends):
        cdef Ends *e = &self.e
        cdef Stack *st = &stack.st
        cdef Py_ssize_t nb = ends["nb"], t = ends["t"], rows, d = st.d
        cdef int tn
        cdef void *v
        self.stack, self.keep, self.f64 = stack, [ends], stack.f64
        tn = cnp.NPY_FLOAT64 if stack.f64 else cnp.NPY_FLOAT32
        rows = nb * t
        if rows != st.rows:
            raise ValueError(f"the ends' {nb} x {t} rows do not match the stack's {st.rows}")
        pool = ends["pooling"]
        if pool not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pool!r}")
        e.nb, e.t, e.rows, e.d = nb, t, rows, d
        e.n = ends.get("n", t)
        e.k, e.n_out, e.nth = ends["n_features"], ends["n_outputs"], ends["nth"]
        e.k_in = e.k
        e.rows_in = nb * ends.get("steps", e.n)
        e.pool = POOLINGS.index(pool)
        e.final_norm = ends["final_norm"]
        ptr("h0", ends["h0"], rows, d, tn, False, &e.h0)
        if e.h0 != stack.blocks[0].h:
            raise ValueError("h0 must be the first block's input")
        ptr("cls", ends.get("cls"), d, -1, tn, True, &v)
        e.cls = v
        if e.n != t - (e.cls != NULL):
            raise ValueError(f"n must be t - 1 = {t - 1} with the class token and t = {t} "
                             f"without, got n={e.n}")
        if (e.cls != NULL) != (e.pool == POOL_CLS):
            raise ValueError("the class token (cls) goes with pooling='cls' only")
        ptr("emb", ends.get("emb"), nb * e.n, d, tn, e.cls == NULL, &e.emb)
        ptr("km", ends["km"], nb, t, cnp.NPY_UINT8, True, &v)
        e.km = <const uint8_t *> v
        self._stem(ends, tn, st.store)
        if e.n_stem:
            e.k = d
            ptr("x", ends["x"], nb * e.n, d, tn, False, &v)
            if v != e.stem[e.n_stem - 1].s:
                raise ValueError("with a stem x must be the last stem layer's s")
        else:
            ptr("x", ends["x"], nb * e.n, e.k, tn, False, &v)
        e.x = v
        ptr("embed.W", ends["embed.W"], e.k, d, tn, False, &v)
        e.w_emb = v
        ptr("embed.b", ends["embed.b"], d, -1, tn, False, &v)
        e.b_emb = v
        ptr("pos", ends["pos"], -e.n, d, tn, True, &v)
        e.pos = v
        ptr("h_top", ends["h_top"], rows, d, tn, False, &e.h_top)
        if e.h_top != stack.blocks[st.n_layers - 1].h_out:
            raise ValueError("h_top must be the last block's output")
        ptr("hf", ends["hf"], rows, d, tn, False, &e.hf)
        if e.final_norm:
            norm_of(ends, "norm", rows, d, tn, e.nth, ends["st"], ends["part"], &e.lnf)
        elif e.hf != e.h_top:
            raise ValueError("without the final norm hf must be h_top")
        ptr("pooled", ends["pooled"], rows if e.pool == POOL_NONE else nb, d, tn, False,
            &e.pooled)
        if e.pool == POOL_NONE and e.pooled != e.hf:
            raise ValueError("without pooling, pooled must be hf")
        ptr("idx", ends.get("idx"), nb, d, cnp.NPY_INT64, e.pool != POOL_MAX, &v)
        e.idx = <int64_t *> v
        ptr("head.W", ends["head.W"], d, e.n_out, tn, False, &v)
        e.w_head = v
        ptr("head.b", ends["head.b"], e.n_out, -1, tn, False, &v)
        e.b_head = v
        e.zero_padded = ends["zero_padded"] and e.pool == POOL_NONE and e.km != NULL
        if not st.store:
            return
        ptr("dy", ends["dy"], rows if e.pool == POOL_NONE else nb, e.n_out, tn, False, &e.dy)
        ptr("dpooled", ends["dpooled"], nb, d, tn, e.pool == POOL_NONE, &e.dpooled)
        ptr("dhf", ends["dhf"], rows, d, tn, False, &e.dhf)
        ptr("dcur", ends["dcur"], rows, d, tn, False, &e.dcur)
        if e.dcur != st.dcur or (not e.final_norm and e.dcur != e.dhf):
            raise ValueError("dcur must be the stack's (dhf without the final norm)")
        ptr("embed.dW", ends["embed.dW"], e.k, d, tn, False, &e.dw_emb)
        ptr("embed.db", ends["embed.db"], d, -1, tn, False, &e.db_emb)
        ptr("head.dW", ends["head.dW"], d, e.n_out, tn, False, &e.dw_head)
        ptr("head.db", ends["head.db"], e.n_out, -1, tn, False, &e.db_head)
        dpos = ends["pos.dP"]
        ptr("pos.dP", dpos, -e.n, d, tn, True, &e.dpos)
        e.tp = 0 if dpos is None else dpos.shape[0]
        ptr("demb", ends.get("demb"), nb * e.n, d, tn, e.cls == NULL, &e.demb)
        ptr("dcls", ends.get("dcls"), d, -1, tn, e.cls == NULL, &e.dcls)

    cdef int _stem(self, dict ends, int tn, bint store) except -1:
        """The stem's layers from ends["stem"] (a list of dicts, see the class docstring)."""
        cdef Ends *e = &self.e
        cdef Py_ssize_t i, c, d = e.d, nb = e.nb, t_in = e.rows_in // max(e.nb, 1)
        cdef StemLayer *L
        cdef void *v
        layers = ends.get("stem") or []
        if not isinstance(layers, list):
            raise ValueError(f"stem must be a list of layer dicts, got {type(layers).__name__}")
        free(e.stem)   # __init__ called again
        e.stem = <StemLayer *> calloc(max(len(layers), 1), sizeof(StemLayer))
        if e.stem == NULL:
            raise MemoryError()
        e.n_stem = len(layers)
        ptr("x_in", ends.get("x_in", ends["x"]), e.rows_in, e.k_in, tn, False, &v)
        c = e.k_in
        for i, lay in enumerate(layers):
            L = &e.stem[i]
            p = f"stem.{i}."
            if lay["t_in"] != t_in:
                raise ValueError(f"{p}t_in must be {t_in} (the previous layer's output), "
                                 f"got {lay['t_in']}")
            L.g.nb, L.g.t, L.g.c = nb, t_in, c
            L.g.l, L.g.s = lay["kernel"], lay["stride"]
            L.g.pl, L.g.pr, L.g.rep = lay["pad_left"], lay["pad_right"], False
            if L.g.l < 1 or L.g.s < 1 or L.g.pl < 0 or L.g.pr < 0 or L.g.l > t_in:
                raise ValueError(f"{p}kernel, stride, pad_left, pad_right must fit the "
                                 f"layer's {t_in} steps, got {L.g.l}, {L.g.s}, {L.g.pl}, "
                                 f"{L.g.pr}")
            L.g.n = (t_in + L.g.pl + L.g.pr - L.g.l) // L.g.s + 1
            L.a = v
            ptr(p + "km", lay["km"], nb, t_in, cnp.NPY_UINT8, True, &v)
            L.km = <const uint8_t *> v
            if (L.km == NULL) != (e.km == NULL):
                raise ValueError(f"{p}km must be given exactly when the blocks' km is")
            ptr(p + "u", lay["u"], nb * L.g.n, L.g.l * c, tn, False, &L.u)
            ptr(p + "W", lay["W"], L.g.l * c, d, tn, False, &v)
            L.w = v
            ptr(p + "b", lay["b"], d, -1, tn, False, &v)
            L.b = v
            ptr(p + "z", lay["z"], nb * L.g.n, d, tn, False, &L.z)
            ptr(p + "s", lay["s"], nb * L.g.n, d, tn, False, &L.s)
            ptr(p + "sg", lay["sg"], nb * L.g.n, d, tn, not store, &L.sg)
            if store:
                ptr(p + "ds", lay["ds"], nb * L.g.n, d, tn, False, &L.ds)
                ptr(p + "du", lay["du"], nb * L.g.n, L.g.l * c, tn, False, &L.du)
                ptr(p + "dW", lay["dW"], L.g.l * c, d, tn, False, &L.dw)
                ptr(p + "db", lay["db"], d, -1, tn, False, &L.db)
                L.da = e.stem[i - 1].ds if i > 0 else NULL
            v, c, t_in = L.s, d, L.g.n
        if t_in != e.n:
            raise ValueError(f"the stem makes {t_in} tokens per sequence, n is {e.n}")
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
        """Every gradient from dL/dY in ends["dy"] (after a training forward); dL/dX
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
