"""Let the kernels switch scipy's OpenBLAS to one thread inside their parallel loops.

threadpoolctl finds the OpenBLAS that scipy.linalg.cython_blas calls into; the
kernels get the addresses of its set/get-num-threads functions and call them
around each prange (a plain C call, no Python). With another BLAS (MKL, BLIS)
nothing is registered and the BLAS's own nesting rules apply.
"""
import ctypes

import scipy.linalg.cython_blas  # noqa: F401  (loads scipy's BLAS before we look for it)

from . import _ops


def _scipy_openblas():
    from threadpoolctl import ThreadpoolController

    libs = [lc for lc in ThreadpoolController().lib_controllers
            if lc.internal_api == "openblas"]
    # pip wheels of scipy vendor OpenBLAS in scipy.libs (or depend on scipy-openblas32);
    # numpy's copy (numpy.libs, 64-bit integers) is a different library
    own = [lc for lc in libs
           if "scipy.libs" in lc.filepath or "scipy_openblas32" in lc.filepath]
    if len(own) == 1:
        return own[0]
    return libs[0] if len(libs) == 1 else None


def register():
    """Hand the kernels scipy's OpenBLAS thread setter; returns its path or None."""
    try:
        lib = _scipy_openblas()
    except Exception:  # threadpoolctl could not inspect this process
        return None
    if lib is None:
        return None
    setter = getter = None
    for prefix in (lib._symbol_prefix or "", "", "scipy_"):
        for suffix in (lib._symbol_suffix or "", ""):
            try:
                setter = getattr(lib.dynlib, f"{prefix}openblas_set_num_threads{suffix}")
                getter = getattr(lib.dynlib, f"{prefix}openblas_get_num_threads{suffix}")
                break
            except AttributeError:
                continue
        if setter is not None:
            break
    if setter is None:
        return None
    _ops.register_blas_threads(ctypes.cast(setter, ctypes.c_void_p).value,
                               ctypes.cast(getter, ctypes.c_void_p).value)
    return lib.filepath


BLAS_PATH = register()
