"""The attnx model file: a safetensors file with attnx's header metadata and checksum.

write(path, arrays, config) writes one atomically (next to path under a temporary name,
then renamed over it, so a failed write leaves any previous file intact); read(path)
returns (arrays, config) after checking the header (its length, every tensor's dtype,
shape and offsets against the file's size) before handing the bytes to safetensors, so
that a damaged or hostile file never makes attnx allocate more than the file holds, and
never runs code; the checksum (SHA-256 over the config and every tensor's name, dtype,
shape and bytes) must match. What the arrays and the config hold is attnx.estimators._state's and
attnx.forecasting._forecaster_state's business; which class a file names is attnx.io's.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import secrets
import struct
from typing import Any

import numpy as np
import safetensors.numpy

from ..runtime._version import __version__

FORMAT = "attnx-estimator"
#: the layout of the arrays and config this attnx writes (estimators, forecasters and the
#: pretrained network alike); raised when it changes, and files of other versions refused
# 1 was an .npz layout of the development before 0.1.0, never released; 2 stored the
# estimators' parameters before the rarely changed ones became keys of `options`
FORMAT_VERSION = 3
SUPPORTED_VERSIONS = (FORMAT_VERSION,)

# a header larger than this is not one attnx wrote (its own are a few kB)
MAX_HEADER_BYTES = 1 << 20
_DTYPES = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "I8": np.int8,
           "I16": np.int16, "I32": np.int32, "I64": np.int64, "U8": np.uint8,
           "U16": np.uint16, "U32": np.uint32, "U64": np.uint64, "BOOL": np.bool_}


# the classes a model file may name, registered by the modules that define them
# (attnx.estimators, attnx.forecasting.forecaster): saving checks here, loading looks up attnx.io's
_CLASSES: dict[str, type] = {}


def register(*classes: type) -> None:
    """Let model files hold these classes (by name)."""
    for cls in classes:
        _CLASSES[cls.__name__] = cls


def check_saveable(obj: Any) -> None:
    """TypeError unless obj is of a registered class (a subclass is not: loading would
    not know it)."""
    if _CLASSES.get(type(obj).__name__) is not type(obj):
        raise TypeError(f"save needs an attnx estimator ({', '.join(sorted(_CLASSES))}), "
                        f"got {type(obj).__name__}")


def write(path: str | os.PathLike[str], arrays: dict[str, np.ndarray],
          config: dict[str, Any]) -> None:
    """Write a model file of `arrays` and `config` to exactly `path` (atomically)."""
    data = _serialise(arrays, config)
    path = os.fspath(path)
    folder, name = os.path.split(os.path.abspath(path))
    tmp = os.path.join(folder, f".{name}.{secrets.token_hex(4)}.tmp")
    # os.open with 0o666 applies the umask like any newly created file
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _serialise(arrays: dict[str, np.ndarray], config: dict[str, Any]) -> bytes:
    text = json.dumps(config, allow_nan=False, sort_keys=True, separators=(",", ":"))
    meta = {"format": FORMAT, "format_version": str(FORMAT_VERSION),
            "attnx_version": __version__, "config": text,
            "checksum": _checksum(text, arrays)}
    return safetensors.numpy.save({k: np.ascontiguousarray(v) for k, v in arrays.items()},
                                  metadata=meta)


def _checksum(config_text: str, arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    h.update(config_text.encode())
    for k in sorted(arrays):
        a = np.ascontiguousarray(arrays[k])
        h.update(f"\0{k}\0{a.dtype.str}\0{a.shape}\0".encode())
        h.update(a.data.cast("B") if a.size else b"")
    return "sha256:" + h.hexdigest()


def read(path: str | os.PathLike[str]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(arrays, config) of a model file; ValueError naming the file when it is
    truncated, corrupted, of another format version or not an attnx model file
    (FileNotFoundError and the like as themselves)."""
    path = os.fspath(path)
    with open(path, "rb") as f:  # a missing file or a folder raises here, as itself
        raw = f.read()
    try:
        header = _check_header(raw)
        meta = header.get("__metadata__")
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise _FormatError("is not an attnx model file (a safetensors file without attnx's "
                               "metadata)")
        _check_version(meta)
        text = meta.get("config")
        if not isinstance(text, str):
            raise _FormatError("is not a valid attnx model file (no configuration)")
    except _FormatError as exc:
        raise ValueError(f"{path} {exc}") from None
    try:
        arrays = safetensors.numpy.load(raw)
    except Exception as exc:  # safetensors' own checks (SafetensorError and others)
        raise ValueError(f"{path} is corrupted: {type(exc).__name__}: {exc}") from None
    if meta.get("checksum") != _checksum(text, arrays):
        raise ValueError(f"{path} is corrupted: its checksum does not match its contents")
    try:
        config = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{path} is not a valid attnx model file ({type(exc).__name__}: "
                         f"{exc})") from None
    return arrays, config


class _FormatError(Exception):
    """A clear reason why a file is not readable, reported as is."""


def _check_version(meta: dict[str, str]) -> None:
    """_FormatError unless the file's format_version is one this attnx reads."""
    found = meta.get("format_version")
    if found in {str(v) for v in SUPPORTED_VERSIONS}:
        return
    reads = (f"this attnx ({__version__}) reads model file format version"
             f"{'s' if len(SUPPORTED_VERSIONS) > 1 else ''} "
             f"{', '.join(map(str, SUPPORTED_VERSIONS))}")
    if found is None:
        raise _FormatError(f"has no model file format version (no 'format_version' in its "
                           f"metadata), which is not supported: {reads}")
    writer = meta.get("attnx_version")
    notes = [f"written by attnx {writer}"] if isinstance(writer, str) else []
    newer = found.isdigit() and int(found) > max(SUPPORTED_VERSIONS)
    if newer:
        notes.append("a newer format than this attnx knows")
    why = f" ({'; '.join(notes)})" if notes else ""
    todo = ("" if newer else "; refit the model with this attnx and save it again (older "
            "formats are not converted)")
    raise _FormatError(f"has model file format version {found!r}, which is not supported: "
                       f"{reads}{why}{todo}")


def _check_header(raw: bytes) -> dict[str, Any]:
    """The parsed safetensors header after checking that it describes tensors lying
    exactly in the rest of the file: known dtypes, sizes matching shapes, offsets
    contiguous, non-overlapping and ending at the end of the file."""
    if len(raw) < 8:
        raise _FormatError(f"is not an attnx model file (only {len(raw)} bytes)")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > len(raw) - 8 or n > MAX_HEADER_BYTES:
        raise _FormatError(f"is not an attnx model file (its first 8 bytes declare a "
                           f"{n}-byte header in a {len(raw)}-byte file)")
    try:
        header = json.loads(raw[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _FormatError(f"is not an attnx model file (the header is not JSON: {exc})") from None
    if not isinstance(header, dict):
        raise _FormatError("is not an attnx model file (the header is not a JSON object)")
    body = len(raw) - 8 - n
    spans = []
    for name, t in header.items():
        if name == "__metadata__":
            if not isinstance(t, dict) or not all(isinstance(v, str) for v in t.values()):
                raise _FormatError("is corrupted (invalid metadata)")
            continue
        if (not isinstance(t, dict) or set(t) != {"dtype", "shape", "data_offsets"}
                or t["dtype"] not in _DTYPES or not isinstance(t["shape"], list)
                or not isinstance(t["data_offsets"], list) or len(t["data_offsets"]) != 2
                or not all(_is_index(v) for v in t["shape"] + t["data_offsets"])):
            raise _FormatError(f"is corrupted (invalid entry for tensor {name!r})")
        begin, end = t["data_offsets"]
        need = math.prod(t["shape"]) * np.dtype(_DTYPES[t["dtype"]]).itemsize
        if not begin <= end <= body or end - begin != need:
            raise _FormatError(f"is corrupted (tensor {name!r} declares {need} bytes at "
                               f"[{begin}, {end}) of a {body}-byte data section)")
        spans.append((begin, end))
    pos = 0
    for begin, end in sorted(spans):
        if begin != pos:
            raise _FormatError("is corrupted (tensor data overlaps or leaves gaps)")
        pos = end
    if pos != body:
        raise _FormatError(f"is corrupted (the tensors cover {pos} of {body} data bytes)")
    return header


def _is_index(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 62
