"""Fuzzing attnx.load: random, mutated, truncated and crafted files raise a clear
ValueError (or load to a model that still behaves), never anything else."""
import json
import struct
import tracemalloc

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
    path = tmp_path_factory.mktemp("fz") / "good.safetensors"
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
    """Every damaged file is refused with a ValueError naming it, or (a padding space
    of the header turned into other JSON whitespace) loads to the very same
    model. A file that loads to a different model is silent garbage: none allowed."""
    raw, X, expected = good_file
    rng = np.random.default_rng(2026)
    counts = {kind: {"error": 0, "same": 0, "different": 0}
              for kind in ("random", "flipped", "truncated")}
    p = tmp_path / "f.safetensors"
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


def _split(raw):
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def _join(header, data, declared=None):
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text) if declared is None else declared) + text + data


def _refused_within_file_size(path, content):
    """load(path) raises a ValueError naming it, allocating no more than about
    the file's own size (the file is read once, the header parsed)."""
    path.write_bytes(content)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError) as info:
            attnx.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(path) in str(info.value)
    assert peak < 2 * len(content) + 256 * 1024, (peak, len(content), str(info.value))
    return str(info.value)


def test_crafted_headers_are_refused_before_allocating(good_file, tmp_path):
    """Headers that declare huge tensors, a huge header, overlapping or out-of-file
    offsets, unknown dtypes or nonsense: refused before safetensors or numpy
    allocate anything of the declared size."""
    raw = good_file[0]
    header, data = _split(raw)
    # the tensor stored last (its data does not start at offset 0)
    name = max((k for k in header if k != "__metadata__"),
               key=lambda k: header[k]["data_offsets"][0])
    begin, end = header[name]["data_offsets"]
    p = tmp_path / "crafted.safetensors"

    def with_entry(**change):
        return _join({**header, name: {**header[name], **change}}, data)

    cases = {
        "huge tensor": with_entry(shape=[10**6, 10**6]),
        "huge tensor, offsets to match": with_entry(shape=[10**12],
                                                    data_offsets=[0, 8 * 10**12]),
        "offsets past the end": with_entry(data_offsets=[len(data) - 4, len(data) + 60]),
        "overlapping offsets": with_entry(data_offsets=[begin - 4, end - 4]),
        "negative offsets": with_entry(data_offsets=[-8, 0]),
        "unknown dtype": with_entry(dtype="F128"),
        "object dtype": with_entry(dtype="O"),
        "shape of strings": with_entry(shape=["1e12"]),
        "boolean shape": with_entry(shape=[True, True]),
        "header longer than the file": _join(header, data, declared=4 * len(raw)),
        "header of 2**63 bytes": _join(header, data, declared=2**63),
        "header not JSON": struct.pack("<Q", 10) + b"\xff" * 10 + data,
        "header a list": _join([1, 2, 3], data),
        "deeply nested header": struct.pack("<Q", 200_000) + b"[" * 100_000 + b"]" * 100_000,
        "missing data": _join(header, data[:-16]),
        "extra data": _join(header, data + b"\0" * 64),
        "metadata not strings": _join({**header, "__metadata__": {"format": 1}}, data),
    }
    for case, content in cases.items():
        msg = _refused_within_file_size(p, content)
        print(case, "->", msg)


def test_structured_header_fuzz(good_file, tmp_path):
    """Random changes to single header fields (shapes, offsets, dtypes) with a
    consistent header length: all refused (or harmless), never a crash."""
    raw, X, expected = good_file
    header, data = _split(raw)
    names = [k for k in header if k != "__metadata__"]
    rng = np.random.default_rng(7)
    p = tmp_path / "s.safetensors"
    outcomes = {"error": 0, "same": 0, "different": 0}
    for _ in range(200):
        h = json.loads(json.dumps(header))
        entry = h[names[int(rng.integers(len(names)))]]
        field = ("shape", "data_offsets", "dtype")[int(rng.integers(3))]
        if field == "dtype":
            entry["dtype"] = str(rng.choice(["F16", "F64", "I64", "U8", "BOOL", "X"]))
        else:
            vals = entry[field] or [1]
            i = int(rng.integers(len(vals)))
            vals[i] = int(rng.choice([0, 1, -1, 2**31, 2**62, 2**64, vals[i] + 4,
                                      vals[i] * 1000]))
            entry[field] = vals
        p.write_bytes(_join(h, data))
        outcomes[_try(p, X, expected)] += 1
    assert outcomes["different"] == 0 and outcomes["same"] == 0, outcomes


def test_loading_never_runs_code(tmp_path, good_file):
    """Pickles (even named .safetensors) and files naming arbitrary classes or
    modules are refused; the payload that would create a file never runs."""
    import pickle

    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    p = tmp_path / "pickle.safetensors"
    p.write_bytes(pickle.dumps(Payload()))
    with pytest.raises(ValueError, match="pickle.safetensors"):
        attnx.load(p)
    raw = good_file[0]
    header, data = _split(raw)
    meta = header["__metadata__"]
    config = json.loads(meta["config"])
    for cls in ("Payload", "__builtins__.open", "_state", "EstimatorParams"):
        config["class"] = cls
        meta2 = {**meta, "config": json.dumps(config)}
        p.write_bytes(_join({**header, "__metadata__": meta2}, data))
        with pytest.raises(ValueError, match="pickle.safetensors"):
            attnx.load(p)
    assert not marker.exists()
