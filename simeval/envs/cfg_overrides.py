"""Config overrides by dotted path (``{"events.push_robot.params.velocity_range.x": [-1, 1]}``).

Isaac Lab and mjlab both describe a task by nested config objects (configclasses
or dataclasses, dicts of terms, tuples of ranges); a suite condition's ``cfg`` and
``make_env``'s ``cfg_overrides`` set values in them before the env is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def apply_cfg_overrides(cfg: Any, overrides: Mapping[str, Any]) -> None:
    """Set each ``"a.b.c": value`` of ``overrides`` in the env config ``cfg``, in place.

    A path's parts walk attributes of config objects (configclasses), keys of
    dicts, and indices of lists and tuples where a part is an integer (a tuple
    is rebuilt). A list given where the config holds a tuple (or a field typed
    as one) becomes a tuple, element-wise where the lengths match, since YAML has
    no tuples. The values are set after the config's ``__post_init__`` ran, so
    fields it derived from others keep their values.

    Args:
        cfg: a task's env config: Isaac Lab's (``parse_env_cfg``) or mjlab's (``load_env_cfg``).
        overrides: dotted path -> value, e.g.
            ``{"events.add_pole_mass.params.mass_distribution_params": [0.5, 2.0]}``.

    Raises:
        ValueError: one line naming the path, its part that is missing, and the
            names available at that level.
    """
    for path, value in overrides.items():
        _assign(cfg, path.split("."), value, path, ())


def _assign(obj: Any, parts: list[str], value: Any, path: str, trail: tuple[str, ...]) -> Any:
    """``obj`` with ``parts`` set to ``value`` below it: ``obj`` itself, changed, or a new tuple."""
    part, rest = parts[0], parts[1:]
    where = ".".join(trail) or "the env cfg"
    if isinstance(obj, Mapping):
        if part not in obj:
            raise _missing(path, part, where, [str(k) for k in obj])
        key: Any = part
        current = obj[part]
    elif isinstance(obj, (list, tuple)):
        if not part.lstrip("-").isdigit() or not -len(obj) <= int(part) < len(obj):
            raise _missing(path, part, where, [f"0..{len(obj) - 1}"] if obj else [])
        key = int(part) % len(obj)
        current = obj[key]
    else:
        if obj is None or not hasattr(obj, "__dict__"):  # a leaf: nothing below it
            raise ValueError(f"cfg override {path!r}: {where} is {obj!r}, which has no {part!r}.")
        names = [n for n in vars(obj) if not n.startswith("_")]
        if part not in names:
            raise _missing(path, part, where, names)
        key = part
        current = getattr(obj, part)
    if rest:
        new = _assign(current, rest, value, path, (*trail, part))
    else:
        new = _as_tuple_where_needed(value, current, _field_type(obj, part))
    if isinstance(obj, tuple):
        return (*obj[:key], new, *obj[key + 1 :])
    if isinstance(obj, Mapping):
        try:
            obj[key] = new
        except TypeError:
            raise ValueError(f"cfg override {path!r}: {where} is read-only ({type(obj).__name__}).") from None
    elif isinstance(obj, list):
        obj[key] = new
    else:
        setattr(obj, key, new)
    return obj


def _missing(path: str, part: str, where: str, names: list[str]) -> ValueError:
    return ValueError(f"cfg override {path!r}: {part!r} is not in {where} (have: {', '.join(names) or 'nothing'}).")


def _field_type(obj: Any, name: str) -> str:
    """The annotation of dataclass field ``name`` of ``obj``, as text ('' if none)."""
    import dataclasses

    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        return ""
    for f in dataclasses.fields(obj):
        if f.name == name:
            return f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    return ""


def _as_tuple_where_needed(value: Any, current: Any, annotation: str = "") -> Any:
    """``value`` with lists turned into tuples where ``current`` (or the field's annotation) is a tuple."""
    if not isinstance(value, list):
        return value
    if isinstance(current, tuple):
        if len(current) == len(value):
            return tuple(_as_tuple_where_needed(v, c) for v, c in zip(value, current, strict=True))
        return tuple(value)
    if current is None and annotation.replace(" ", "").lower().startswith(("tuple", "typing.tuple")):
        return tuple(value)
    return value
