#!/usr/bin/env bash
# Run the kernel-level tests once per SIMD level this machine supports
# (0 portable C, 1 AVX2+FMA with OpenBLAS's Haswell kernels, 2 AVX-512F; ATTNX_SIMD caps
# the level at import)
# and say which levels ran. Uses the attnx importable from here (installed, or
# PYTHONPATH=. for an in-place build). Usage: .ci/simd_levels.sh [pytest args]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python}
T="$ROOT/tests"
FILES="$T/kernels/test_kernels.py $T/kernels/test_simd_levels.py $T/layers/test_attention.py
       $T/layers/test_blocked.py $T/layers/test_transformer.py $T/layers/test_torch_oracle.py
       $T/kernels/test_blas.py $T/kernels/test_optim.py $T/kernels/test_embed.py"
# kernel modules added later, tested when their test files exist
for f in kernels/test_flash.py layers/test_sequence_model.py layers/test_sequence_blocks.py \
         layers/test_sequence_stem.py layers/test_sequence_revin.py estimators/test_ppv_tokens.py; do
    [ -f "$T/$f" ] && FILES="$FILES $T/$f"
done
# run outside the checkout: `python -m` puts the working directory first on sys.path,
# and an unbuilt attnx/ source folder must not shadow the attnx under test
RUN=$(mktemp -d)
trap 'rm -rf "$RUN"' EXIT
cd "$RUN"
$PY -c "import attnx" 2>/dev/null || {
    echo "attnx does not import from $RUN: install it, or PYTHONPATH=$ROOT after an in-place build" >&2
    exit 1; }

# what the CPU supports, from the kernel's flags (independent of attnx's own detection)
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
max=0
if [[ " $flags " == *" avx2 "* && " $flags " == *" fma "* ]]; then
    max=1
    [[ " $flags " == *" avx512f "* ]] && max=2
fi
names=(portable avx2 avx512)
ran=()
for level in $(seq 0 "$max"); do
    echo "== SIMD level $level (${names[$level]}): kernel-level tests"
    got=$(ATTNX_SIMD=$level $PY -c "from attnx.kernels import _ops; print(_ops.simd_level())")
    if [[ "$got" != "$level" ]]; then
        echo "ATTNX_SIMD=$level asked, but attnx dispatches to level $got on a CPU that has it" >&2
        exit 1
    fi
    # at the AVX2 level OpenBLAS runs its AVX2 (Haswell) kernels too, as on an AVX2-only
    # CPU (e.g. AMD Zen 2/3); an OPENBLAS_CORETYPE set by the caller is kept
    coretype=${OPENBLAS_CORETYPE:-}
    [[ $level == 1 && -z "$coretype" ]] && coretype=Haswell
    echo "   OPENBLAS_CORETYPE=${coretype:-(not set)}"
    OPENBLAS_CORETYPE=$coretype ATTNX_SIMD=$level $PY -m pytest -q -p no:cacheprovider $FILES "$@"
    ran+=("$level (${names[$level]})")
done
echo "== SIMD levels run: ${ran[*]}"
[[ $max -lt 2 ]] && echo "== not run (CPU lacks them): ${names[*]:$((max + 1))}"
exit 0
