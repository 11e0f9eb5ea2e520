"""Save and load estimators: one .npz file, readable without pickle.

Arrays in the file (written with numpy.savez, read with allow_pickle=False):
  format          "attnx-estimator"
  version         the format version (FORMAT_VERSION), checked on load
  meta            JSON: class name, get_params() (dtype as a string, class_weight
                  as label/weight pairs), the model architecture, the kind of
                  target, fitted scalars (n_iter_, ...), the optimizer's step count
                  and settings, the shuffling and dropout RNG states
  params          the model's flat weight buffer (model_.params.flat)
  opt_m_<i>, opt_v_<i>   AdamW moment buffers
  loss_curve, validation_loss_curve   float64 per-epoch losses
  classes         a classifier's classes_ (numbers or strings)
The fitted part comes from the estimator's own serialiser (_fitted_state /
_set_fitted_state), which pickling uses too; this module only writes the file.
The estimator's scratch buffers and the model's workspaces are not stored.
"""
import json
import math
import os
import secrets
import zipfile

import numpy as np

from .estimators import (AttentionClassifier, AttentionRegressor, TransformerClassifier,
                         TransformerRegressor)

FORMAT = "attnx-estimator"
FORMAT_VERSION = 1

_CLASSES = {c.__name__: c for c in (AttentionRegressor, TransformerRegressor,
                                     AttentionClassifier, TransformerClassifier)}


def save(est, path):
    """Write est (an attnx regressor or classifier, fitted or not) to path.

    The file is written next to path under a temporary name, then renamed over
    path, so a failed save leaves any previous file there intact.
    """
    arrays = _to_arrays(est)
    path = os.fspath(path)
    folder, name = os.path.split(os.path.abspath(path))
    tmp = os.path.join(folder, f".{name}.{secrets.token_hex(4)}.tmp")
    # os.open with 0o666 applies the umask like any newly created file
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def load(path):
    """Read an estimator written by save (or est.save); raises ValueError naming the
    file when it is truncated, corrupted, of another format version or not one."""
    path = os.fspath(path)
    _check_archive(path)
    # any failure to parse the archive means a damaged or foreign file; zipfile and
    # numpy report those with many exception types (BadZipFile, EOFError,
    # NotImplementedError for a flipped compression method, ...)
    try:
        data = np.load(path, allow_pickle=False)
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        raise
    except Exception as exc:
        raise ValueError(f"{path} is not a readable attnx model file (truncated, corrupted "
                         f"or of another format): {exc}") from exc
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise ValueError(f"{path} is not an attnx model file: it holds one array, "
                         f"not an .npz archive")
    try:
        with data:
            # read every member now: zipfile checks each member's CRC as it is read
            arrays = {k: data[k] for k in data.files}
    except Exception as exc:
        raise ValueError(f"{path} is corrupted: {type(exc).__name__}: {exc}") from exc
    try:
        return _from_arrays(arrays)
    except _FormatError as exc:
        raise ValueError(f"{path}: {exc}") from None
    except Exception as exc:  # a field of the wrong type or shape: the file was altered
        raise ValueError(f"{path} is not a valid attnx model file ({type(exc).__name__}: "
                         f"{exc})") from exc


def _check_archive(path):
    """Before numpy reads anything: every member must be stored uncompressed, fit in
    the file, and be an .npy whose header promises no more bytes than the member
    holds. So a hostile file cannot make load allocate more than its own size."""
    try:
        with open(path, "rb") as f:  # a missing file or a folder raises here, as itself
            is_zip = zipfile.is_zipfile(f)
        if not is_zip:
            # never hand anything else to numpy: a lone .npy's header alone would make
            # it allocate whatever shape the header declares
            raise _FormatError("not an .npz archive")
        size = os.path.getsize(path)
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
            if len(infos) > 64 or sum(i.file_size for i in infos) > size:
                raise ValueError("its members do not fit in the file")
            for info in infos:
                if info.compress_type != zipfile.ZIP_STORED:
                    raise ValueError(f"member {info.filename!r} is compressed")
                with zf.open(info) as f:
                    version = np.lib.format.read_magic(f)
                    if version == (1, 0):
                        shape, _, dtype = np.lib.format.read_array_header_1_0(f)
                    else:
                        shape, _, dtype = np.lib.format.read_array_header_2_0(f)
                    if dtype.hasobject:
                        raise ValueError(f"member {info.filename!r} holds Python objects")
                    need = math.prod(shape) * dtype.itemsize
                    if need > info.file_size:
                        raise ValueError(f"member {info.filename!r} claims {need} bytes, "
                                         f"holds {info.file_size}")
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        raise
    except _FormatError as exc:
        raise ValueError(f"{path} is not an attnx model file: {exc}") from None
    except Exception as exc:
        raise ValueError(f"{path} is corrupted or not an attnx model file: "
                         f"{type(exc).__name__}: {exc}") from exc


class _FormatError(Exception):
    """A clear reason why a file is not readable, reported as is."""


# ---- estimator -> arrays ---------------------------------------------------
def _to_arrays(est):
    from . import __version__

    cls = type(est).__name__
    if _CLASSES.get(cls) is not type(est):
        raise TypeError(f"save needs an AttentionRegressor, TransformerRegressor, "
                        f"AttentionClassifier or TransformerClassifier, got {cls}")
    fitted = "model_" in vars(est)
    meta = {"class": cls, "attnx_version": __version__, "params": _params_json(est),
            "fitted": fitted,
            # dtype goes in as a string; remember its form so that load gives it back
            "dtype_given_as": ("str" if isinstance(est.dtype, str) else
                               "dtype" if isinstance(est.dtype, np.dtype) else "type")}
    arrays = {"format": np.array(FORMAT), "version": np.array(FORMAT_VERSION)}
    if fitted:
        state_meta, state_arrays = est._fitted_state()  # the estimator's one serialiser
        meta.update(state_meta)
        for k, v in state_arrays.items():
            v = np.asarray(v)
            if v.dtype.hasobject:
                raise TypeError(f"{k} holds Python objects ({v.dtype}), which a model file "
                                f"cannot store: use int or str labels, or pickle the "
                                f"estimator")
            arrays[k] = v
    arrays["meta"] = np.array(json.dumps(meta))
    return arrays


def _plain(v):
    return v.item() if isinstance(v, np.generic) else v


def _params_json(est):
    out = {}
    for k, v in est.get_params().items():
        if k == "dtype":
            v = np.dtype(v).name
        elif k == "class_weight" and isinstance(v, dict):
            # JSON object keys are strings: keep the labels' types as a list of pairs
            v = {"items": [[_plain(a), _plain(b)] for a, b in v.items()]}
        elif isinstance(v, tuple):
            v = list(v)
        elif isinstance(v, np.generic):
            v = v.item()
        if k == "random_state" and not (v is None or isinstance(v, int)):
            # a Generator cannot go into JSON; the shuffling state is saved anyway,
            # so only a later fit() from scratch is affected
            v = None
        out[k] = v
    json.dumps(out)  # fail here, before anything is written, on an exotic value
    return out


# ---- arrays -> estimator ---------------------------------------------------
def _from_arrays(a):
    fmt = a.get("format")
    if fmt is None or fmt.shape != () or fmt.dtype.kind != "U" or str(fmt) != FORMAT:
        raise _FormatError(f"not an attnx model file (an .npz holding {sorted(a)})")
    version = int(a["version"])
    if version != FORMAT_VERSION:
        raise _FormatError(f"model file format version {version} is not supported "
                           f"(this attnx reads version {FORMAT_VERSION})")
    meta = json.loads(str(a["meta"]))
    cls = _CLASSES.get(meta["class"])
    if cls is None:
        raise _FormatError(f"unknown estimator class {meta['class']!r}")
    params = dict(meta["params"])
    form = meta.get("dtype_given_as", "type")
    dt = np.dtype(params["dtype"])
    params["dtype"] = params["dtype"] if form == "str" else dt if form == "dtype" else dt.type
    params["betas"] = tuple(params["betas"])
    cw = params.get("class_weight")
    if isinstance(cw, dict):
        params["class_weight"] = {label: w for label, w in cw["items"]}
    est = cls(**params)
    if not meta["fitted"]:
        return est
    est._set_fitted_state(meta, a)
    return est
