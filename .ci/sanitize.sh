#!/usr/bin/env bash
# Build attnx's extensions with AddressSanitizer + UndefinedBehaviorSanitizer
# (ATTNX_SANITIZE=1: -O1 -g, frame pointers, OpenMP on) in a temporary copy of the
# sources, then run a representative subset of the tests on that build: every
# kernel (attention dense and blocked, fwd/bwd, self and cross, causal, masks, rope,
# SiLU MLP, AdamW), shapes of several blocks, threads, and every SIMD level the CPU
# has (test_simd_levels runs one interpreter per level; the rest runs at the top
# level and again at the portable level). Well under 10 minutes on 2 cores.
#
# ASan must be the first runtime in the process, hence LD_PRELOAD of libasan (the
# Python binary itself is not instrumented). detect_leaks=0: CPython keeps
# interned objects, module state and arenas alive until exit on purpose, and
# LeakSanitizer would report all of it as leaks at shutdown; leaks of attnx's own
# buffers are covered by tests/estimators/test_leaks.py. PYTHONMALLOC=malloc routes small
# Python objects through malloc so ASan sees them too.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

echo "== sanitized build (ASan + UBSan, -O1 -g, OpenMP) in $WORK"
cp -r attnx csrc setup.py "$WORK"/
[ -f pyproject.toml ] && cp pyproject.toml "$WORK"/
rm -f "$WORK"/attnx/kernels/*.so "$WORK"/attnx/kernels/*.c
(cd "$WORK" && ATTNX_SANITIZE=1 $PY setup.py build_ext --inplace --force -j 2 >build.log 2>&1) \
    || { tail -30 "$WORK/build.log"; exit 1; }
CC=$($PY -c "import sysconfig; print((sysconfig.get_config_var('CC') or 'gcc').split()[0])")
ASAN_LIB=$($CC -print-file-name=libasan.so)
[ -f "$ASAN_LIB" ] || { echo "libasan.so not found for $CC" >&2; exit 1; }

export LD_PRELOAD="$ASAN_LIB"
# reports go to files (pytest captures stderr, and an aborted test's capture is lost);
# they are printed when a run fails
LOGS="$WORK/sanitizer-logs"
mkdir -p "$LOGS"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1:check_initialization_order=1:strict_string_checks=1:log_path=$LOGS/asan"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$LOGS/ubsan"
run() {
    local rc=0
    "$@" || rc=$?
    if [ "$rc" -ne 0 ] || compgen -G "$LOGS/*" >/dev/null; then
        for f in "$LOGS"/*; do [ -f "$f" ] && { echo "---- $f"; cat "$f"; }; done
        echo "== sanitizer run FAILED (exit $rc)"
        exit $(( rc ? rc : 1 ))
    fi
}
export PYTHONMALLOC=malloc
export ATTNX_SANITIZED=1   # tests that measure memory skip (ASan's shadow memory)
export PYTHONPATH="$WORK"
export ATTNX_REQUIRE_TORCH=${ATTNX_REQUIRE_TORCH:-1}
# run from the build folder: `python -m` puts the working directory first on sys.path,
# and the checkout's own attnx/ must not shadow the sanitized one
cd "$WORK"
$PY -c "import attnx, sys; assert attnx.__file__.startswith('$WORK'), attnx.__file__; \
from attnx.kernels import _ops; print('sanitized attnx from', attnx.__file__, '- SIMD', _ops.simd_level_name())"

T="$ROOT/tests"
SUBSET="$T/kernels/test_kernels.py $T/kernels/test_blas.py $T/layers/test_blocked.py
        $T/layers/test_attention.py $T/layers/test_transformer.py $T/runtime/test_concurrency.py
        $T/kernels/test_simd_levels.py"
# kernel modules added later
[ -f "$T/kernels/test_flash.py" ] && SUBSET="$SUBSET $T/kernels/test_flash.py"
[ -f "$T/layers/test_sequence_blocks.py" ] && SUBSET="$SUBSET $T/layers/test_sequence_blocks.py"
echo "== subset at the CPU's best SIMD level"
run $PY -m pytest -q -p no:cacheprovider $SUBSET "$@"
# (test_simd_levels above already ran forward/backward of every kernel at each level
# in its own interpreter, under the sanitizers too)
echo "== kernel tests again at the portable level"
run env ATTNX_SIMD=0 $PY -m pytest -q -p no:cacheprovider "$T/kernels/test_kernels.py" \
    "$T/layers/test_blocked.py" \
    "$@"
echo "== sanitizer run passed: no ASan/UBSan report"
