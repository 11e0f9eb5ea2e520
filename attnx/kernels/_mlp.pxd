# The pointer-level cores of attnx.kernels._mlp's SiLU MLP (out = silu(z W1 + b1) W2 + b2 + z),
# for the compiled block stack (attnx.kernels._blocks). The def entry points check their arrays
# and call these; the cores check nothing.
from attnx.kernels._blas cimport floating

# One MLP's operands beside its input and output rows.
cdef struct Mlp:
    Py_ssize_t rows, d, dh
    int nthreads            # the GEMMs' and rows' threads (the size rule already applied)
    const void *w1          # (d, dh)
    const void *b1          # (dh,) or NULL
    const void *w2          # (dh, d)
    const void *b2          # (d,) or NULL
    void *hid               # (rows, dh) z W1 + b1
    void *s                 # (rows, dh) silu(hid)
    void *sg                # (rows, dh) sigmoid(hid), NULL at inference
    void *dw1               # gradients (backward; db1, db2 NULL without biases)
    void *db1
    void *dw2
    void *db2
    void *dhid              # (rows, dh) backward scratch: dL/dhid

# The rows' and GEMMs' thread count for rows x dh hidden values.
cdef int mlp_threads(Py_ssize_t rows, Py_ssize_t dh, int nthreads) noexcept nogil
cdef void mlp_fwd(const floating *z, floating *out, const Mlp *m) noexcept nogil
cdef void mlp_bwd(const floating *dout, const floating *z, floating *dz,
                  const Mlp *m) noexcept nogil
# SiLU on rows (rows, n): s = silu(h), sg = sigmoid(h) (NULL: not kept); backward
# dh = ds * silu'(h) (dh may be ds). nthreads: the caller's, the size rule applied here.
cdef void silu_fwd_rows(const floating *h, floating *s, floating *sg, Py_ssize_t rows,
                        Py_ssize_t n, int nthreads) noexcept nogil
cdef void silu_bwd_rows(const floating *ds, const floating *h, const floating *sg,
                        floating *dh, Py_ssize_t rows, Py_ssize_t n,
                        int nthreads) noexcept nogil
