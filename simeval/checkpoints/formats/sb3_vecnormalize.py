"""SB3's VecNormalize statistics, read without running code (see sb3.py for where they are looked for).

``VecNormalize.save`` pickles the wrapper. A restricted unpickler maps the few
globals such a pickle names (the wrapper, its RunningMeanStd, gymnasium Box
spaces, numpy arrays, scalars and dtypes) to inert records, imports nothing,
and refuses any other global; arrays are rebuilt afterwards from their raw
bytes. The ``.npz`` alternative needs no unpickling at all.
"""

from __future__ import annotations

import glob
import os
import pickle
import re
from typing import IO, Any

from simeval.checkpoints.base import CheckpointError

CALLBACK_STEPS = re.compile(r"^(?P<prefix>.*)_(?P<step>\d+)_steps\.zip$")  # CheckpointCallback's names


def error(path: str, problem: str) -> CheckpointError:
    """The one-line CheckpointError for ``path`` (shared with sb3.py)."""
    return CheckpointError(f"{path}: {problem}.")


VECNORMALIZE_ENV = "SIMEVAL_SB3_VECNORMALIZE"
MAX_STATS_BYTES = 64 << 20  # VecNormalize statistics: arrays of observation size, kilobytes in practice
NPZ_HINT = (
    "save the statistics with np.savez(PATH.npz, mean=env.obs_rms.mean, var=env.obs_rms.var, "
    "clip_obs=env.clip_obs, epsilon=env.epsilon) instead"
)


def find(path: str, family: str, saved: dict) -> str | None:
    """The VecNormalize statistics that belong to the zip at ``path`` (see the module docstring), or None."""
    pointed = os.environ.get(VECNORMALIZE_ENV)
    if pointed:
        if not os.path.isfile(pointed):
            raise error(path, f"${VECNORMALIZE_ENV} names {pointed}, which does not exist")
        return pointed
    directory = os.path.dirname(os.path.abspath(path))
    name = os.path.basename(path)
    steps = CALLBACK_STEPS.match(name)
    if steps:
        stem = f"{steps['prefix']}_vecnormalize_{steps['step']}_steps"
        for ext in (".npz", ".pkl"):
            if os.path.isfile(os.path.join(directory, stem + ext)):
                return os.path.join(directory, stem + ext)
        siblings = glob.escape(steps["prefix"]) + "_vecnormalize_*_steps.*"
        others = glob.glob(os.path.join(glob.escape(directory), siblings))
        if others:
            raise error(
                path,
                f"the run saved VecNormalize statistics with its checkpoints ({os.path.basename(sorted(others)[0])}) "
                f"but {stem}.pkl is missing: copy it beside the zip or name one with ${VECNORMALIZE_ENV}",
            )
    for folder in (directory, os.path.join(directory, os.path.splitext(name)[0])):
        for base in ("vecnormalize", "vec_normalize"):
            for ext in (".npz", ".pkl"):
                candidate = os.path.join(folder, base + ext)
                if os.path.isfile(candidate):
                    return candidate
    if family == "ppo" and saved.get("_last_original_obs") is not None:
        raise error(
            path,
            "it was trained under VecNormalize (its data has _last_original_obs) but no statistics are beside it: "
            f"save them as vecnormalize.pkl (VecNormalize.save) or .npz, or name the file with ${VECNORMALIZE_ENV}",
        )
    return None


def read(stats_path: str, obs_dim: int) -> dict | None:
    """{"mean", "var", "clip_obs", "epsilon"} from a VecNormalize ``.pkl`` or ``.npz``; None if it has norm_obs off."""
    import numpy as np

    from simeval.checkpoints.bounds import open_data

    try:
        with open_data(stats_path) as f:
            _check_bounds(stats_path, f)
            stats = _npz_stats(f) if stats_path.endswith(".npz") else _pickle_stats(f)
    except CheckpointError:
        raise
    except _Refused as exc:
        raise error(stats_path, f"refused to read VecNormalize statistics: {exc}; {NPZ_HINT}") from None
    except OSError as exc:
        raise error(stats_path, f"cannot read VecNormalize statistics ({exc.strerror or exc})") from None
    except Exception as exc:  # noqa: BLE001 - truncated or corrupt file, wrong keys or types
        what = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        raise error(stats_path, f"not readable VecNormalize statistics ({what}); {NPZ_HINT}") from None
    if stats is None:
        return None
    for key in ("mean", "var"):
        stats[key] = np.asarray(stats[key], dtype=np.float64)
        if stats[key].shape != (obs_dim,) or not np.isfinite(stats[key]).all():
            raise error(stats_path, f"VecNormalize {key} has shape {stats[key].shape}, the policy takes ({obs_dim},)")
    return stats


def _check_bounds(stats_path: str, f: IO[bytes]) -> None:
    """Statistics are a few arrays of observation size: a file (or an ``.npz`` expanding) past MAX_STATS_BYTES is
    refused unread (``f``: the file, open)."""
    from simeval.checkpoints.bounds import check_size, check_zip

    check_size(stats_path, os.fstat(f.fileno()).st_size, MAX_STATS_BYTES)
    if stats_path.endswith(".npz"):
        check_zip(stats_path, f, MAX_STATS_BYTES)
        f.seek(0)


def _npz_stats(f: IO[bytes]) -> dict:
    import numpy as np

    with np.load(f, allow_pickle=False) as z:
        return {
            "mean": z["mean"],
            "var": z["var"],
            "clip_obs": float(z["clip_obs"]) if "clip_obs" in z.files else 10.0,
            "epsilon": float(z["epsilon"]) if "epsilon" in z.files else 1e-8,
        }


class _Refused(Exception):
    """A VecNormalize pickle that names something the restricted reader does not allow."""


_NUMPY_CORE = ("numpy.core", "numpy._core")  # numpy 1.x, 2.x
_RECONSTRUCT = {f"{m}.multiarray._reconstruct" for m in _NUMPY_CORE}
_FROMBUFFER = {f"{m}.numeric._frombuffer" for m in _NUMPY_CORE}
_SCALAR = {f"{m}.multiarray.scalar" for m in _NUMPY_CORE}
_VECNORMALIZE = "stable_baselines3.common.vec_env.vec_normalize.VecNormalize"
_RMS = "stable_baselines3.common.running_mean_std.RunningMeanStd"
# What SB3's VecNormalize.save names: the wrapper, its RunningMeanStd, the Box spaces (with their numpy
# Generator), numpy arrays, scalars and dtypes. Each maps to an inert record; nothing is imported.
_ALLOWED = {
    _VECNORMALIZE,
    _RMS,
    "gymnasium.spaces.box.Box",
    "numpy.dtype",
    "numpy.ndarray",
    *_RECONSTRUCT,
    *_FROMBUFFER,
    *_SCALAR,
    "numpy.random._pickle.__generator_ctor",
    "numpy.random._pickle.__bit_generator_ctor",
    "numpy.random._pickle.__randomstate_ctor",
    "numpy.random._pcg64.PCG64",
    "numpy.random._pcg64.PCG64DXSM",
    "numpy.random._mt19937.MT19937",
    "numpy.random._philox.Philox",
    "numpy.random._sfc64.SFC64",
    "numpy.random.bit_generator.SeedSequence",
    "numpy.random.bit_generator.__pyx_unpickle_SeedSequence",
}


class _Record:
    """Inert stand-in for an allowed global: keeps its arguments and pickled state, runs nothing."""

    GLOBAL = ""

    def __new__(cls, *args: Any, **kwargs: Any):
        obj = object.__new__(cls)
        obj.args, obj.state = args, None
        return obj

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        self.state = state


_RECORDS: dict[str, type] = {}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> type:
        full = f"{module}.{name}"
        if full not in _ALLOWED:
            raise _Refused(f"it names {full}, which could run code")
        if full not in _RECORDS:
            _RECORDS[full] = type(f"Record_{name}", (_Record,), {"GLOBAL": full})
        return _RECORDS[full]


def _pickle_stats(f: IO[bytes]) -> dict | None:
    top = _Unpickler(f).load()
    if getattr(top, "GLOBAL", None) != _VECNORMALIZE or not isinstance(top.state, dict):
        raise ValueError("not a pickled VecNormalize")
    state = top.state
    if state.get("norm_obs") is False:
        return None
    rms = state.get("obs_rms")
    if getattr(rms, "GLOBAL", None) != _RMS or not isinstance(rms.state, dict):
        raise ValueError("obs_rms is not one RunningMeanStd (dict observations are not supported)")
    return {
        "mean": _array(rms.state["mean"]),
        "var": _array(rms.state["var"]),
        "clip_obs": float(_array(state["clip_obs"])),
        "epsilon": float(_array(state["epsilon"])),
    }


def _array(obj: Any):
    """A numeric numpy array from a pickled ndarray/scalar record (or a plain number)."""
    import numpy as np

    kind = getattr(obj, "GLOBAL", None)
    if kind in _RECONSTRUCT and isinstance(obj.state, tuple) and len(obj.state) == 5:
        _, shape, dtype, fortran, raw = obj.state
        return _from_bytes(raw, dtype, shape, "F" if fortran else "C")
    if kind in _FROMBUFFER and len(obj.args) == 4:
        raw, dtype, shape, order = obj.args
        return _from_bytes(raw, dtype, shape, order)
    if kind in _SCALAR and len(obj.args) == 2:
        return _from_bytes(obj.args[1], obj.args[0], (), "C")
    if isinstance(obj, (int, float)) and not isinstance(obj, bool):
        return np.asarray(float(obj))
    raise ValueError(f"expected a numeric array, found {kind or type(obj).__name__}")


def _from_bytes(raw: Any, dtype: Any, shape: Any, order: str):
    import numpy as np

    dt = _dtype(dtype)
    if not isinstance(raw, (bytes, bytearray)) or not isinstance(shape, tuple) or order not in ("C", "F"):
        raise ValueError("a malformed array")
    if not all(isinstance(n, int) and n >= 0 for n in shape) or int(np.prod(shape)) * dt.itemsize != len(raw):
        raise ValueError(f"an array of shape {shape} with {len(raw)} bytes")
    return np.frombuffer(bytes(raw), dtype=dt).reshape(shape, order=order).astype(np.float64)


def _dtype(obj: Any):
    """A plain numeric numpy dtype from a pickled ``numpy.dtype`` record (object dtypes are refused)."""
    import numpy as np

    code = obj.args[0] if getattr(obj, "GLOBAL", None) == "numpy.dtype" and obj.args else None
    if not isinstance(code, str) or not re.fullmatch(r"[fiu][1248]|b1", code):
        raise ValueError(f"dtype {code!r} is not a plain numeric type")
    order = obj.state[1] if isinstance(obj.state, tuple) and len(obj.state) > 1 else "="
    return np.dtype(code).newbyteorder(order) if order in ("<", ">") else np.dtype(code)
