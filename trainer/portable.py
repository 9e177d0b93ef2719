"""Make a checkpoint's state something `torch.load(weights_only=True)` gives back, or say why not.

Resume loads checkpoints with `weights_only=True` (a checkpoint never runs code when it loads), and
that loader refuses most types: a NumPy scalar kept as a "best loss" would save without complaint and
then make every checkpoint unloadable. So each save walks the state on the training thread:

- tensors are copied to fresh CPU memory (so later steps cannot change the bytes being written);
- NumPy scalars and arrays are stored as tagged byte tensors and come back with their exact NumPy type
  and dtype (a `numpy.float32` stays a `numpy.float32`, so arithmetic on it resumes bit for bit);
- plain Python values, dicts, lists, tuples and sets are kept; anything else is tried once per type
  under the loader's rules and, if refused, the save fails there and then naming the key and the type.
"""

from __future__ import annotations

import copy
import io
from collections import OrderedDict
from typing import Any

import numpy as np
import torch

from .errors import UnsupportedStateError

# Marks a dict that stands for a NumPy value; a key no real state dict uses.
NUMPY_TAG = "__gcptui_trainer_numpy__"
_PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.Size, torch.dtype, torch.device)
# Types seen to round-trip through torch.save / torch.load(weights_only=True): tested once each.
_ACCEPTED_TYPES: set[type] = set()
ALLOWED_TYPES_TEXT = (
    "tensors, NumPy arrays and scalars, and None/bool/int/float/complex/str/bytes "
    "in dicts, lists, tuples and sets"
)


def check_portable(value: Any, where: str = "state") -> None:
    """Raise UnsupportedStateError if `value` could not be checkpointed; copies no tensor."""
    portable_snapshot(value, where, copy_tensors=False)


def portable_snapshot(value: Any, where: str = "state", copy_tensors: bool = True) -> Any:
    """A copy of `value` that loads back under `weights_only=True`; raises UnsupportedStateError.

    `where` names the value in error messages (e.g. `stateful['loop']`); keys are appended to it.
    With `copy_tensors` False, tensors are passed through (for a check that copies nothing big).
    """
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True) if copy_tensors else value
    if isinstance(value, np.ndarray | np.generic):
        return _encode_numpy(value, where)
    kind = type(value)
    if kind in _PLAIN:
        return value  # immutable: no copy needed
    if kind is dict or kind is OrderedDict:
        return kind(
            (_portable_key(key, where), portable_snapshot(item, f"{where}[{key!r}]", copy_tensors))
            for key, item in value.items()
        )
    if kind is list or kind is tuple:
        return kind(
            portable_snapshot(item, f"{where}[{index}]", copy_tensors) for index, item in enumerate(value)
        )
    if kind is set:
        return {_portable_key(item, where) for item in value}
    if kind is bytearray:
        return bytearray(value)
    _check_loadable(value, where)
    return copy.deepcopy(value)


def restore_portable(value: Any) -> Any:
    """The inverse of `portable_snapshot` on a loaded state: NumPy values come back as NumPy."""
    if isinstance(value, dict):
        if NUMPY_TAG in value:
            return _decode_numpy(value)
        return type(value)((key, restore_portable(item)) for key, item in value.items())
    if isinstance(value, list):
        return [restore_portable(item) for item in value]
    if type(value) is tuple:
        return tuple(restore_portable(item) for item in value)
    return value


def _portable_key(key: Any, where: str) -> Any:
    # Keys must be hashable, so NumPy keys cannot be swapped for a tagged dict: ask for a plain value.
    if isinstance(key, np.generic):
        raise UnsupportedStateError(
            f"cannot checkpoint {where}: key {key!r} is a {_type_name(key)}, which "
            f"torch.load(weights_only=True) refuses, so the run could not resume; use "
            f"{type(key.item()).__name__}(key) instead"
        )
    if type(key) not in _PLAIN and not (type(key) is tuple and all(type(k) in _PLAIN for k in key)):
        _check_loadable(key, f"{where} (key {key!r})")
    return key


def _encode_numpy(value: np.ndarray | np.generic, where: str) -> dict[str, Any]:
    array = np.asarray(value)
    if array.dtype.hasobject or array.dtype.fields is not None:
        raise UnsupportedStateError(
            f"cannot checkpoint {where}: a NumPy {'array' if isinstance(value, np.ndarray) else 'scalar'} of "
            f"dtype {array.dtype} (objects or fields) does not load back with torch.load(weights_only=True); "
            f"checkpoints hold {ALLOWED_TYPES_TEXT}"
        )
    raw = np.ascontiguousarray(array).tobytes()
    return {
        NUMPY_TAG: "scalar" if isinstance(value, np.generic) else "array",
        "dtype": array.dtype.str,
        "shape": list(array.shape),
        # Raw bytes in a uint8 tensor: any dtype (float16, uint32, datetime64, str_) stays exact.
        "data": torch.frombuffer(bytearray(raw), dtype=torch.uint8)
        if raw
        else torch.empty(0, dtype=torch.uint8),
    }


def _decode_numpy(record: dict[str, Any]) -> np.ndarray | np.generic:
    dtype = np.dtype(record["dtype"])
    data = record["data"].numpy().tobytes()
    array = np.frombuffer(data, dtype=dtype).reshape(record["shape"]).copy()  # writable, owns its memory
    return array[()] if record[NUMPY_TAG] == "scalar" else array


def _check_loadable(value: Any, where: str) -> None:
    kind = type(value)
    if kind in _ACCEPTED_TYPES:
        return
    buffer = io.BytesIO()
    try:
        torch.save(value, buffer)
        buffer.seek(0)
        torch.load(buffer, weights_only=True)
    except Exception:  # noqa: BLE001 - any failure means the same: a resume could not load it
        raise UnsupportedStateError(
            f"cannot checkpoint {where}: a {_type_name(value)} does not load back with "
            f"torch.load(weights_only=True), so the run could not resume; checkpoints hold "
            f"{ALLOWED_TYPES_TEXT}: convert it, or save its state instead (for a random generator "
            "e.g. rng.bit_generator.state or rng.getstate())"
        ) from None
    _ACCEPTED_TYPES.add(kind)


def _type_name(value: Any) -> str:
    kind = type(value)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
