# The compiled block stack's structs and entry points (attnx/kernels/_blocks.pyx), for the
# whole-model pass (attnx/kernels/_model_pass.pyx) and attnx.layers.transformer, and the
# typed operand classes the stack is built from (one per stage: a LayerNorm's weights,
# an attention call, a block's weights, a block's activations, the shared scratch).
# A struct field carries the name of the Python buffer it points into.
from attnx.kernels._blas cimport floating
from attnx.kernels._attnargs cimport AttnShape, AttnBuffers, AttnParams, Call, Heads
from attnx.kernels._seq cimport Norm
from attnx.kernels._mlp cimport Mlp


# One block's operands (pointers into the model's buffers and weights).
cdef struct Block:
    Call fwd                # the attention forward: x, ctx, y, residual set at build
    Call bwd                # the attention backward (store): dy, dx, dctx set per call
    const Heads *heads
    bint cross              # attention over a context (fwd.ctx)
    Norm ln1, ln2           # pre-norm only
    Mlp mlp                 # hid, s, sg: the block's MLP activations; dhid the scratch's
    void *h                 # block input hs[i] (rows, d)
    void *h_out             # block output hs[i + 1]
    void *zt                # Z~ = H_i + attention branch
    void *u1                # pre-norm: LN1(H_i), LN2(Z~) and their row statistics
    void *u2
    void *st1
    void *st2
    void *m1                # dropout multipliers of the two branches
    void *m2


# The stack's sizes and shared scratch.
cdef struct Stack:
    Py_ssize_t n_layers, rows, d
    int nth                 # threads of the elementwise passes
    bint pre, drop, store
    void *branch            # dropout: a branch's output before its mask
    void *dcur              # backward: dL/dH_i between blocks
    void *dbr               # backward scratch (dbr: dropout only, db: pre-norm or dropout)
    void *db
    void *dzt


# every block's forward / backward (tag: the float type; NULL). forward: x, y replace the
# first block's input and the last one's output when not NULL (an inference stack's x
# only). backward: dL/dH_L read from dtop, dL/dH_0 written to dbottom (NULL: not
# computed where it can be skipped), dL/dcontext summed into dctx (NULL: not computed).
cdef void stack_forward(floating *tag, const Stack *st, const Block *blocks,
                        const floating *x, floating *y) noexcept nogil
cdef void stack_backward(floating *tag, const Stack *st, const Block *blocks,
                         const floating *dtop, floating *dbottom,
                         floating *dctx) noexcept nogil


# A LayerNorm's weights, gradients and epsilon.
cdef class NormWeights:
    cdef readonly object g, b, dg, db
    cdef readonly double eps


# One block's attention call: the layer's workspace (shape, buffers, parameters), its
# thread count, key padding mask, rotary tables and context (None: self-attention).
cdef class AttentionOperands:
    cdef readonly AttnShape shape
    cdef readonly AttnBuffers bufs
    cdef readonly AttnParams params
    cdef readonly int threads
    cdef readonly object mask, rope, ctx


# One block's weights and gradients (the attention's are in its AttnParams).
cdef class BlockWeights:
    cdef readonly NormWeights ln1, ln2
    cdef readonly object W1, b1, W2, b2, dW1, db1, dW2, db2


# One block's activations.
cdef class BlockActivations:
    cdef readonly object h, h_out, zt, u1, u2, st1, st2, hid, s, sg, m1, m2


# The stack's shared scratch (forward: branch; backward: the rest).
cdef class StackScratch:
    cdef readonly object branch, dcur, dbr, db, dzt, dhid, part


cdef class BlockStack:
    cdef Stack st
    cdef Block *blocks
    cdef readonly bint f64
    cdef readonly StackScratch scratch
    cdef readonly Py_ssize_t ctx_rows   # rows of the cross blocks' context (0: none)
    cdef list keep
    cdef int _block(self, Py_ssize_t i, AttentionOperands att, BlockWeights w,
                    BlockActivations a, int mlp_threads) except -1


# take() for a buffer the stack writes or reads (writeable unless None)
cdef int ptr(str name, object a, Py_ssize_t rows, Py_ssize_t cols, int type_num,
             bint optional, void **out) except -1
# a LayerNorm's operands from w, the scratch part (None at inference) and the sizes
cdef int norm_of(str name, NormWeights w, object part, Py_ssize_t rows, Py_ssize_t d,
                 int type_num, int nth, Norm *n) except -1
