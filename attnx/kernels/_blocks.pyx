"""The transformer blocks of a SequenceModel as one compiled call per direction.

attnx.SequenceModel runs its blocks (LayerNorms, attention, dropout masks, SiLU MLP,
residuals; the formulas in its docstring) through this module: a BlockStack is
built once per set of buffers (the model's activations, the attention layers'
workspaces, the weights and gradients), its arrays checked and turned into
pointers then; forward() and backward() then run every block without Python
between the kernels. The kernels are the ones the per-layer path calls
(attnx.kernels._seq's LayerNorm and residual cores, attnx.kernels._mlp's MLP, attnx.kernels._attnargs'
attention layer with the workspace's head kernels), in the same order on the same
buffers, so both paths compute the same values bit for bit.

Thread policy as everywhere: the caller passes the counts (elementwise passes,
each attention layer's, the MLP's) and holds attnx.runtime._threads.blas_single around
the call.
"""
from libc.stdlib cimport calloc, free
from libc.string cimport memcpy

cimport numpy as cnp

from attnx.kernels._blas cimport floating
from attnx.kernels._attnargs cimport (AttnShape, Call, begin_call, take, check_parts, layer_forward,
                              layer_backward, PATH_FUSED)
from attnx.kernels._attention cimport dense_heads
from attnx.kernels._flash cimport fused_heads
from attnx.kernels._seq cimport Norm, norm_forward, norm_backward, masked_add_rows, add_sub_rows
from attnx.kernels._mlp cimport mlp_fwd, mlp_bwd, mlp_threads

cnp.import_array()


cdef void stack_forward(floating *tag, const Stack *st, const Block *blocks) noexcept nogil:
    """SequenceModel._block_forward for every layer (tag: the float type)."""
    cdef Py_ssize_t i, rows = st.rows, d = st.d
    cdef const Block *bl
    cdef floating *u2
    cdef floating *out
    cdef floating *branch = <floating *> st.branch
    for i in range(st.n_layers):
        bl = &blocks[i]
        if st.pre:
            norm_forward(<const floating *> bl.h, <floating *> bl.u1, &bl.ln1)
        # the Call's y is the branch buffer with dropout (then masked and added), else
        # Z~ with the residual H_i added by the kernel
        layer_forward(<floating *> bl.fwd.y, &bl.fwd, bl.heads)
        if st.drop:
            masked_add_rows(<floating *> bl.zt, <const floating *> bl.h, branch, NULL,
                            <const floating *> bl.m1, rows, d, st.nth)
        if st.pre:
            norm_forward(<const floating *> bl.zt, <floating *> bl.u2, &bl.ln2)
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


cdef inline floating *branch_grad(floating *g, const void *mask, floating *buf,
                                  const Stack *st) noexcept nogil:
    """dL/d(a residual branch's output) from g = dL/d(the sum): g itself, or with
    dropout mask * g written to buf."""
    if not st.drop:
        return g
    masked_add_rows(buf, NULL, g, NULL, <const floating *> mask, st.rows, st.d, st.nth)
    return buf


cdef void stack_backward(floating *tag, const Stack *st, const Block *blocks) noexcept nogil:
    """SequenceModel._block_backward for every layer, top down: st.dcur holds
    dL/dH_{i+1} on entry to layer i and dL/dH_i after it."""
    cdef Py_ssize_t i, rows = st.rows, d = st.d
    cdef const Block *bl
    cdef Call c
    cdef floating *dcur = <floating *> st.dcur
    cdef floating *dbr_buf = <floating *> st.dbr
    cdef floating *db = <floating *> st.db
    cdef floating *dzt = <floating *> st.dzt
    cdef floating *tmp
    cdef floating *dbr
    cdef floating *datt
    cdef const floating *u2
    i = st.n_layers - 1
    while i >= 0:
        bl = &blocks[i]
        u2 = <const floating *> (bl.u2 if st.pre else bl.zt)
        # the MLP branch; the kernel returns dL/du2 + dbr in db
        dbr = branch_grad(dcur, bl.m2, dbr_buf, st)
        mlp_bwd(dbr, u2, db, &bl.mlp)
        if st.pre:    # dZ~ = LN2'(db - dbr) + dcur
            add_sub_rows(db, NULL, dbr, rows, d, st.nth)
            norm_backward(db, <const floating *> bl.zt, dzt, dcur, &bl.ln2)
        elif st.drop:   # dZ~ = (db - dbr) + dcur
            memcpy(dzt, db, rows * d * sizeof(floating))
            add_sub_rows(dzt, dcur, dbr, rows, d, st.nth)
        else:         # the kernel's residual already is dcur
            tmp = dzt
            dzt = db
            db = tmp
        # the attention branch
        datt = branch_grad(dzt, bl.m1, dbr_buf, st)
        memcpy(&c, &bl.bwd, sizeof(Call))
        c.dy = datt
        if st.pre:    # db = dL/d(LN1 output); dH = LN1'(db) + dZ~
            c.dx = db
            c.dm.dx_beta = 0
            layer_backward(<const floating *> datt, &c, bl.heads)
            norm_backward(db, <const floating *> bl.h, dcur, dzt, &bl.ln1)
        else:         # dH = dZ~ + attention'(datt)
            memcpy(dcur, dzt, rows * d * sizeof(floating))
            c.dx = dcur
            c.dm.dx_beta = 1
            layer_backward(<const floating *> datt, &c, bl.heads)
        i -= 1


cdef int ptr(str name, object a, Py_ssize_t rows, Py_ssize_t cols, int type_num,
             bint optional, void **out) except -1:
    """take() for a buffer the stack writes or reads (writeable unless None)."""
    return take(name, a, rows, cols, type_num, a is not None, optional, out)


cdef int norm_of(dict lay, str p, Py_ssize_t rows, Py_ssize_t d, int type_num, int nth,
                 object st, object part, Norm *n) except -1:
    cdef void *v
    ptr(p + ".g", lay[p + ".g"], d, -1, type_num, False, &v)
    n.g = v
    ptr(p + ".b", lay[p + ".b"], d, -1, type_num, False, &v)
    n.b = v
    ptr(p + ".dg", lay[p + ".dg"], d, -1, type_num, False, &n.dg)
    ptr(p + ".db", lay[p + ".db"], d, -1, type_num, False, &n.db)
    ptr(p + " statistics", st, 2, rows, type_num, False, &n.st)
    if part is None:
        n.part, n.ldpart = NULL, 0
    else:
        ptr("part", part, -1, part.shape[1], type_num, False, &n.part)
        if part.shape[1] < 2 * d:
            raise ValueError(f"part must have >= {2 * d} columns, got {part.shape[1]}")
        n.ldpart = part.shape[1]
    n.rows, n.d, n.eps = rows, d, lay["eps"]
    n.nthreads = nth if part is None or nth <= part.shape[0] else <int> part.shape[0]
    return 0


cdef class BlockStack:
    """Every block of a SequenceModel over one set of buffers (see the module
    docstring). Built by attnx.layers.sequence from its buffers; holds references to every
    array it points into, so the pointers stay valid as long as it lives.

    layers: one dict per block with the attention layer's workspace `ws`, its thread
    count `threads`, key padding mask `mask` (uint8 or None) and rotary tables `rope`
    (None or (cos, sin)), the block's weights and gradients (ln1.g, ln1.b, ln1.dg,
    ln1.db, ln2.*, W1, b1, W2, b2, dW1, db1, dW2, db2; biases may be None), its
    activations (h, h_out, zt, u1, u2, st1, st2, hid, s, sg, m1, m2; None where the
    configuration has none) and `eps` (the LayerNorms'). shared: branch, dcur, dbr,
    db, dzt, dhid, part (None when unused), mlp_threads (the MLP's caller count).
    """
    def __cinit__(self):
        self.blocks = NULL

    def __dealloc__(self):
        free(self.blocks)

    def __init__(self, list layers, dict shared, bint pre, bint drop, bint store, int nth):
        cdef Py_ssize_t i, L = len(layers), rows, d, dh
        cdef Block *bl
        cdef AttnShape shape
        cdef void *v
        cdef int tn, run
        if L < 1:
            raise ValueError("a block stack needs at least one layer")
        if nth < 1:
            raise ValueError(f"nth must be >= 1, got {nth}")
        self.keep = [layers, shared]
        shape = layers[0]["ws"].shape
        rows, d, tn = shape.nb * shape.tq, shape.d, shape.type_num
        self.f64 = shape.itemsize == 8
        self.blocks = <Block *> calloc(L, sizeof(Block))
        if self.blocks == NULL:
            raise MemoryError()
        self.st.n_layers, self.st.rows, self.st.d, self.st.nth = L, rows, d, nth
        self.st.pre, self.st.drop, self.st.store = pre, drop, store
        if drop and not store:
            raise ValueError("dropout runs in training forwards only (store=True)")
        ptr("branch", shared.get("branch"), rows, d, tn, not drop, &self.st.branch)
        for i in range(L):
            lay = layers[i]
            bl = &self.blocks[i]
            ws = lay["ws"]
            shape = ws.shape
            if shape.nb * shape.tq != rows or shape.d != d or shape.type_num != tn:
                raise ValueError(f"layer {i}'s attention shape {shape!r} does not fit the "
                                 f"stack's ({rows}, {d}) rows")
            if shape.cross or shape.store != store:
                raise ValueError(f"layer {i}'s attention must be self-attention with "
                                 f"store={store}")
            run = lay["threads"]
            bl.heads = fused_heads() if shape.path == PATH_FUSED else dense_heads()
            ptr("h", lay["h"], rows, d, tn, False, &bl.h)
            ptr("h_out", lay["h_out"], rows, d, tn, False, &bl.h_out)
            ptr("zt", lay["zt"], rows, d, tn, False, &bl.zt)
            ptr("u1", lay["u1"], rows, d, tn, not pre, &bl.u1)
            ptr("u2", lay["u2"], rows, d, tn, not pre, &bl.u2)
            ptr("m1", lay["m1"], rows, d, tn, not drop, &bl.m1)
            ptr("m2", lay["m2"], rows, d, tn, not drop, &bl.m2)
            if pre:
                norm_of(lay, "ln1", rows, d, tn, nth, lay["st1"], shared.get("part"), &bl.ln1)
                norm_of(lay, "ln2", rows, d, tn, nth, lay["st2"], shared.get("part"), &bl.ln2)
            # the attention forward: y = the branch (dropout) or Z~ with H_i added
            begin_call(shape, ws.bufs, ws.params, lay["u1"] if pre else lay["h"], None,
                       lay["mask"], lay["rope"], run, False, &bl.fwd)
            bl.fwd.y = self.st.branch if drop else bl.zt
            bl.fwd.residual = NULL if drop else bl.h
            if store:
                ws.for_backward(run)
                begin_call(shape, ws.bufs, ws.params, lay["u1"] if pre else lay["h"], None,
                           lay["mask"], lay["rope"], run, True, &bl.bwd)
                if shape.path == PATH_FUSED:
                    check_parts(shape, &bl.bwd)
            # the MLP
            w1 = lay["W1"]
            dh = w1.shape[1]
            bl.mlp.rows, bl.mlp.d, bl.mlp.dh = rows, d, dh
            bl.mlp.nthreads = mlp_threads(rows, dh, shared["mlp_threads"])
            ptr("W1", w1, d, dh, tn, False, &v)
            bl.mlp.w1 = v
            ptr("b1", lay["b1"], dh, -1, tn, True, &v)
            bl.mlp.b1 = v
            ptr("W2", lay["W2"], dh, d, tn, False, &v)
            bl.mlp.w2 = v
            ptr("b2", lay["b2"], d, -1, tn, True, &v)
            bl.mlp.b2 = v
            ptr("hid", lay["hid"], rows, dh, tn, False, &bl.mlp.h)
            ptr("s", lay["s"], rows, dh, tn, False, &bl.mlp.s)
            ptr("sg", lay["sg"], rows, dh, tn, not store, &bl.mlp.sg)
            if store:
                ptr("dW1", lay["dW1"], d, dh, tn, False, &bl.mlp.dw1)
                ptr("db1", lay["db1"], dh, -1, tn, True, &bl.mlp.db1)
                ptr("dW2", lay["dW2"], dh, d, tn, False, &bl.mlp.dw2)
                ptr("db2", lay["db2"], d, -1, tn, True, &bl.mlp.db2)
                ptr("dhid", shared["dhid"], rows, dh, tn, False, &bl.mlp.dh_buf)
        if store:
            ptr("dcur", shared["dcur"], rows, d, tn, False, &self.st.dcur)
            ptr("db", shared["db"], rows, d, tn, False, &self.st.db)
            ptr("dzt", shared["dzt"], rows, d, tn, False, &self.st.dzt)
            ptr("dbr", shared.get("dbr"), rows, d, tn, not drop, &self.st.dbr)

    def forward(self):
        """Run every block's forward on the buffers given at construction."""
        with nogil:
            if self.f64:
                stack_forward(<double *> NULL, &self.st, self.blocks)
            else:
                stack_forward(<float *> NULL, &self.st, self.blocks)

    def backward(self):
        """Fill every block's gradients from dL/dH_L in shared["dcur"], leaving dL/dH_0
        there (a training stack, after its forward)."""
        if not self.st.store:
            raise RuntimeError("backward needs a stack built with store=True")
        with nogil:
            if self.f64:
                stack_backward(<double *> NULL, &self.st, self.blocks)
            else:
                stack_backward(<float *> NULL, &self.st, self.blocks)
