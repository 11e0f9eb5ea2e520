# The compiled block stack's structs and entry points (attnx/kernels/_blocks.pyx), for the
# whole-model pass (attnx/kernels/_model_pass.pyx) that runs it between the embedding and the head.
from attnx.kernels._blas cimport floating
from attnx.kernels._attnargs cimport Call, Heads
from attnx.kernels._seq cimport Norm
from attnx.kernels._mlp cimport Mlp


# One block's operands (pointers into the model's buffers and weights).
cdef struct Block:
    Call fwd                # the attention forward: x, y, residual set at build
    Call bwd                # the attention backward (store): dy, dx set per call
    const Heads *heads
    Norm ln1, ln2           # pre-norm only
    Mlp mlp
    void *h                 # block input H_i (rows, d)
    void *h_out             # block output H_{i+1}
    void *zt                # Z~ = H_i + attention branch
    void *u1                # pre-norm: LN1(H_i), LN2(Z~)
    void *u2
    void *m1                # dropout multipliers of the two branches
    void *m2


# The stack's sizes and shared scratch.
cdef struct Stack:
    Py_ssize_t n_layers, rows, d
    int nth                 # threads of the elementwise passes
    bint pre, drop, store
    void *branch            # dropout: a branch's output before its mask
    void *dcur              # backward: dL/dH_L on entry, dL/dH_0 on return
    void *dbr               # backward scratch (dbr: dropout only)
    void *db
    void *dzt


# every block's forward / backward (tag: the float type; NULL)
cdef void stack_forward(floating *tag, const Stack *st, const Block *blocks) noexcept nogil
cdef void stack_backward(floating *tag, const Stack *st, const Block *blocks) noexcept nogil


cdef class BlockStack:
    cdef Stack st
    cdef Block *blocks
    cdef readonly bint f64
    cdef list keep


# take() for a buffer the stack writes or reads (writeable unless None)
cdef int ptr(str name, object a, Py_ssize_t rows, Py_ssize_t cols, int type_num,
             bint optional, void **out) except -1
# a LayerNorm's operands from lay[p + ".g"], ".b", ".dg", ".db" and lay["eps"]
cdef int norm_of(dict lay, str p, Py_ssize_t rows, Py_ssize_t d, int type_num, int nth,
                 object st, object part, Norm *n) except -1
