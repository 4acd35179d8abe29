"""tapegrad.save / tapegrad.load: checkpoints as .npz files that never unpickle code.

Tensors become plain arrays; the structure around them (dicts, lists, tuples, numbers,
strings, None) is a JSON document stored as a string array. np.load runs with
allow_pickle=False, so loading an untrusted file can only yield data or an error. A save
writes a temporary file in the target's directory and renames it over the target, so a
crash mid-save leaves the previous checkpoint intact.
"""
import collections
import io
import json
import os
import tempfile
import zipfile

import numpy as np

from ._front import dtype as D
from ._engine import sizes
from ._front.tensor import Tensor, _numpy_view
from ._front.device import check_device, device as _device

FORMAT = "tapegrad-checkpoint"
VERSION = 1


def _encode(obj, arrays):
    if isinstance(obj, Tensor):
        key = f"t{len(arrays)}"
        arrays[key] = np.array(_numpy_view(obj), copy=True, order="C")    # keeps 0-d
        from .nn.parameter import Parameter
        return {"t": "tensor", "key": key, "dtype": obj.dtype.name,
                "requires_grad": obj.requires_grad, "param": isinstance(obj, Parameter)}
    if obj is None:
        return {"t": "none"}
    if isinstance(obj, (bool, np.bool_)):
        return {"t": "bool", "v": bool(obj)}
    if isinstance(obj, (int, np.integer)):
        return {"t": "int", "v": int(obj)}
    if isinstance(obj, (float, np.floating)):
        return {"t": "float", "v": repr(float(obj))}
    if isinstance(obj, str):
        return {"t": "str", "v": obj}
    if isinstance(obj, D.dtype):
        return {"t": "dtype", "v": obj.name}
    if isinstance(obj, dict):
        return {"t": "odict" if isinstance(obj, collections.OrderedDict) else "dict",
                "keys": [_encode(k, arrays) for k in obj],
                "values": [_encode(v, arrays) for v in obj.values()]}
    if isinstance(obj, (list, tuple)):
        return {"t": type(obj).__name__ if type(obj) in (list, tuple) else "list",
                "items": [_encode(v, arrays) for v in obj]}
    raise TypeError(f"tapegrad.save: cannot save an object of type {type(obj).__name__} "
                    "(tensors, dicts, lists, tuples, numbers, strings and None are supported)")


def save(obj, f):
    """Save obj (a tensor, a state dict, optimizer state, or nested containers of them)."""
    arrays = {}
    doc = {"format": FORMAT, "version": VERSION, "root": _encode(obj, arrays)}
    arrays["__tapegrad__"] = np.array(json.dumps(doc))
    if hasattr(f, "write"):
        np.savez(f, **arrays)
        return
    path = os.fspath(f)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tapegrad-", suffix=".tmp", dir=folder)
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.chmod(tmp, 0o666 & ~umask)       # an ordinary file's mode, not mkstemp's 0600
        with os.fdopen(fd, "wb") as out:
            np.savez(out, **arrays)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class CheckpointError(RuntimeError):
    pass


def _bad(path, why):
    return CheckpointError(f"tapegrad.load: {path} is not a valid tapegrad checkpoint ({why})")


def _decode(node, arrays, path):
    from ._front.creation import _from_array
    from .nn.parameter import Parameter
    try:
        kind = node["t"]
        if kind == "tensor":
            arr = arrays[node["key"]]
            dt = D._by_name(node["dtype"])
            if arr.dtype != dt.np:
                raise ValueError(f"array {node['key']} has dtype {arr.dtype}, expected {dt.name}")
            try:
                t = _from_array(arr, dt, False)
            except RuntimeError as exc:     # (a shape no tensor can have, too many dims)
                raise _bad(path, f"array {node['key']}: {exc}") from None
            if node.get("param"):
                return Parameter(t, requires_grad=bool(node["requires_grad"]))
            return t.requires_grad_(True) if node["requires_grad"] else t
        if kind == "none":
            return None
        if kind in ("bool", "int", "str"):
            return {"bool": bool, "int": int, "str": str}[kind](node["v"])
        if kind == "float":
            return float(node["v"])
        if kind == "dtype":
            return D._by_name(node["v"])
        if kind in ("dict", "odict"):
            cls = collections.OrderedDict if kind == "odict" else dict
            return cls((_decode(k, arrays, path), _decode(v, arrays, path))
                       for k, v in zip(node["keys"], node["values"]))
        if kind in ("list", "tuple"):
            items = [_decode(v, arrays, path) for v in node["items"]]
            return tuple(items) if kind == "tuple" else items
    except (KeyError, TypeError, ValueError) as exc:
        raise _bad(path, f"malformed entry: {exc}") from None
    raise _bad(path, f"unknown entry type {kind!r}")


def _check_arrays(data, path):
    """Every array's .npy header against the bytes its member holds, before NumPy
    allocates what a header claims: a crafted shape (huge, overflowing, negative) over a
    few bytes is refused without touching memory."""
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        for info in zf.infolist():
            if not info.filename.endswith(".npy"):
                continue
            name = info.filename[:-4]
            try:
                with zf.open(info) as fp:
                    version = np.lib.format.read_magic(fp)
                    if version == (1, 0):
                        shape, _, dtype = np.lib.format.read_array_header_1_0(fp)
                    elif version == (2, 0):
                        shape, _, dtype = np.lib.format.read_array_header_2_0(fp)
                    else:
                        raise ValueError(f"unsupported .npy format version {version}")
                    held = info.file_size - fp.tell()
            except (ValueError, RuntimeError, NotImplementedError, EOFError, OSError,
                    zipfile.BadZipFile) as exc:     # (zipfile's: encrypted, unknown method)
                raise _bad(path, f"array {name}: {exc}") from None
            if dtype.hasobject:
                continue            # (np.load refuses it: no pickles)
            if any(s < 0 for s in shape) or sizes.storage_overflows(shape, dtype.itemsize):
                raise _bad(path, f"array {name} claims an impossible shape {list(shape)}")
            n = 1
            for s in shape:
                n *= s
            if n * dtype.itemsize != held:
                raise _bad(path, f"array {name} claims shape {list(shape)} of {dtype} "
                                 f"({n * dtype.itemsize} bytes) but holds {held} bytes")


def _check_location(loc):
    """map_location as PyTorch takes it (a device string, a dict of them, a callable),
    held to the CPU: a callable would be handed storages tapegrad does not have."""
    targets = list(loc.values()) if isinstance(loc, dict) else [loc]
    for t in targets:
        if t is None or isinstance(t, (str, bytes, int, _device)):
            check_device(t, "load")     # (the CPU, any index; other devices: PyTorch's error)
            continue
        if callable(t):
            raise TypeError("load(): map_location as a function is not supported (tapegrad "
                            "loads every tensor on the CPU)")
        raise RuntimeError(f"load(): map_location {t!r}: tapegrad runs on the CPU only")


def load(f, map_location=None, weights_only=True):
    """Load what save() wrote. Never unpickles: a file holding pickled objects, a
    truncated or otherwise malformed file raises an error naming the file, whatever
    weights_only says. map_location: tensors load on the CPU, the only place tapegrad
    keeps them; a location naming anything else is refused."""
    _check_location(map_location)
    if not isinstance(weights_only, bool) and weights_only is not None:
        raise TypeError(f"load(): weights_only must be a bool, not "
                        f"{type(weights_only).__name__}")
    path = getattr(f, "name", f) if not isinstance(f, (str, os.PathLike)) else os.fspath(f)
    try:
        src = f if hasattr(f, "read") else open(os.fspath(f), "rb")
    except OSError as exc:
        raise FileNotFoundError(f"tapegrad.load: cannot open {path}: {exc.strerror}") from None
    try:
        data = src.read()
    finally:
        if src is not f:
            src.close()
    try:
        _check_arrays(data, path)
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except ValueError as exc:
        if "pickle" in str(exc).lower() or "object" in str(exc).lower():
            raise _bad(path, "it contains pickled objects, which tapegrad never loads") from None
        raise _bad(path, str(exc)) from None
    except (zipfile.BadZipFile, EOFError, OSError) as exc:
        raise _bad(path, f"truncated or not an .npz archive: {exc}") from None
    if "__tapegrad__" not in arrays:
        raise _bad(path, "no tapegrad header")
    try:
        doc = json.loads(str(arrays.pop("__tapegrad__")))
    except ValueError as exc:
        raise _bad(path, f"unreadable header: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise _bad(path, "wrong format tag")
    if doc.get("version") != VERSION:
        raise _bad(path, f"format version {doc.get('version')!r}, this tapegrad reads {VERSION}")
    return _decode(doc.get("root"), arrays, path)
