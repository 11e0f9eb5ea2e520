"""A SequenceModel's whole pass as one compiled call each way.

attnx.kernels._blocks.BlockStack runs the transformer blocks; a ModelPass runs them between
the two ends of the model, on the same buffers:

    forward:  H_0 = X W_emb + b_emb (+ positions)        (attnx.kernels._seq linear core)
              H_L = blocks(H_0)                          (the BlockStack)
              F = LN_f(H_L) (pre-norm; else F = H_L)
              P = pool(F) (mean or last valid token; none: P = F)
              Y = P W_head + b_head (padded rows zeroed without pooling)
    backward: the same in reverse, every gradient written (not added), dL/dX when
              asked for.

It covers the models without a convolutional stem and without a class token,
pooled by "mean", "last" or not at all (attnx.layers._sequence_blocks.whole_applies);
the input X is the model's input buffer (or its instance-normalised copy), and
Y the array the caller passes (the de-normalisation and the instance norm's own
backward stay with the caller). The kernels and their order are the per-call
path's (attnx.layers.sequence), so both compute the same values bit for bit.
"""
from libc.stdint cimport uint8_t

cimport numpy as cnp

from attnx.kernels._blas cimport floating
from attnx.kernels._seq cimport (Norm, norm_forward, norm_backward, linear_fwd, linear_bwd,
                         positions_bwd, pool_fwd, pool_bwd, zero_rows)
from attnx.kernels._blocks cimport (BlockStack, Stack, Block, stack_forward, stack_backward, ptr,
                            norm_of)

cnp.import_array()

# pooling
cdef enum:
    POOL_NONE = 0
    POOL_MEAN = 1
    POOL_LAST = 2


# The two ends' sizes and operands (pointers into the model's buffers and weights).
cdef struct Ends:
    Py_ssize_t nb, t, rows, k, d, n_out
    Py_ssize_t tp           # rows of the learned position table (its gradient's)
    int nth                 # threads of the elementwise passes
    int pool
    bint final_norm
    bint zero_padded        # zero the padded rows of Y (forward) and dY (backward)
    const void *x           # the embedding's input (rows, k)
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
    linear_fwd(<const floating *> e.x, <const floating *> e.w_emb,
               <const floating *> e.b_emb, <floating *> e.h0, <const floating *> e.pos,
               e.rows, e.k, e.d, e.t, e.nth)
    stack_forward(tag, st, blocks)
    if e.final_norm:
        norm_forward(<const floating *> e.h_top, <floating *> e.hf, &e.lnf)
    if e.pool != POOL_NONE:
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
        pool_bwd(<const floating *> e.dpooled, e.km, <floating *> e.dhf, e.nb, e.t, e.d,
                 e.pool == POOL_LAST, e.nth)
    if e.final_norm:
        norm_backward(<const floating *> e.dhf, <const floating *> e.h_top, dcur,
                      <const floating *> NULL, &e.lnf)
    stack_backward(tag, st, blocks)
    if e.dpos != NULL:
        positions_bwd(<const floating *> dcur, <floating *> e.dpos, e.rows, e.d, e.t, e.tp,
                      e.nth)
    linear_bwd(<const floating *> dcur, <const floating *> e.x, <const floating *> e.w_emb,
               <floating *> e.dw_emb, <floating *> e.db_emb, dx, e.rows, e.k, e.d)


cdef class ModelPass:
    """The whole model over one set of buffers (see the module docstring): a built
    BlockStack and `ends`, a dict of the two ends' arrays: x, embed.W, embed.b, h0,
    pos (None, or the (>= t, d) table added with the bias), h_top, hf, km (uint8
    (nb, t) or None), pooled, head.W, head.b, and for a training pass dy, dpooled,
    dhf, dcur and the weights' gradients (embed.dW, embed.db, head.dW, head.db, pos.dP
    or None); zero_padded (without pooling, whether the pass zeroes the padded rows
    of Y and dY: not when the caller de-normalises Y first); the final norm's norm.g, norm.b, norm.dg, norm.db, st,
    part and eps (final_norm), the sizes nb, t, n_features, n_outputs, the pooling
    ("mean", "last" or None) and nth. Holds references to everything it points into.
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
        if pool not in (None, "mean", "last"):
            raise ValueError(f"pooling must be None, 'mean' or 'last', got {pool!r}")
        e.nb, e.t, e.rows, e.d = nb, t, rows, d
        e.k, e.n_out, e.nth = ends["n_features"], ends["n_outputs"], ends["nth"]
        e.pool = POOL_NONE if pool is None else POOL_MEAN if pool == "mean" else POOL_LAST
        e.final_norm = ends["final_norm"]
        ptr("x", ends["x"], rows, e.k, tn, False, &v)
        e.x = v
        ptr("embed.W", ends["embed.W"], e.k, d, tn, False, &v)
        e.w_emb = v
        ptr("embed.b", ends["embed.b"], d, -1, tn, False, &v)
        e.b_emb = v
        ptr("h0", ends["h0"], rows, d, tn, False, &e.h0)
        if e.h0 != stack.blocks[0].h:
            raise ValueError("h0 must be the first block's input")
        ptr("pos", ends["pos"], -t, d, tn, True, &v)
        e.pos = v
        ptr("h_top", ends["h_top"], rows, d, tn, False, &e.h_top)
        if e.h_top != stack.blocks[st.n_layers - 1].h_out:
            raise ValueError("h_top must be the last block's output")
        ptr("hf", ends["hf"], rows, d, tn, False, &e.hf)
        if e.final_norm:
            norm_of(ends, "norm", rows, d, tn, e.nth, ends["st"], ends["part"], &e.lnf)
        elif e.hf != e.h_top:
            raise ValueError("without the final norm hf must be h_top")
        ptr("km", ends["km"], nb, t, cnp.NPY_UINT8, True, &v)
        e.km = <const uint8_t *> v
        ptr("pooled", ends["pooled"], rows if e.pool == POOL_NONE else nb, d, tn, False,
            &e.pooled)
        if e.pool == POOL_NONE and e.pooled != e.hf:
            raise ValueError("without pooling, pooled must be hf")
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
        ptr("pos.dP", dpos, -t, d, tn, True, &e.dpos)
        e.tp = 0 if dpos is None else dpos.shape[0]

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
        into dx ((nb * t, n_features)) when given."""
        cdef void *out
        if not self.stack.st.store:
            raise RuntimeError("backward needs a pass built for training")
        ptr("dx", dx, self.e.rows, self.e.k, cnp.NPY_FLOAT64 if self.f64 else cnp.NPY_FLOAT32,
            True, &out)
        with nogil:
            if self.f64:
                pass_backward(<double *> NULL, &self.e, &self.stack.st, self.stack.blocks,
                              <double *> out)
            else:
                pass_backward(<float *> NULL, &self.e, &self.stack.st, self.stack.blocks,
                              <float *> out)
