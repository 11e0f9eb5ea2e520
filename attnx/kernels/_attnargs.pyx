"""The attention kernels' arguments, built and size-checked in one place.

AttnShape holds the sizes of one attention workspace (batch, lengths, width, heads,
self or cross, causal, store, path, thread count, dtype) and the one size table of
its buffers; AttnBuffers allocates those buffers from it (so they fit by
construction); AttnParams checks a layer's weights and gradients once. The entry
points of attnx.kernels._attention (dense, blocked) and attnx.kernels._flash (fused) take them
first, in one order:

    attention_forward(shape, buffers, params, x, ctx, key_padding_mask, rope,
                      residual, y, nthreads)
    attention_backward(shape, buffers, params, x, ctx, key_padding_mask, rope,
                       dy, dx, dctx, accumulate, nthreads)

and hand them, with their head kernels (Heads), to begin_run, then run_forward /
run_backward: begin_run's begin_call checks every per-call array (shape, dtype,
layout) and fills the C struct Call (the call's sizes, Dims, and its buffers'
pointers) that the kernels read without the GIL; run_forward / run_backward check
their direction's own arrays into it and run. The Q/K/V and output projections
around the heads are the same on every path and run here.
"""
cimport numpy as cnp
from libc.stdint cimport uint8_t

from attnx.kernels._blas cimport floating
from attnx.kernels._ops cimport (key_columns, qkv_project, out_project, out_project_backward,
                         qkv_project_backward)

import numpy as np

from attnx.kernels._blas import check_blas_int

cnp.import_array()

cdef extern from "attnx_flash_sizes.h" nogil:
    enum:
        ATTNX_FL_BQ
        ATTNX_FL_BK
        FL_NRN_f32
        FL_NRN_f64
    Py_ssize_t attnx_flash_fwd_scratch(int tk, int dh, int nrn)
    Py_ssize_t attnx_flash_bwd_scratch(int tk, int dh, int nrn)

PATHS = ("dense", "blocked", "fused")
DENSE, BLOCKED, FUSED = PATH_DENSE, PATH_BLOCKED, PATH_FUSED
ACCUMULATE_DX, ACCUMULATE_DCTX = ACC_DX, ACC_DCTX


# ---------------------------------------------------------------- block sizes
# The blocked path's query and key blocks. They size its scratch, so they are read
# when an AttnShape is made and kept there: a later change makes new workspaces
# (they are part of the layers' workspace keys) and leaves existing ones valid.
cdef Py_ssize_t FLASH_BQ = 128
cdef Py_ssize_t FLASH_BK = 128


cdef Py_ssize_t get_flash_bq() noexcept nogil:
    return FLASH_BQ


cdef Py_ssize_t get_flash_bk() noexcept nogil:
    return FLASH_BK


cdef int set_blocked_sizes(Py_ssize_t bq, Py_ssize_t bk) except -1:
    """Set the blocked path's block sizes (tuning; attnx.kernels._testing.set_block_sizes)."""
    global FLASH_BQ, FLASH_BK
    if bq < 1 or bk < 1 or bq > 65536 or bk > 65536:
        raise ValueError(f"block sizes must be in [1, 65536], got bq={bq}, bk={bk}")
    FLASH_BQ, FLASH_BK = bq, bk
    return 0


def block_sizes():
    """(query block, key block) of the blocked path now."""
    return FLASH_BQ, FLASH_BK


def fused_block_sizes():
    """(query rows, keys) per block of the fused kernels (compile-time constants)."""
    return ATTNX_FL_BQ, ATTNX_FL_BK


def check_sizes(Py_ssize_t nb, Py_ssize_t tq, Py_ssize_t tk, Py_ssize_t d_model):
    """ValueError when a GEMM of attention over (nb, tq) queries and (nb, tk) keys of
    width d_model has a dimension or leading dimension beyond BLAS's 32-bit int.
    Pure arithmetic: callable before allocating anything."""
    check_blas_int(f"attention over batch={nb}, Tq={tq}, Tk={tk}, d_model={d_model}",
                   ("batch*Tq", nb * tq), ("batch*Tk", nb * tk), ("3*d_model", 3 * d_model),
                   ("Tq", tq), ("Tk", tk))


# ---------------------------------------------------------------- fused work split
cdef int backward_threads(Py_ssize_t nbh, Py_ssize_t tq, Py_ssize_t tk, Py_ssize_t d_head,
                          int nthreads) noexcept nogil:
    """Threads the fused backward's head kernels use: one when there is too little
    work to pay for waking the others."""
    if <double> nbh * tq * tk * d_head < 1.0e5:
        return 1
    return nthreads


cdef Py_ssize_t key_splits(Py_ssize_t nbh, Py_ssize_t tk, int nthreads) noexcept nogil:
    """Key ranges per (sample, head) in the fused backward. Whole heads (1) when there
    are at least 4 heads per thread; else enough ranges of whole key blocks for
    about 4 work items per thread, so that B*H below the thread count (one long
    sequence) still fills the cores and causal ranges (unequal work) balance."""
    cdef Py_ssize_t nkb = (tk + ATTNX_FL_BK - 1) // ATTNX_FL_BK
    cdef Py_ssize_t want, per
    if nthreads <= 1 or nkb <= 1 or nbh >= 4 * nthreads:
        return 1
    want = (4 * nthreads + nbh - 1) // nbh
    if want > nkb:
        want = nkb
    per = (nkb + want - 1) // want           # key blocks per range
    return (nkb + per - 1) // per


cdef Py_ssize_t fused_scratch(Py_ssize_t tk, Py_ssize_t d_head, int type_num):
    """Per-thread scratch elements of the fused forward and backward, rounded up to
    64 elements so threads never share a cache line."""
    cdef int nrn = FL_NRN_f32 if type_num == cnp.NPY_FLOAT32 else FL_NRN_f64
    cdef Py_ssize_t n = max(attnx_flash_fwd_scratch(<int> tk, <int> d_head, nrn),
                            attnx_flash_bwd_scratch(<int> tk, <int> d_head, nrn))
    return (n + 63) // 64 * 64


cdef Py_ssize_t fused_dq_parts(Py_ssize_t nb, Py_ssize_t tq, Py_ssize_t tk,
                               Py_ssize_t n_heads, Py_ssize_t d_head, int nthreads):
    """Elements of the fused backward's dQ shares for heads split into key ranges:
    every range but the first writes its share there ((ranges - 1) * B*H*Tq*d_head,
    0 when heads are not split at this shape and thread count)."""
    cdef Py_ssize_t nbh = nb * n_heads
    cdef int nt = backward_threads(nbh, tq, tk, d_head, nthreads)
    return (key_splits(nbh, tk, nt) - 1) * nbh * tq * d_head


# ---------------------------------------------------------------- shapes
cdef class AttnShape:
    """Sizes of one attention workspace and the size table of its buffers.

    AttnShape(path, nb, tq, tk, d_model, n_heads, cross, causal, store, threads, dtype)
    path: "dense", "blocked" or "fused"; store: the forward keeps what backward
    needs (False: inference); threads: the most OpenMP threads a call may use (the
    per-thread scratch is sized for them). ValueError on sizes that do not fit
    (BLAS's int, d_model % n_heads).
    """

    def __init__(self, str path, Py_ssize_t nb, Py_ssize_t tq, Py_ssize_t tk,
                 Py_ssize_t d_model, Py_ssize_t n_heads, bint cross, bint causal,
                 bint store, int threads, dtype):
        cdef Py_ssize_t d = d_model, dh, rq, rk, fwd_pt = 0, bwd_pt = 0
        cdef Dims *d_ = &self.dims
        if path not in PATHS:
            raise ValueError(f"path must be one of {PATHS}, got {path!r}")
        if nb < 1 or tq < 1 or tk < 1 or d < 1 or n_heads < 1 or d % n_heads:
            raise ValueError(f"attention sizes must be positive with n_heads dividing "
                             f"d_model, got nb={nb}, tq={tq}, tk={tk}, d_model={d}, "
                             f"n_heads={n_heads}")
        if not cross and tk != tq:
            raise ValueError(f"self-attention has tk == tq, got tq={tq}, tk={tk}")
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        dt = np.dtype(dtype)
        if dt != np.float32 and dt != np.float64:
            raise ValueError(f"dtype must be float32 or float64, got {dt}")
        check_sizes(nb, tq, tk, d)
        self.path = PATHS.index(path)
        self.nb, self.tq, self.tk, self.d, self.n_heads = nb, tq, tk, d, n_heads
        self.d_head = dh = d // n_heads
        self.cross, self.causal, self.store, self.threads = cross, causal, store, threads
        self.dtype = dt
        self.itemsize = dt.itemsize
        self.type_num = cnp.NPY_FLOAT32 if dt == np.float32 else cnp.NPY_FLOAT64
        rq, rk = nb * tq, nb * tk
        # ---- the size table (elements); everything the workspace allocates
        self.n_q = rq * (d if cross else 3 * d)
        self.n_kv = rk * 2 * d if cross else 0
        self.n_zcat = rq * d
        self.n_dzcat, self.n_dq, self.n_dkv = self.n_zcat, self.n_q, self.n_kv
        self.n_inputs = (rq * d + (rk * d if cross else 0)) if store else 0
        self.dims.bq = self.dims.bk = 0
        if self.path == PATH_DENSE:
            self.n_probs = (nb * n_heads if store else threads) * tq * tk
            self.n_tbuf = threads * dh * tk
            bwd_pt = tq * tk
            self.n_bwd_scratch = threads * bwd_pt
        elif self.path == PATH_BLOCKED:
            self.dims.bq, self.dims.bk = FLASH_BQ, FLASH_BK
            fwd_pt = FLASH_BQ * FLASH_BK + FLASH_BQ * dh + 2 * FLASH_BQ
            bwd_pt = 2 * FLASH_BQ * FLASH_BK + tq
            self.n_fwd_scratch = threads * fwd_pt
            self.n_lse = nb * n_heads * tq          # written by every blocked forward
            self.n_bwd_scratch = threads * bwd_pt
        else:
            fwd_pt = bwd_pt = fused_scratch(tk, dh, self.type_num)   # one for both
            self.n_fwd_scratch = threads * fwd_pt
            self.n_lse = nb * n_heads * tq if store else 0
            self.n_dq_parts = fused_dq_parts(nb, tq, tk, n_heads, dh, threads)
        if not store:   # inference: no backward buffers
            self.n_dzcat = self.n_dq = self.n_dkv = self.n_bwd_scratch = self.n_dq_parts = 0
        d_.nb, d_.tq, d_.tk, d_.d, d_.n_heads, d_.d_head = nb, tq, tk, d, n_heads, dh
        d_.rq, d_.rk = rq, rk
        d_.ldq, d_.ldkv, d_.ldz = (d, 2 * d, d) if cross else (3 * d, 3 * d, d)
        d_.fwd_per_thread, d_.bwd_per_thread = fwd_pt, bwd_pt
        d_.scale = 1.0 / (<double> dh) ** 0.5
        d_.cross, d_.causal, d_.store = cross, causal, store
        d_.nthreads = threads
        d_.keymask = NULL
        d_.rope_cos = d_.rope_sin = NULL
        d_.dx_beta = d_.dctx_beta = 0

    @property
    def path_name(self):
        return PATHS[self.path]

    @property
    def block_sizes(self):
        """(query block, key block) this shape's blocked scratch is sized for ((0, 0)
        on the other paths)."""
        return self.dims.bq, self.dims.bk

    def elements(self):
        """Elements of every buffer a workspace of this shape holds (the forward's,
        the backward's when store, the kept input copies): the one size table,
        used by the allocation (AttnBuffers) and the memory estimate."""
        return (self.n_q + self.n_kv + self.n_zcat + self.n_probs + self.n_tbuf
                + self.n_lse + self.n_fwd_scratch + self.n_dzcat + self.n_dq + self.n_dkv
                + self.n_bwd_scratch + self.n_dq_parts + self.n_inputs)

    def __repr__(self):
        return (f"AttnShape({PATHS[self.path]!r}, nb={self.nb}, tq={self.tq}, tk={self.tk}, "
                f"d={self.d}, n_heads={self.n_heads}, cross={self.cross}, "
                f"causal={self.causal}, store={self.store}, threads={self.threads}, "
                f"dtype={self.dtype.name})")


# ---------------------------------------------------------------- arrays
_TYPE_NAMES = {cnp.NPY_FLOAT32: "float32", cnp.NPY_FLOAT64: "float64", cnp.NPY_UINT8: "uint8",
               cnp.NPY_INT64: "int64"}

cdef int take(str name, object a, Py_ssize_t rows, Py_ssize_t cols, int type_num,
              bint write, bint optional, void **out) except -1:
    """out = the data of array a after checking it: C-contiguous, element type
    type_num, shape (rows, cols) (cols < 0: 1-D of rows; rows < 0 in a 2-D check:
    at least -rows rows), writeable when write. None is NULL when optional."""
    cdef cnp.ndarray arr
    cdef int nd
    cdef cnp.npy_intp *dims
    if a is None:
        if not optional:
            raise ValueError(f"{name} is required, got None")
        out[0] = NULL
        return 0
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a NumPy array, got {type(a).__name__}")
    arr = <cnp.ndarray> a
    nd = cnp.PyArray_NDIM(arr)
    dims = cnp.PyArray_DIMS(arr)
    if cols < 0:
        ok = nd == 1 and dims[0] == rows
    elif rows < 0:
        ok = nd == 2 and dims[0] >= -rows and dims[1] == cols
    else:
        ok = nd == 2 and dims[0] == rows and dims[1] == cols
    if not ok:   # the message is built only here: take runs several times per call
        want = (f"({rows},)" if cols < 0 else f"(>= {-rows}, {cols})" if rows < 0
                else f"({rows}, {cols})")
        raise ValueError(f"{name} must have shape {want}, got {a.shape}")
    if cnp.PyArray_TYPE(arr) != type_num:
        raise ValueError(f"{name} must be {_TYPE_NAMES.get(type_num, type_num)}, "
                         f"got {a.dtype}")
    if not cnp.PyArray_IS_C_CONTIGUOUS(arr):
        raise ValueError(f"{name} must be C-contiguous")
    if write and not cnp.PyArray_ISWRITEABLE(arr):
        raise ValueError(f"{name} must be writeable")
    out[0] = cnp.PyArray_DATA(arr)
    return 0


cdef object _alloc(Py_ssize_t n, dtype, void **out):
    """An empty array of n elements (None and NULL when n is 0)."""
    if n == 0:
        out[0] = NULL
        return None
    a = np.empty(n, dtype=dtype)
    out[0] = cnp.PyArray_DATA(<cnp.ndarray> a)
    return a


cdef object _alloc2(Py_ssize_t rows, Py_ssize_t cols, dtype, void **out):
    if rows * cols == 0:
        out[0] = NULL
        return None
    a = np.empty((rows, cols), dtype=dtype)
    out[0] = cnp.PyArray_DATA(<cnp.ndarray> a)
    return a


cdef class AttnBuffers:
    """The workspace of one AttnShape, allocated from its size table: forward buffers
    now, backward buffers on the first for_backward() (store shapes only). Fields a
    path does not use are None: dense has probs (P) and tbuf, blocked fwd_scratch and
    lse, fused fwd_scratch, lse (store) and dq_parts (heads split in key ranges)."""

    def __init__(self, AttnShape shape):
        cdef AttnShape s = shape
        cdef Call *c = &self.ptrs
        self.shape = s
        dt, d = s.dtype, s.d
        self.q = _alloc2(s.nb * s.tq, s.n_q // (s.nb * s.tq), dt, &c.q)
        self.kv = _alloc2(s.nb * s.tk, 2 * d, dt, &c.kv) if s.cross else None
        if not s.cross:
            c.kv = NULL
        self.zcat = _alloc2(s.nb * s.tq, d, dt, &c.zcat)
        self.probs = _alloc(s.n_probs, dt, &c.probs)
        self.tbuf = _alloc(s.n_tbuf, dt, &c.tbuf)
        self.lse = _alloc(s.n_lse, dt, &c.lse)
        self.fwd_scratch = _alloc(s.n_fwd_scratch, dt, &c.fwd_scratch)
        c.dzcat = c.dq = c.dkv = c.bwd_scratch = c.dq_parts = NULL
        self.has_backward = False

    def for_backward(self):
        """Make the backward buffers (once); returns self."""
        cdef AttnShape s = self.shape
        cdef Call *c = &self.ptrs
        if not s.store:
            raise RuntimeError("an inference workspace (store=False) has no backward")
        if not self.has_backward:
            self.dzcat = _alloc2(s.nb * s.tq, s.d, s.dtype, &c.dzcat)
            self.dq = _alloc2(s.nb * s.tq, s.n_q // (s.nb * s.tq), s.dtype, &c.dq)
            self.dkv = _alloc2(s.nb * s.tk, 2 * s.d, s.dtype, &c.dkv) if s.cross else None
            if not s.cross:
                c.dkv = NULL
            self.bwd_scratch = _alloc(s.n_bwd_scratch, s.dtype, &c.bwd_scratch)
            self.dq_parts = _alloc(s.n_dq_parts, s.dtype, &c.dq_parts)
            self.has_backward = True
        return self


# ---------------------------------------------------------------- parameters
cdef class AttnParams:
    """A layer's weights and gradients, checked once: w_qkv (d, 3d) = [Wq | Wk | Wv],
    w_o (d, d), b_qkv (3d,) and b_o (d,) (both None without bias), and their
    gradients dw_qkv, dw_o, db_qkv, db_o alike: C-contiguous arrays of one float
    dtype, gradients writeable. The arrays are kept (so the pointers stay valid);
    updating them in place is what training does."""

    def __init__(self, w_qkv, w_o, b_qkv, b_o, dw_qkv, dw_o, db_qkv, db_o):
        cdef Call *c = &self.ptrs
        cdef void *p
        if not isinstance(w_o, np.ndarray) or w_o.ndim != 2:
            raise ValueError(f"w_o must be a 2-D array, got {type(w_o).__name__}")
        dt = w_o.dtype
        if dt != np.float32 and dt != np.float64:
            raise ValueError(f"w_o must be float32 or float64, got {dt}")
        self.type_num = tn = cnp.NPY_FLOAT32 if dt == np.float32 else cnp.NPY_FLOAT64
        self.d = d = w_o.shape[0]
        bias = b_qkv is not None
        if (b_o is not None) != bias or (db_qkv is not None) != bias or (
                db_o is not None) != bias:
            raise ValueError("b_qkv, b_o, db_qkv and db_o must all be arrays (bias) or all "
                             "None")
        take("w_qkv", w_qkv, d, 3 * d, tn, False, False, &p)
        c.w_qkv = p
        take("w_o", w_o, d, d, tn, False, False, &p)
        c.w_o = p
        take("b_qkv", b_qkv, 3 * d, -1, tn, False, True, &p)
        c.b_qkv = p
        take("b_o", b_o, d, -1, tn, False, True, &p)
        c.b_o = p
        take("dw_qkv", dw_qkv, d, 3 * d, tn, True, False, &c.dw_qkv)
        take("dw_o", dw_o, d, d, tn, True, False, &c.dw_o)
        take("db_qkv", db_qkv, 3 * d, -1, tn, True, True, &c.db_qkv)
        take("db_o", db_o, d, -1, tn, True, True, &c.db_o)
        self.w_qkv, self.w_o, self.b_qkv, self.b_o = w_qkv, w_o, b_qkv, b_o
        self.dw_qkv, self.dw_o, self.db_qkv, self.db_o = dw_qkv, dw_o, db_qkv, db_o


# ---------------------------------------------------------------- the prologue
cdef int begin_call(AttnShape s, AttnBuffers b, AttnParams p, object x, object ctx,
                    object key_padding_mask, object rope, int nthreads, bint backward,
                    Call *c) except -1:
    """Check what every attention entry point takes first and fill c: the shape's
    sizes, the workspace and parameter pointers, x and ctx, the key padding mask,
    the rotary tables and the thread count. The rest (y, residual, dy, dx, dctx)
    the entry point takes itself."""
    cdef void *ptr
    cdef Py_ssize_t half
    if s is None or b is None or p is None:
        raise TypeError("shape, buffers and params must not be None")
    if b.shape is not s:
        raise ValueError(f"buffers were made for {b.shape!r}, not for {s!r}")
    if p.d != s.d or p.type_num != s.type_num:
        raise ValueError(f"params of width {p.d} and type {p.w_o.dtype} do not fit {s!r}")
    if nthreads < 1 or nthreads > s.threads:
        raise ValueError(f"nthreads must be in [1, {s.threads}] (the workspace's thread "
                         f"count), got {nthreads}")
    if backward and not b.has_backward:
        raise ValueError("buffers have no backward part: call for_backward() first")
    c[0] = b.ptrs
    c.w_qkv, c.b_qkv, c.w_o, c.b_o = p.ptrs.w_qkv, p.ptrs.b_qkv, p.ptrs.w_o, p.ptrs.b_o
    c.dw_qkv, c.db_qkv, c.dw_o, c.db_o = p.ptrs.dw_qkv, p.ptrs.db_qkv, p.ptrs.dw_o, p.ptrs.db_o
    c.dm = s.dims
    c.dm.nthreads = nthreads
    take("x", x, s.nb * s.tq, s.d, s.type_num, False, False, &ptr)
    c.x = ptr
    if s.cross:
        take("ctx", ctx, s.nb * s.tk, s.d, s.type_num, False, False, &ptr)
        c.ctx = ptr
    elif ctx is not None:
        raise ValueError("ctx must be None for a self-attention shape")
    else:
        c.ctx = NULL
    take("key_padding_mask", key_padding_mask, s.nb, s.tk, cnp.NPY_UINT8, False, True, &ptr)
    c.dm.keymask = <const uint8_t *> ptr
    if rope is None:
        c.dm.rope_cos = c.dm.rope_sin = NULL
    else:
        half = s.d_head // 2
        if not isinstance(rope, tuple) or len(rope) != 2 or s.d_head % 2:
            raise ValueError("rope must be None or a pair (cos, sin) of tables "
                             f"(>= {max(s.tq, s.tk)}, {half}) for an even d_head")
        take("rope cos", rope[0], -max(s.tq, s.tk), half, s.type_num, False, False, &ptr)
        c.dm.rope_cos = ptr
        take("rope sin", rope[1], -max(s.tq, s.tk), half, s.type_num, False, False, &ptr)
        c.dm.rope_sin = ptr
    c.residual = c.dy = NULL
    c.y = c.dx = c.dctx = NULL
    return 0


# ---------------------------------------------------------------- the call
cdef void layer_forward(floating *y, const Call *c, const Heads *heads) noexcept nogil:
    """One checked forward: Q/K/V projections, the module's heads, output projection."""
    cdef const Dims *dm = &c.dm
    cdef Py_ssize_t d = dm.d, ldq, ldkv
    cdef floating *qp = <floating *> c.q
    cdef floating *kp = key_columns(qp, <floating *> c.kv if dm.cross else NULL, d, &ldq, &ldkv)
    qkv_project(<const floating *> c.x, <const floating *> c.ctx, <const floating *> c.w_qkv,
                <const floating *> c.b_qkv, qp, kp if dm.cross else NULL, dm)
    if floating is float:
        heads.forward_f32(c, qp, kp)
    else:
        heads.forward_f64(c, qp, kp)
    out_project(<const floating *> c.zcat, <const floating *> c.w_o, <const floating *> c.b_o,
                <const floating *> c.residual, y, dm.rq, d, dm.nthreads)


cdef void layer_backward(const floating *dy, const Call *c, const Heads *heads) noexcept nogil:
    """One checked backward: output projection's gradients, the module's heads, the
    Q/K/V projections' gradients."""
    cdef const Dims *dm = &c.dm
    cdef Py_ssize_t d = dm.d, ldq, ldkv
    cdef floating *qp = <floating *> c.q
    cdef floating *kp = key_columns(qp, <floating *> c.kv if dm.cross else NULL, d, &ldq, &ldkv)
    cdef floating *dqp = <floating *> c.dq
    cdef floating *dkp = key_columns(dqp, <floating *> c.dkv if dm.cross else NULL, d,
                                     &ldq, &ldkv)
    out_project_backward(<const floating *> c.zcat, dy, <const floating *> c.w_o,
                         <floating *> c.dw_o, <floating *> c.db_o, <floating *> c.dzcat,
                         dm.rq, d, dm.nthreads)
    if floating is float:
        heads.backward_f32(c, qp, kp, dqp, dkp)
    else:
        heads.backward_f64(c, qp, kp, dqp, dkp)
    qkv_project_backward(<const floating *> c.x, <const floating *> c.ctx,
                         <const floating *> c.w_qkv, dqp, dkp if dm.cross else NULL,
                         <floating *> c.dw_qkv, <floating *> c.db_qkv, <floating *> c.dx,
                         <floating *> c.dctx, dm)


cdef int check_path(AttnShape s, const Heads *heads) except -1:
    """ValueError when the shape's path is not one the calling module runs."""
    if s is not None and (s.path == PATH_FUSED) != heads.fused:
        raise ValueError("attnx.kernels._flash runs fused shapes only" if heads.fused else
                         "a fused shape runs in attnx.kernels._flash, not attnx.kernels._attention")
    return 0


cdef int check_parts(AttnShape s, const Call *c) except -1:
    """The fused dQ shares buffer holds what the backward's key split at this call's
    thread count writes (the workspace's is sized for s.threads)."""
    cdef Py_ssize_t nbh = s.nb * s.n_heads
    cdef int nt = backward_threads(nbh, s.tq, s.tk, s.d_head, c.dm.nthreads)
    cdef Py_ssize_t need = (key_splits(nbh, s.tk, nt) - 1) * nbh * s.tq * s.d_head
    if need > s.n_dq_parts:
        raise ValueError(f"the fused backward with {c.dm.nthreads} threads needs {need} "
                         f"elements of dQ shares, the workspace has {s.n_dq_parts}")
    return 0


cdef int begin_run(AttnShape s, AttnBuffers b, AttnParams p, object x, object ctx,
                   object key_padding_mask, object rope, int nthreads, bint backward,
                   const Heads *heads, Call *c) except -1:
    """The entry points' prologue: a shape of the calling module's path (heads), then
    begin_call (the per-call arrays checked into c)."""
    check_path(s, heads)
    return begin_call(s, b, p, x, ctx, key_padding_mask, rope, nthreads, backward, c)


cdef int run_forward(AttnShape s, Call *c, object residual, object y,
                     const Heads *heads) except -1:
    """Check a forward's own arguments (residual and y) into the Call that begin_run
    filled, and run it."""
    cdef void *ptr
    take("residual", residual, c.dm.rq, c.dm.d, s.type_num, False, True, &ptr)
    c.residual = ptr
    take("y", y, c.dm.rq, c.dm.d, s.type_num, True, False, &c.y)
    with nogil:
        if s.itemsize == 4:
            layer_forward(<float *> c.y, c, heads)
        else:
            layer_forward(<double *> c.y, c, heads)
    return 0


cdef int run_backward(AttnShape s, Call *c, object dy, object dx, object dctx, int accumulate,
                      const Heads *heads) except -1:
    """Check a backward's own arguments (a store shape, the fused dQ shares, dy, dx,
    dctx) into the Call that begin_run filled, and run it; accumulate: ACC_DX /
    ACC_DCTX bits."""
    cdef void *ptr
    if not s.store:
        raise ValueError("backward needs a shape with store=True")
    if heads.fused:
        check_parts(s, c)
    take("dy", dy, c.dm.rq, c.dm.d, s.type_num, False, False, &ptr)
    c.dy = ptr
    take("dx", dx, c.dm.rq, c.dm.d, s.type_num, True, True, &c.dx)
    take("dctx", dctx if s.cross else None, c.dm.rk, c.dm.d, s.type_num, True, True, &c.dctx)
    c.dm.dx_beta = 1 if accumulate & ACC_DX else 0
    c.dm.dctx_beta = 1 if accumulate & ACC_DCTX else 0
    with nogil:
        if s.itemsize == 4:
            layer_backward(<const float *> c.dy, c, heads)
        else:
            layer_backward(<const double *> c.dy, c, heads)
    return 0
