"""Fuzzing attnx.load: random, mutated, truncated and crafted files raise a clear
ValueError (or load to a model that still behaves), never anything else."""
import io
import zipfile

import numpy as np
import pytest

import attnx
from attnx.datasets import max_position_task

N_RANDOM, N_FLIPS, N_CUTS = 150, 400, 150


@pytest.fixture(scope="module")
def good_file(tmp_path_factory):
    X, Y = max_position_task(16, seq_len=4, d_model=4, random_state=0)
    est = attnx.TransformerRegressor(n_heads=2, n_layers=1, d_hidden=8, epochs=1,
                                     batch_size=8, random_state=0).fit(X, Y)
    path = tmp_path_factory.mktemp("fz") / "good.npz"
    est.save(path)
    return path.read_bytes(), X, est.predict(X)


def _try(path, X, expected):
    """'error' for a clean ValueError naming the file; 'same' for a file that loads to
    a model predicting exactly what the saved one did; 'different' otherwise."""
    try:
        est = attnx.load(path)
    except ValueError as exc:
        assert str(path) in str(exc)        # the message names the file
        return "error"
    if not hasattr(est, "model_"):
        return "different"
    try:
        return "same" if np.array_equal(est.predict(X), expected) else "different"
    except ValueError:
        return "different"


def test_fuzz_loader(good_file, tmp_path):
    """Every damaged file is refused with a ValueError naming it, or (a flipped byte
    the format does not depend on, e.g. a zip timestamp) loads to the very same
    model. A file that loads to a different model is silent garbage: none allowed."""
    raw, X, expected = good_file
    rng = np.random.default_rng(2026)
    counts = {kind: {"error": 0, "same": 0, "different": 0}
              for kind in ("random", "flipped", "truncated")}
    p = tmp_path / "f.npz"
    for i in range(N_RANDOM):
        p.write_bytes(rng.bytes(int(rng.integers(0, 4000))))
        counts["random"][_try(p, X, expected)] += 1
    for i in range(N_FLIPS):
        b = bytearray(raw)
        for _ in range(int(rng.integers(1, 9))):
            k = int(rng.integers(0, len(b)))
            b[k] = (b[k] + int(rng.integers(1, 256))) % 256   # really changes the byte
        p.write_bytes(bytes(b))
        counts["flipped"][_try(p, X, expected)] += 1
    for i in range(N_CUTS):
        p.write_bytes(raw[:int(rng.integers(0, len(raw)))])
        counts["truncated"][_try(p, X, expected)] += 1
    assert counts["random"] == {"error": N_RANDOM, "same": 0, "different": 0}, counts
    assert counts["truncated"] == {"error": N_CUTS, "same": 0, "different": 0}, counts
    flipped = counts["flipped"]
    assert flipped["different"] == 0, counts
    assert flipped["error"] + flipped["same"] == N_FLIPS
    # most flips land in checked bytes (weights and headers), not in ignored fields
    assert flipped["error"] > 0.8 * N_FLIPS, counts


def test_a_lone_npy_file_is_refused_before_numpy_reads_its_header(tmp_path):
    """A bare .npy whose header declares 8 TB: refused without allocating it."""
    import tracemalloc

    hdr = io.BytesIO()
    np.lib.format.write_array_header_1_0(hdr, {"descr": "<f8", "fortran_order": False,
                                              "shape": (10**12,)})
    p = tmp_path / "lone.npy"
    p.write_bytes(hdr.getvalue() + b"\0" * 64)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="lone.npy"):
            attnx.load(p)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20


def test_header_claiming_a_huge_array_is_refused_before_allocating(tmp_path):
    """A stored .npy member whose header promises 8 TB must not be allocated."""
    buf = io.BytesIO()
    hdr = io.BytesIO()
    np.lib.format.write_array_header_1_0(hdr, {"descr": "<f8", "fortran_order": False,
                                              "shape": (10**12,)})
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("params.npy", hdr.getvalue() + b"\0" * 64)
        zf.writestr("format.npy", hdr.getvalue())
    p = tmp_path / "huge.npz"
    p.write_bytes(buf.getvalue())
    with pytest.raises(ValueError, match="huge.npz.*claims"):
        attnx.load(p)


def test_compressed_or_bloated_archives_are_refused(tmp_path, good_file):
    raw = good_file[0]
    src = zipfile.ZipFile(io.BytesIO(raw))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in src.namelist():
            zf.writestr(name, src.read(name))
    p = tmp_path / "deflated.npz"
    p.write_bytes(buf.getvalue())
    with pytest.raises(ValueError, match="compressed"):
        attnx.load(p)
