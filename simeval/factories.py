"""The policy factories a checkpoint may name: a registry, so that reading a file never imports what it names.

A checkpoint records how its policy is built as a ``"module:function"``
reference (``policy_factory``) and keyword arguments (``policy_kwargs``). Both are
data: a file may have been written by anyone. A reference read from a file
resolves only when it is registered:

- simeval's own factories (:mod:`simeval.policies`) and each checkpoint format's
  (``FACTORY`` of every module in :mod:`simeval.checkpoints.formats`), under
  their current names and the old module names that still resolve
  (:data:`simeval.refs.MOVED_MODULES`);
- third-party factories that an installed package registers in the entry-point
  group :data:`ENTRY_POINT_GROUP` (``[project.entry-points."simeval.policy_factories"]``
  ``my_actor = "mypkg.nets:actor"``), the way submitit finds its executors.

Anything else is refused before anything is imported. Code named on the command
line (``--policy``), in a profile or in the user's Python is trusted and
resolves as it is (``trusted=True``). ``policy_kwargs`` are checked against the
factory's declared parameters and their types, and must be plain data.
"""

from __future__ import annotations

import inspect
import os
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from simeval.checkpoints import formats
from simeval.checkpoints.bounds import stored_bytes
from simeval.refs import canonical_ref, resolve_callable

if TYPE_CHECKING:
    from torchrl.envs import EnvBase

ENTRY_POINT_GROUP = "simeval.policy_factories"
# simeval's own factories; each checkpoint format's FACTORY is added from the format registry.
BUILTIN = ("simeval.policies:gaussian_actor", "simeval.policies:mlp_policy", "simeval.policies:cnn_policy")
_PLAIN_SCALARS = (bool, int, float, str, type(None))
_MAX_DEPTH = 8


class UnregisteredFactory(ValueError):
    """A reference read from data names a factory that is not registered; nothing was imported."""


def registered() -> dict[str, str]:
    """Every registered factory reference (``"module:function"``) -> who registered it (for messages and docs)."""
    out = {ref: "simeval" for ref in BUILTIN}
    for name, reader in formats.READERS.items():
        factory = getattr(reader, "FACTORY", None)
        if factory:
            out[factory] = f"the {name} checkpoint format"
    for entry in _entry_points():
        out.setdefault(_plain_ref(entry.value), f"entry point {entry.name!r} of {_distribution(entry)}")
    return out


def is_registered(ref: str) -> bool:
    """Whether ``ref`` (old module names included) names a registered factory."""
    return isinstance(ref, str) and canonical_ref(ref) in registered()


def refusal(path: str, ref: str) -> str:
    """The one line for a checkpoint at ``path`` naming the unregistered factory ``ref``."""
    return (
        f"{path}: names the policy factory {ref!r:.120}, which is not registered; nothing was imported. "
        "Name code you trust with --policy module:function, or register the factory (docs/security.md)."
    )


def resolve_factory(ref: str | Callable, *, trusted: bool = False) -> Callable:
    """The factory ``ref`` names: any importable one when ``trusted``, else only a registered one.

    Raises:
        UnregisteredFactory: ``ref`` came from data (``trusted=False``) and is not registered; nothing was imported.
        ValueError: one line, where a trusted reference cannot be imported or names no callable.
    """
    if callable(ref):
        if not trusted:
            raise UnregisteredFactory("a policy factory read from data is a 'module:function' reference.")
        return ref
    if not trusted and not is_registered(ref):
        raise UnregisteredFactory(
            f"policy factory {ref!r:.120} is not registered: simeval builds only its own and its formats' "
            f"policies, and those installed packages register in the entry-point group {ENTRY_POINT_GROUP!r}; "
            "to use code you trust, name it with --policy module:function."
        )
    return resolve_callable(canonical_ref(ref) if isinstance(ref, str) else ref, "policy factory")


def build_policy(
    factory: str | Callable[..., Any],
    kwargs: dict,
    env: EnvBase,
    *,
    trusted: bool = False,
    max_bytes: int | None = None,
) -> Any:
    """The policy ``factory`` builds for ``env`` with keyword arguments ``kwargs``.

    Args:
        factory: a ``"module:function"`` reference (old module names included), or a callable when ``trusted``.
        kwargs: the factory's keyword arguments: plain data, checked against its declared parameters and types.
        env: the env the policy acts in (its specs give the policy's input and output sizes).
        trusted: whether ``factory`` comes from trusted input (the command line, a profile, the user's Python):
            then any importable factory resolves. Otherwise (a reference read from a checkpoint) only registered
            ones do (:mod:`simeval.factories`) and nothing else is imported.
        max_bytes: where ``kwargs`` were read from a file: the most parameter and buffer bytes the policy may
            create: each tensor is counted before it is allocated, and the build is refused at the first one
            past this bound, so ``policy_kwargs`` cannot make a worker allocate without bound (see
            :func:`weights_bound`).

    Raises:
        ValueError: one line, where ``factory`` is not registered (or cannot be imported), ``kwargs`` are not
            plain data, name arguments the factory does not take, lack ones it needs, hold values of another
            type than it declares or that it cannot build from, or would build a policy over ``max_bytes``.
    """
    make = resolve_factory(factory, trusted=trusted)
    name = factory if isinstance(factory, str) else getattr(factory, "__qualname__", repr(factory))
    check_kwargs(make, kwargs, name)
    if max_bytes is not None:
        return _budgeted(make, kwargs, env, name, max_bytes)
    return _call(make, kwargs, env, name)


def _call(make: Callable[..., Any], kwargs: dict, env: EnvBase, name: str) -> Any:
    """``make(env, **kwargs)``, its failures as one line naming the factory."""
    try:
        return make(env, **kwargs)
    except KeyError as exc:
        if exc.args != ("observation",):
            raise
        raise ValueError(
            f"{name} builds a policy of the state vector (observation), but this env observes observation.state "
            "and camera images (--cameras): evaluate a policy that reads them (a checkpoint of "
            "simeval.policies:cnn_policy, --policy module:factory, or --policy-server)."
        ) from None
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ValueError) and _ours(exc):  # a check of simeval's, worded for the user
            raise
        raise ValueError(
            f"{name} cannot build a policy from policy_kwargs {kwargs!r:.120}: a value of the wrong kind "
            "(check the checkpoint's policy_kwargs or --policy-kwargs)."
        ) from exc
    except RuntimeError as exc:  # the factory's own words, or torch's (a negative layer size): kept, on one line
        said = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else "RuntimeError"
        raise ValueError(f"{name} cannot build a policy from policy_kwargs {kwargs!r:.120}: {said}") from exc


def weights_bound(weights: Any) -> int:
    """How many bytes a policy built for ``weights`` (a TensorDict) may hold: twice theirs, plus 16 MiB.

    The policy loads these weights, so a genuine one holds about as many; the
    margin covers buffers a checkpoint does not store (action bounds, scales).
    Their bytes are those of their storages, each counted once: a thousand views
    of one storage (tied weights) hold what the file holds, not a thousand times it.
    """
    return 2 * stored_bytes(weights.values(True, True)) + (16 << 20)


class PolicyTooLarge(ValueError):
    """Building a policy would allocate more than its budget (``build_policy(max_bytes=)``)."""


def _budgeted(make: Callable[..., Any], kwargs: dict, env: EnvBase, name: str, max_bytes: int) -> Any:
    """``make(env, **kwargs)``, each tensor it creates counted before it is allocated: past ``max_bytes`` in all,
    a one-line PolicyTooLarge instead of the allocation."""
    from torch.overrides import TorchFunctionMode
    from torch.utils._device import _device_constructors

    constructors = _device_constructors()

    class Budget(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.total = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            kwargs = kwargs or {}
            if func in constructors:
                shape = func(*args, **{**kwargs, "device": "meta"})  # the size it asks for, nothing allocated
                self.total += shape.numel() * shape.element_size()
                if self.total > max_bytes:
                    raise PolicyTooLarge(
                        f"policy_kwargs {kwargs_text!s:.120} make {name} allocate over {max_bytes / 2**20:.0f} MiB, "
                        "far more than the checkpoint's weights: they do not match the weights (nothing allocated)."
                    )
            return func(*args, **kwargs)

    kwargs_text = repr(kwargs)
    with Budget():
        return _call(make, kwargs, env, name)


def _ours(exc: BaseException) -> bool:
    """Whether ``exc`` was raised in simeval's own code (where its checks word errors for the user)."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and f"{os.sep}simeval{os.sep}" in frames[-1].filename


def check_kwargs(make: Callable, kwargs: Any, ref: str) -> None:
    """``kwargs`` are plain data (numbers, text, bools, None, lists and mappings of them), are parameters
    ``make`` declares, give every parameter it needs, and fit the declared types.

    Raises:
        ValueError: one line naming ``ref`` and the argument that does not fit.
    """
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise ValueError(f"policy_kwargs for {ref} must be a mapping of argument names, got {kwargs!r:.80}.")
    for name, value in kwargs.items():
        if not _plain(value):
            raise ValueError(
                f"policy_kwargs {name}={value!r:.60} for {ref}: only numbers, text, true/false, null and lists or "
                "mappings of them are allowed."
            )
    try:
        signature = inspect.signature(make)
    except (TypeError, ValueError):  # no signature to check (a builtin): plain data is all we can say
        return
    try:
        signature.bind(None, **kwargs)
    except TypeError:
        takes = ", ".join(list(signature.parameters)[1:])
        raise ValueError(
            f"policy_kwargs {sorted(kwargs)} do not fit {ref}, which takes ({takes}): "
            "check the checkpoint's policy_kwargs or --policy-kwargs."
        ) from None
    hints = _hints(make)
    for name, value in kwargs.items():
        hint = hints.get(name)
        if hint is not None and not _fits(value, hint):
            raise ValueError(
                f"policy_kwargs {name}={value!r:.60} for {ref}: {ref} declares {name} as {_describe(hint)}; "
                "check the checkpoint's policy_kwargs or --policy-kwargs."
            )


def _plain(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` is JSON-like plain data, nested at most ``_MAX_DEPTH`` deep."""
    if depth > _MAX_DEPTH:
        return False
    if isinstance(value, _PLAIN_SCALARS):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v, depth + 1) for k, v in value.items())
    return False


class _Names(dict):
    """Annotation namespace: the function's module globals and builtins, and ``Any`` for a name only a type
    checker sees (``TYPE_CHECKING`` imports such as ``EnvBase``)."""

    def __init__(self, globalns: dict[str, Any]) -> None:
        super().__init__()
        self.globalns = globalns

    def __missing__(self, name: str) -> Any:
        import builtins

        if name in self.globalns:
            return self.globalns[name]
        return getattr(builtins, name, Any)


def _hints(make: Callable) -> dict[str, Any]:
    """``make``'s parameter annotations as types (unresolvable ones as ``Any``); {} if there are none to read."""
    target = inspect.unwrap(make)
    globalns = getattr(target, "__globals__", {})
    try:
        return typing.get_type_hints(target, globalns=globalns, localns=_Names(globalns))
    except Exception:  # noqa: BLE001 - annotations a type checker reads but Python cannot: nothing to check against
        return {}


def _fits(value: Any, hint: Any) -> bool:
    """Whether plain-data ``value`` is of the annotated type ``hint`` (unknown kinds of hint accept it)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or hint is object:
        return True
    if hint is None or hint is type(None):
        return value is None
    if origin is typing.Union or origin is types.UnionType:
        return any(_fits(value, arg) for arg in args)
    if origin is typing.Literal:
        return value in args
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if hint in (list, tuple, Sequence) or origin in (list, tuple, Sequence):
        if not isinstance(value, (list, tuple)):
            return False
        if origin is tuple and args and args[-1] is not Ellipsis:
            return len(args) == len(value) and all(_fits(v, a) for v, a in zip(value, args, strict=True))
        return not args or all(_fits(v, args[0]) for v in value)
    if hint in (dict, Mapping) or origin in (dict, Mapping):
        return isinstance(value, dict) and (len(args) != 2 or all(_fits(v, args[1]) for v in value.values()))
    return True


def _describe(hint: Any) -> str:
    """A type hint as a reader writes it."""
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "").replace("collections.abc.", "")


def _entry_points() -> list[Any]:
    """The installed packages' entries in :data:`ENTRY_POINT_GROUP` (read from their metadata; none imported)."""
    from importlib.metadata import entry_points

    return list(entry_points(group=ENTRY_POINT_GROUP))


def _plain_ref(value: str) -> str:
    """An entry point's ``module:attr`` without extras (``[...]``) or spaces, under its current module name."""
    return canonical_ref(value.split("[", 1)[0].strip().replace(" ", ""))


def _distribution(entry: Any) -> str:
    dist = getattr(entry, "dist", None)
    return f"package {dist.name}" if dist is not None else "an installed package"
