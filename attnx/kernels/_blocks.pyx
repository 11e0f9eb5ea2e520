"""A model's transformer blocks as one compiled call per direction.

attnx.SequenceModel (pre- or post-norm, dropout) and attnx.Transformer (no norm, self-
or cross-attention) run their blocks (LayerNorms, attention, dropout masks, SiLU MLP,
residuals; the formulas in SequenceModel's docstring) through this module. A
BlockStack is built once per set of buffers from typed operands, one class per stage
(AttentionOperands: the attention call; BlockWeights, with NormWeights for its
LayerNorms; BlockActivations; the shared StackScratch), its arrays checked and
turned into pointers then; forward() and backward() then run every block without
Python between the kernels (attnx.kernels._seq's LayerNorm and residual cores,
attnx.kernels._mlp's MLP, attnx.kernels._attnargs' attention layer with the
workspace's head kernels).

Cross-attention blocks attend to one context (the same rows for every such block,
as a Transformer's layers do); backward sums their dL/dcontext into one array, the
topmost block writing it and the ones below adding.

Thread policy as everywhere: the caller passes the counts (elementwise passes,
each attention layer's, the MLP's) and holds attnx.runtime._threads.blas_single around
the call.
"""
from libc.stdlib cimport calloc, free
from libc.string cimport memcpy

cimport numpy as cnp

from attnx.kernels._blas cimport floating
from attnx.kernels._attnargs cimport (AttnShape, AttnBuffers, AttnParams, Call, begin_call, take,
                                     check_parts, layer_forward, layer_backward, PATH_FUSED)
from attnx.kernels._attention cimport dense_heads
from attnx.kernels._flash cimport fused_heads
from attnx.kernels._seq cimport Norm, norm_forward, norm_backward, masked_add_rows, add_sub_rows
from attnx.kernels._mlp cimport mlp_fwd, mlp_bwd, mlp_threads as mlp_threads_for

cnp.import_array()


cdef inline void block_forward(floating *tag, const Stack *st, const Block *bl) noexcept nogil:
    """One block's forward (SequenceModel's docstring's formulas)."""
    cdef Py_ssize_t rows = st.rows, d = st.d
    cdef floating *u2
    cdef floating *out
    cdef floating *branch = <floating *> st.branch
    if st.pre:
        norm_forward(<const floating *> bl.h, <floating *> bl.u1, <floating *> bl.st1, &bl.ln1)
    # the Call's y is the branch buffer with dropout (then masked and added), else
    # Z~ with the residual H_i added by the kernel
    layer_forward(<floating *> bl.fwd.y, &bl.fwd, bl.heads)
    if st.drop:
        masked_add_rows(<floating *> bl.zt, <const floating *> bl.h, branch, NULL,
                        <const floating *> bl.m1, rows, d, st.nth)
    if st.pre:
        norm_forward(<const floating *> bl.zt, <floating *> bl.u2, <floating *> bl.st2, &bl.ln2)
        u2 = <floating *> bl.u2
    else:
        u2 = <floating *> bl.zt
    # the MLP adds its own residual: out = MLP(u2) + u2
    out = branch if st.drop else <floating *> bl.h_out
    mlp_fwd(u2, out, &bl.mlp)
    if st.drop:   # H' = Z~ + mask2 * (out - u2)
        masked_add_rows(<floating *> bl.h_out, <const floating *> bl.zt, branch, u2,
                        <const floating *> bl.m2, rows, d, st.nth)
    elif st.pre:  # the residual is Z~, not u2
        add_sub_rows(<floating *> bl.h_out, <const floating *> bl.zt, u2, rows, d, st.nth)


cdef void stack_forward(floating *tag, const Stack *st, const Block *blocks,
                        const floating *x, floating *y) noexcept nogil:
    """Every block's forward (tag: the float type); x, y: this call's input of the
    first block and output of the last (NULL: the built ones)."""
    cdef Py_ssize_t i, last = st.n_layers - 1
    cdef Block one   # a block with this call's input or output
    for i in range(st.n_layers):
        if (i == 0 and x != NULL) or (i == last and y != NULL):
            memcpy(&one, &blocks[i], sizeof(Block))
            if i == 0 and x != NULL:
                one.h = <void *> x
                if not st.pre:
                    one.fwd.x = x
                if not st.drop:
                    one.fwd.residual = x
            if i == last and y != NULL:
                one.h_out = y
            block_forward(tag, st, &one)
        else:
            block_forward(tag, st, &blocks[i])


cdef inline floating *branch_grad(floating *g, const void *mask, floating *buf,
                                  const Stack *st) noexcept nogil:
    """dL/d(a residual branch's output) from g = dL/d(the sum): g itself, or with
    dropout mask * g written to buf."""
    if not st.drop:
        return g
    masked_add_rows(buf, NULL, g, NULL, <const floating *> mask, st.rows, st.d, st.nth)
    return buf


cdef void stack_backward(floating *tag, const Stack *st, const Block *blocks,
                         const floating *dtop, floating *dbottom,
                         floating *dctx) noexcept nogil:
    """Every block's backward, top down: block i reads dL/dH_{i+1} (dtop for the last,
    else st.dcur) and writes dL/dH_i (dbottom for the first, else st.dcur); the
    cross blocks' dL/dcontext summed into dctx."""
    cdef Py_ssize_t i, rows = st.rows, d = st.d
    cdef const Block *bl
    cdef Call c
    cdef bint ctx_seen = False
    cdef floating *dcur = <floating *> st.dcur
    cdef floating *dbr_buf = <floating *> st.dbr
    cdef floating *db = <floating *> st.db
    cdef floating *dzt = <floating *> st.dzt
    cdef const floating *din
    cdef floating *dout
    cdef floating *dbr
    cdef floating *datt
    cdef const floating *u2
    i = st.n_layers - 1
    while i >= 0:
        bl = &blocks[i]
        din = dtop if i == st.n_layers - 1 else dcur
        dout = dcur if i > 0 else dbottom
        if dout == NULL and st.pre:   # LN1's gradients still run: dL/dH_0 to scratch
            dout = dcur
        u2 = <const floating *> (bl.u2 if st.pre else bl.zt)
        # the MLP branch; the kernel returns dL/du2 + dbr
        dbr = branch_grad(<floating *> din, bl.m2, dbr_buf, st)
        if st.pre:    # dZ~ = LN2'(db - dbr) + din
            mlp_bwd(dbr, u2, db, &bl.mlp)
            add_sub_rows(db, NULL, dbr, rows, d, st.nth)
            norm_backward(db, <const floating *> bl.zt, <const floating *> bl.st2, dzt, din,
                          &bl.ln2)
        elif st.drop:   # dZ~ = (db - dbr) + din
            mlp_bwd(dbr, u2, db, &bl.mlp)
            memcpy(dzt, db, rows * d * sizeof(floating))
            add_sub_rows(dzt, din, dbr, rows, d, st.nth)
        else:         # the kernel's residual already is din
            mlp_bwd(dbr, u2, dzt, &bl.mlp)
        # the attention branch
        datt = branch_grad(dzt, bl.m1, dbr_buf, st)
        memcpy(&c, &bl.bwd, sizeof(Call))
        c.dy = datt
        if bl.cross:   # the topmost cross block writes dL/dcontext, the ones below add
            c.dctx = dctx
            c.dm.dctx_beta = 1 if ctx_seen else 0
            ctx_seen = True
        if st.pre:    # db = dL/d(LN1 output); dH = LN1'(db) + dZ~
            c.dx = db
            c.dm.dx_beta = 0
            layer_backward(<const floating *> datt, &c, bl.heads)
            norm_backward(db, <const floating *> bl.h, <const floating *> bl.st1, dout, dzt,
                          &bl.ln1)
        else:         # dH = dZ~ + attention'(datt)
            if dout != NULL:
                memcpy(dout, dzt, rows * d * sizeof(floating))
            c.dx = dout
            c.dm.dx_beta = 1
            layer_backward(<const floating *> datt, &c, bl.heads)
        i -= 1


cdef int ptr(str name, object a, Py_ssize_t rows, Py_ssize_t cols, int type_num,
             bint optional, void **out) except -1:
    """take() for a buffer the stack writes or reads (writeable unless None)."""
    return take(name, a, rows, cols, type_num, a is not None, optional, out)


cdef int norm_of(str name, NormWeights w, object part, Py_ssize_t rows, Py_ssize_t d,
                 int type_num, int nth, Norm *n) except -1:
    cdef void *v
    if w is None:
        raise ValueError(f"{name} is required with pre-norm, got None")
    ptr(name + ".g", w.g, d, -1, type_num, False, &v)
    n.g = v
    ptr(name + ".b", w.b, d, -1, type_num, False, &v)
    n.b = v
    ptr(name + ".dg", w.dg, d, -1, type_num, False, &n.dg)
    ptr(name + ".db", w.db, d, -1, type_num, False, &n.db)
    if part is None:
        n.part, n.ldpart = NULL, 0
    else:
        ptr("part", part, -1, part.shape[1], type_num, False, &n.part)
        if part.shape[1] < 2 * d:
            raise ValueError(f"part must have >= {2 * d} columns, got {part.shape[1]}")
        n.ldpart = part.shape[1]
    n.rows, n.d, n.eps = rows, d, w.eps
    n.nthreads = nth if part is None or nth <= part.shape[0] else <int> part.shape[0]
    return 0


# ---------------------------------------------------------------- the stack's operands
cdef class NormWeights:
    """A LayerNorm's gain g and bias b (d,), their gradients dg, db and eps."""

    def __init__(self, g, b, dg, db, double eps):
        if not eps > 0:
            raise ValueError(f"eps must be > 0, got {eps}")
        self.g, self.b, self.dg, self.db, self.eps = g, b, dg, db, eps


cdef class AttentionOperands:
    """One block's attention call: the layer's workspace (shape, bufs, params: with
    store, bufs already for_backward()), the call's thread count, the key padding
    mask (uint8 (nb, tk) or None), the rotary tables (None or (cos, sin)) and, for a
    cross-attention shape, the context rows ctx (nb * tk, d)."""

    def __init__(self, AttnShape shape, AttnBuffers bufs, AttnParams params, int threads,
                 mask, rope, ctx):
        if shape is None or bufs is None or params is None:
            raise TypeError("shape, bufs and params must not be None")
        self.shape, self.bufs, self.params, self.threads = shape, bufs, params, threads
        self.mask, self.rope, self.ctx = mask, rope, ctx


cdef class BlockWeights:
    """One block's LayerNorms (NormWeights; None for post-norm), MLP weights W1 (d,
    dh), b1 (dh,), W2 (dh, d), b2 (d,) and their gradients (biases None without)."""

    def __init__(self, NormWeights ln1, NormWeights ln2, W1, b1, W2, b2, dW1, db1, dW2, db2):
        self.ln1, self.ln2 = ln1, ln2
        self.W1, self.b1, self.W2, self.b2 = W1, b1, W2, b2
        self.dW1, self.db1, self.dW2, self.db2 = dW1, db1, dW2, db2


cdef class BlockActivations:
    """One block's activations: its input h (hs[i]) and output h_out (hs[i + 1]), zt,
    the pre-norm u1, u2, st1, st2, the MLP's hid, s, sg (training) and the dropout
    multipliers m1, m2 (None where the configuration has none)."""

    def __init__(self, h, h_out, zt, u1, u2, st1, st2, hid, s, sg, m1, m2):
        self.h, self.h_out, self.zt, self.u1, self.u2 = h, h_out, zt, u1, u2
        self.st1, self.st2, self.hid, self.s, self.sg = st1, st2, hid, s, sg
        self.m1, self.m2 = m1, m2


cdef class StackScratch:
    """The stack's shared buffers: branch (dropout's branch output, forward) and the
    backward scratch dcur, dbr (dropout), db, dzt, dhid, part (the LayerNorms'
    per-thread sums); None where unused (every backward one at inference)."""

    def __init__(self, branch, dcur, dbr, db, dzt, dhid, part):
        self.branch, self.dcur, self.dbr, self.db = branch, dcur, dbr, db
        self.dzt, self.dhid, self.part = dzt, dhid, part


cdef class BlockStack:
    """Every block of a model over one set of buffers (see the module docstring):
    one AttentionOperands, BlockWeights and BlockActivations per block, the shared
    StackScratch; pre: pre-norm (else no LayerNorm); drop: dropout; store: a
    training stack; nth: the elementwise passes' threads, mlp_threads the MLP
    caller's count. Holds references to every array it points into, so the
    pointers stay valid as long as it lives."""

    def __cinit__(self):
        self.blocks = NULL

    def __dealloc__(self):
        free(self.blocks)

    def __init__(self, list attention, list weights, list acts, StackScratch scratch,
                 bint pre, bint drop, bint store, int nth, int mlp_threads):
        cdef Py_ssize_t i, L = len(attention), rows, d
        cdef AttnShape shape
        cdef AttentionOperands att
        cdef const void *ctx0 = NULL
        cdef void *v
        cdef int tn
        if L < 1:
            raise ValueError("a block stack needs at least one layer")
        if len(weights) != L or len(acts) != L:
            raise ValueError(f"attention, weights and acts must have one entry per block, "
                             f"got {L}, {len(weights)}, {len(acts)}")
        if nth < 1 or mlp_threads < 1:
            raise ValueError(f"nth and mlp_threads must be >= 1, got {nth}, {mlp_threads}")
        if scratch is None:
            raise TypeError("scratch must be a StackScratch, got None")
        if drop and not store:
            raise ValueError("dropout runs in training forwards only (store=True)")
        self.keep = [attention, weights, acts]
        self.scratch = scratch
        att = attention[0]
        shape = att.shape
        rows, d, tn = shape.nb * shape.tq, shape.d, shape.type_num
        self.f64 = shape.itemsize == 8
        free(self.blocks)   # __init__ called again
        self.blocks = <Block *> calloc(L, sizeof(Block))
        if self.blocks == NULL:
            raise MemoryError()
        self.st.n_layers, self.st.rows, self.st.d, self.st.nth = L, rows, d, nth
        self.st.pre, self.st.drop, self.st.store = pre, drop, store
        self.ctx_rows = 0
        ptr("branch", scratch.branch, rows, d, tn, not drop, &self.st.branch)
        for i in range(L):
            att = attention[i]
            self._block(i, att, weights[i], acts[i], mlp_threads)
            if att.shape.cross:
                if ctx0 == NULL:
                    ctx0, self.ctx_rows = self.blocks[i].fwd.ctx, att.shape.nb * att.shape.tk
                elif self.blocks[i].fwd.ctx != ctx0:
                    raise ValueError(f"block {i}'s context must be the other cross blocks' "
                                     f"(their dL/dcontext is one sum)")
        if store:
            ptr("dcur", scratch.dcur, rows, d, tn, False, &self.st.dcur)
            ptr("db", scratch.db, rows, d, tn, not (pre or drop), &self.st.db)
            ptr("dzt", scratch.dzt, rows, d, tn, False, &self.st.dzt)
            ptr("dbr", scratch.dbr, rows, d, tn, not drop, &self.st.dbr)

    cdef int _block(self, Py_ssize_t i, AttentionOperands att, BlockWeights w,
                    BlockActivations a, int mlp_threads) except -1:
        """Block i's operands checked into self.blocks[i]."""
        cdef Block *bl = &self.blocks[i]
        cdef AttnShape shape = att.shape
        cdef Py_ssize_t rows = self.st.rows, d = self.st.d, dh
        cdef int tn = shape.type_num
        cdef bint pre = self.st.pre, drop = self.st.drop, store = self.st.store
        cdef void *v
        if w is None or a is None:
            raise TypeError(f"block {i}'s weights and acts must not be None")
        if shape.nb * shape.tq != rows or shape.d != d or tn != (
                cnp.NPY_FLOAT64 if self.f64 else cnp.NPY_FLOAT32):
            raise ValueError(f"block {i}'s attention shape {shape!r} does not fit the "
                             f"stack's ({rows}, {d}) rows")
        if shape.store != store:
            raise ValueError(f"block {i}'s attention must have store={store}")
        bl.heads = fused_heads() if shape.path == PATH_FUSED else dense_heads()
        bl.cross = shape.cross
        ptr("h", a.h, rows, d, tn, False, &bl.h)
        ptr("h_out", a.h_out, rows, d, tn, False, &bl.h_out)
        ptr("zt", a.zt, rows, d, tn, False, &bl.zt)
        ptr("u1", a.u1, rows, d, tn, not pre, &bl.u1)
        ptr("u2", a.u2, rows, d, tn, not pre, &bl.u2)
        ptr("st1", a.st1, 2, rows, tn, not pre, &bl.st1)
        ptr("st2", a.st2, 2, rows, tn, not pre, &bl.st2)
        ptr("m1", a.m1, rows, d, tn, not drop, &bl.m1)
        ptr("m2", a.m2, rows, d, tn, not drop, &bl.m2)
        if pre:
            norm_of("ln1", w.ln1, self.scratch.part, rows, d, tn, self.st.nth, &bl.ln1)
            norm_of("ln2", w.ln2, self.scratch.part, rows, d, tn, self.st.nth, &bl.ln2)
        # the attention forward: y = the branch (dropout) or Z~ with H_i added
        begin_call(shape, att.bufs, att.params, a.u1 if pre else a.h, att.ctx, att.mask,
                   att.rope, att.threads, False, &bl.fwd)
        bl.fwd.y = self.st.branch if drop else bl.zt
        bl.fwd.residual = NULL if drop else bl.h
        if store:
            begin_call(shape, att.bufs, att.params, a.u1 if pre else a.h, att.ctx, att.mask,
                       att.rope, att.threads, True, &bl.bwd)
            if shape.path == PATH_FUSED:
                check_parts(shape, &bl.bwd)
        # the MLP
        dh = w.W1.shape[1] if isinstance(w.W1, cnp.ndarray) and w.W1.ndim == 2 else 0
        bl.mlp.rows, bl.mlp.d, bl.mlp.dh = rows, d, dh
        bl.mlp.nthreads = mlp_threads_for(rows, dh, mlp_threads)
        ptr("W1", w.W1, d, dh, tn, False, &v)
        bl.mlp.w1 = v
        ptr("b1", w.b1, dh, -1, tn, True, &v)
        bl.mlp.b1 = v
        ptr("W2", w.W2, dh, d, tn, False, &v)
        bl.mlp.w2 = v
        ptr("b2", w.b2, d, -1, tn, True, &v)
        bl.mlp.b2 = v
        ptr("hid", a.hid, rows, dh, tn, False, &bl.mlp.hid)
        ptr("s", a.s, rows, dh, tn, False, &bl.mlp.s)
        ptr("sg", a.sg, rows, dh, tn, not store, &bl.mlp.sg)
        if store:
            ptr("dW1", w.dW1, d, dh, tn, False, &bl.mlp.dw1)
            ptr("db1", w.db1, dh, -1, tn, True, &bl.mlp.db1)
            ptr("dW2", w.dW2, dh, d, tn, False, &bl.mlp.dw2)
            ptr("db2", w.db2, d, -1, tn, True, &bl.mlp.db2)
            ptr("dhid", self.scratch.dhid, rows, dh, tn, False, &bl.mlp.dhid)
        return 0

    def forward(self, x=None, y=None):
        """Run every block's forward on the buffers given at construction; x (an
        inference stack's) and y: this call's input of the first block and output of
        the last instead of the built ones."""
        cdef void *xp
        cdef void *yp
        cdef int tn = cnp.NPY_FLOAT64 if self.f64 else cnp.NPY_FLOAT32
        if x is not None and self.st.store:
            raise ValueError("a training stack reads its built input (backward needs it)")
        take("x", x, self.st.rows, self.st.d, tn, False, True, &xp)
        take("y", y, self.st.rows, self.st.d, tn, True, True, &yp)
        with nogil:
            if self.f64:
                stack_forward(<double *> NULL, &self.st, self.blocks, <const double *> xp,
                              <double *> yp)
            else:
                stack_forward(<float *> NULL, &self.st, self.blocks, <const float *> xp,
                              <float *> yp)

    def backward(self, dy=None, dx=None, dctx=None, bint input_grad=True):
        """Fill every block's gradients (a training stack, after its forward): dL/dH_L
        from dy (None: the scratch's dcur holds it), dL/dH_0 into dx (None: into the
        scratch's dcur; not computed where it can be skipped without input_grad),
        the cross blocks' dL/dcontext summed into dctx (None: not computed)."""
        cdef void *top
        cdef void *bottom
        cdef void *dc
        cdef int tn = cnp.NPY_FLOAT64 if self.f64 else cnp.NPY_FLOAT32
        if not self.st.store:
            raise RuntimeError("backward needs a stack built with store=True")
        take("dy", dy, self.st.rows, self.st.d, tn, False, True, &top)
        take("dx", dx, self.st.rows, self.st.d, tn, True, True, &bottom)
        if dctx is not None and self.ctx_rows == 0:
            raise ValueError("dctx is for a stack with cross-attention blocks")
        take("dctx", dctx, self.ctx_rows, self.st.d, tn, True, True, &dc)
        if top == NULL:
            top = self.st.dcur
        if bottom == NULL and input_grad:
            bottom = self.st.dcur
        with nogil:
            if self.f64:
                stack_backward(<double *> NULL, &self.st, self.blocks, <const double *> top,
                               <double *> bottom, <double *> dc)
            else:
                stack_backward(<float *> NULL, &self.st, self.blocks, <const float *> top,
                               <float *> bottom, <float *> dc)
