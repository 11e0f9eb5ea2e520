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
    return path.read_bytes(), X


def _try(path, X):
    """'error' for a clean ValueError, 'ok' for a file that loads and predicts."""
    try:
        est = attnx.load(path)
    except ValueError as exc:
        assert str(path) in str(exc)        # the message names the file
        return "error"
    try:
        if hasattr(est, "model_"):
            assert est.predict(X).shape == X.shape
    except ValueError:
        pass                                # e.g. weights turned NaN: refused at predict
    return "ok"


def test_fuzz_loader(good_file, tmp_path):
    raw, X = good_file
    rng = np.random.default_rng(2026)
    counts = {"error": 0, "ok": 0}
    p = tmp_path / "f.npz"
    for i in range(N_RANDOM):
        p.write_bytes(rng.bytes(int(rng.integers(0, 4000))))
        counts[_try(p, X)] += 1
    for i in range(N_FLIPS):
        b = bytearray(raw)
        for _ in range(int(rng.integers(1, 9))):
            b[int(rng.integers(0, len(b)))] = int(rng.integers(0, 256))
        p.write_bytes(bytes(b))
        counts[_try(p, X)] += 1
    for i in range(N_CUTS):
        p.write_bytes(raw[:int(rng.integers(0, len(raw)))])
        counts[_try(p, X)] += 1
    print(f"\nfuzzed files: {N_RANDOM + N_FLIPS + N_CUTS} -> {counts}")
    assert counts["error"] > N_RANDOM + N_CUTS // 2   # most damage is detected


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
    raw, _ = good_file
    src = zipfile.ZipFile(io.BytesIO(raw))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in src.namelist():
            zf.writestr(name, src.read(name))
    p = tmp_path / "deflated.npz"
    p.write_bytes(buf.getvalue())
    with pytest.raises(ValueError, match="compressed"):
        attnx.load(p)
