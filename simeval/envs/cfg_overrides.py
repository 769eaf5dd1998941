"""Config overrides by dotted path (``{"events.push_robot.params.velocity_range.x": [-1, 1]}``).

Isaac Lab and mjlab both describe a task by nested config objects (configclasses
or dataclasses, dicts of terms, tuples of ranges); a suite condition's ``cfg`` and
``make_env``'s ``cfg_overrides`` set values in them before the env is built.

An override is data, never code: a suite file is untrusted, and Isaac Lab imports
and calls a manager term's ``func`` given as a ``"module:function"`` string (and
evaluates ``"lambda ..."`` ones). So the value must be plain data
(:func:`simeval.conditions.cfg_value_problem`), and the field it lands in must
hold data: not a callable, a class or a config object, nor be annotated as one.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Mapping
from typing import Any

from simeval.conditions import CFG_DATA, callable_name, cfg_value_problem

# An annotation naming a callable or a class: Callable[...], type[...], Type[...].
_CALLABLE_ANNOTATION = re.compile(r"\b(Callable|type|Type)\b")


def apply_cfg_overrides(cfg: Any, overrides: Mapping[str, Any]) -> None:
    """Set each ``"a.b.c": value`` of ``overrides`` in the env config ``cfg``, in place; data only.

    A path's parts walk attributes of config objects (configclasses), keys of
    dicts, and indices of lists and tuples where a part is an integer (a tuple
    is rebuilt). A list given where the config holds a tuple (or a field typed
    as one) becomes a tuple, element-wise where the lengths match, since YAML has
    no tuples. The values are set after the config's ``__post_init__`` ran, so
    fields it derived from others keep their values.

    Every override is checked before any is set. A value must be plain data
    (:func:`simeval.conditions.cfg_value_problem`), and it may not replace or walk
    through a callable, a class, a field annotated as one, or a config object
    (``None`` may replace a config object: it turns a term off). A string lands
    only where the config holds a plain string (or ``None`` in a field typed
    ``str``).

    Args:
        cfg: a task's env config: Isaac Lab's (``parse_env_cfg``) or mjlab's (``load_env_cfg``).
        overrides: dotted path -> value, e.g.
            ``{"events.add_pole_mass.params.mass_distribution_params": [0.5, 2.0]}``.

    Raises:
        ValueError: one line naming the path and either its part that is missing
            (with the names available at that level) or why the value may not land there.
    """
    for path, value in overrides.items():
        problem = cfg_value_problem(path, value)
        if problem:
            raise ValueError(f"cfg override {path!r}: {problem}.")
        _assign(cfg, path.split("."), value, path, (), dry=True)
    for path, value in overrides.items():
        _assign(cfg, path.split("."), value, path, ())


def _assign(obj: Any, parts: list[str], value: Any, path: str, trail: tuple[str, ...], dry: bool = False) -> Any:
    """``obj`` with ``parts`` set to ``value`` below it: ``obj`` itself, changed, or a new tuple.

    With ``dry``, the path and the value are checked and nothing is set.
    """
    part, rest = parts[0], parts[1:]
    where = ".".join(trail) or "the env cfg"
    _check_container(obj, path, where)
    key, current = _lookup(obj, part, path, where)
    if rest:
        new = _assign(current, rest, value, path, (*trail, part), dry)
    else:
        annotation = _field_type(obj, part)
        _check_target(current, annotation, value, path)
        new = _as_tuple_where_needed(value, current, annotation)
    if dry:
        return obj
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


def _lookup(obj: Any, part: str, path: str, where: str) -> tuple[Any, Any]:
    """(key, current value) of ``part`` in ``obj``; a one-line ValueError naming what there is if it is missing."""
    if isinstance(obj, Mapping):
        if part not in obj:
            raise _missing(path, part, where, [str(k) for k in obj])
        return part, obj[part]
    if isinstance(obj, (list, tuple)):
        if not part.lstrip("-").isdigit() or not -len(obj) <= int(part) < len(obj):
            raise _missing(path, part, where, [f"0..{len(obj) - 1}"] if obj else [])
        key = int(part) % len(obj)
        return key, obj[key]
    if obj is None or not hasattr(obj, "__dict__"):  # a leaf: nothing below it
        raise ValueError(f"cfg override {path!r}: {where} is {obj!r}, which has no {part!r}.")
    names = [n for n in vars(obj) if not n.startswith("_")]
    if part not in names:
        raise _missing(path, part, where, names)
    return part, getattr(obj, part)


def _check_container(obj: Any, path: str, where: str) -> None:
    """A ValueError unless ``obj`` is config data to walk into: not a callable, a class or a module."""
    if _is_code(obj):
        raise ValueError(f"cfg override {path!r}: {where} is {_kind(obj)}, not config data; {CFG_DATA}.")


def _check_target(current: Any, annotation: str, value: Any, path: str) -> None:
    """A ValueError unless ``value`` may replace ``current`` (a field annotated ``annotation``): data for data."""
    if _is_code(current) or _CALLABLE_ANNOTATION.search(annotation):
        what = _kind(current) if _is_code(current) else f"a field typed {annotation}"
        raise ValueError(f"cfg override {path!r}: the field holds {what}; {CFG_DATA}.")
    if value is None:
        return
    if not _plain(current):
        raise ValueError(
            f"cfg override {path!r}: the field holds {_kind(current)}, which an override does not replace "
            f"(set its fields one by one); {CFG_DATA}."
        )
    if isinstance(value, Mapping) and not isinstance(current, Mapping):
        if current is not None or not re.search(r"\b(dict|Mapping)\b", annotation):
            raise ValueError(f"cfg override {path!r}: the field holds {current!r}, not a mapping; {CFG_DATA}.")
    if not _strings_fit(value, current, annotation):
        raise ValueError(f"cfg override {path!r}: a string lands where the config holds {current!r}; {CFG_DATA}.")


def _strings_fit(value: Any, current: Any, annotation: str = "") -> bool:
    """Whether every string in ``value`` replaces a string of ``current`` (item by item where they line up).

    A list or mapping that does not line up with ``current`` may hold strings
    where every item of ``current`` is one (or ``current`` is empty); ``None`` takes a
    string where the field is typed ``str``.
    """
    if isinstance(value, str):
        return isinstance(current, str) or (current is None and bool(re.search(r"\bstr\b", annotation)))
    if isinstance(value, (list, tuple)) and isinstance(current, (list, tuple)) and len(value) == len(current):
        return all(_strings_fit(v, c) for v, c in zip(value, current, strict=True))
    if isinstance(value, Mapping) and isinstance(current, Mapping):
        items = list(current.values())
        return all(_strings_fit(v, current[k] if k in current else _like(items)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        items = list(current) if isinstance(current, (list, tuple)) else []
        return all(_strings_fit(v, _like(items)) for v in value)
    return True


def _like(items: list[Any]) -> Any:
    """What a new item among ``items`` may be: a string if they are all strings (or there are none), else None."""
    return "" if all(isinstance(i, str) for i in items) else None


def _is_code(obj: Any) -> bool:
    """Whether ``obj`` is a class, a module, or something callable (a function, Isaac Lab's ResolvableString)."""
    return isinstance(obj, type) or inspect.ismodule(obj) or callable(obj)


def _plain(obj: Any) -> bool:
    """Whether ``obj`` is plain data: None, numbers, booleans, strings, and lists, tuples and dicts of these."""
    if obj is None or isinstance(obj, (bool, int, float)):
        return True
    if isinstance(obj, str):
        return not callable(obj)
    if isinstance(obj, (list, tuple)):
        return all(_plain(v) for v in obj)
    if isinstance(obj, dict):
        return all(isinstance(k, str) and not callable_name(k) and _plain(v) for k, v in obj.items())
    return False


def _kind(obj: Any) -> str:
    """What ``obj`` is, in a few words, for an error line."""
    if isinstance(obj, type):
        return f"the class {obj.__module__}.{obj.__qualname__}"
    if inspect.ismodule(obj):
        return f"the module {obj.__name__}"
    if callable(obj):
        return f"a callable ({type(obj).__name__} {getattr(obj, '__qualname__', obj)!s})"
    if dataclasses.is_dataclass(obj):
        return f"a config object ({type(obj).__name__})"
    if isinstance(obj, (list, tuple, dict)):
        return f"a {type(obj).__name__} that holds more than plain data"
    return f"a {type(obj).__name__}"


def _missing(path: str, part: str, where: str, names: list[str]) -> ValueError:
    return ValueError(f"cfg override {path!r}: {part!r} is not in {where} (have: {', '.join(names) or 'nothing'}).")


def _field_type(obj: Any, name: str) -> str:
    """The annotation of dataclass field ``name`` of ``obj``, as text ('' if none)."""
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        return ""
    for f in dataclasses.fields(obj):
        if f.name == name:
            if isinstance(f.type, str):
                return f.type
            return f.type.__name__ if isinstance(f.type, type) else str(f.type)
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
