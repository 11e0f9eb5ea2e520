# The AdamW step's argument checks, shared with its plain-loop oracle (attnx.kernels._testing).
cdef int check_adamw_args(Py_ssize_t n, Py_ssize_t ng, Py_ssize_t nm, Py_ssize_t nv,
                          long step, int nthreads) except -1
