"""Training libraries' ``params/*.yaml`` files, read without constructing arbitrary Python objects.

Isaac Lab dumps its configs with PyYAML's full dumper, so they carry tags
such as ``!!python/tuple``. Those few plain-data tags become lists; any other
``python/`` tag (``object/apply`` and friends could run code) is kept as its
tag name, never constructed.
"""

from __future__ import annotations

import os

import yaml

from simeval.checkpoints.base import CheckpointError
from simeval.yaml_files import read_yaml


class _ParamsLoader(yaml.SafeLoader):
    pass


def _sequence(loader: yaml.SafeLoader, node: yaml.Node):
    return loader.construct_sequence(node, deep=True)


def _unknown(loader: yaml.SafeLoader, tag_suffix: str, node: yaml.Node) -> str:
    return f"<python/{tag_suffix}>"


_ParamsLoader.add_constructor("tag:yaml.org,2002:python/tuple", _sequence)
_ParamsLoader.add_multi_constructor("tag:yaml.org,2002:python/", _unknown)


def load_params(path: str) -> dict:
    """The YAML mapping in ``path`` (plain data only, bounded: :func:`simeval.yaml_files.read_yaml`); ValueError
    naming the file if it is not one."""
    from simeval.checkpoints.bounds import open_data

    with open_data(path) as f:
        data = read_yaml(path, _ParamsLoader, source=f)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of training parameters.")
    return data


def run_params(checkpoint: str, subdir: str | None = None) -> dict | None:
    """The run's ``params/agent.yaml`` for a checkpoint, or None: Isaac Lab writes it in the run directory.

    The checkpoint sits in the run directory itself or, with ``subdir``, in
    ``<run>/<subdir>/`` (skrl's ``checkpoints``, rl_games' ``nn``). The mapping
    gains ``"__path__"``, the file it came from. A file that cannot be read as data within
    :mod:`simeval.yaml_files`' bounds is a CheckpointError naming the checkpoint and the file.
    """
    here = os.path.dirname(os.path.abspath(checkpoint))
    runs = [os.path.dirname(here)] if subdir and os.path.basename(here) == subdir else []
    for directory in (*runs, here):
        candidate = os.path.join(directory, "params", "agent.yaml")
        if os.path.isfile(candidate):
            try:
                out = load_params(candidate)
            except (ValueError, OSError) as exc:  # a bomb, bad YAML, unreadable: one line naming both files
                raise CheckpointError(f"{checkpoint}: {getattr(exc, 'strerror', None) or exc}") from None
            out["__path__"] = candidate
            return out
    return None
