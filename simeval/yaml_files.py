"""YAML files read as data, with bounds: suite files, launcher profiles, training runs' ``params/*.yaml``.

PyYAML's safe loaders construct no Python objects, but two things still cost
without bound: a file's size, and aliases (``&a``/``*a``), which a billion-laughs
file nests so that a few hundred bytes stand for billions of nodes once anything
walks the result. :func:`read_yaml` reads at most ``max_bytes``, composes the
node graph, counts the nodes it stands for with aliases expanded (a cycle
counts as unbounded) and constructs the data only under ``max_nodes``. Every
refusal is a :class:`YamlError`, one line naming the file.
"""

from __future__ import annotations

import os
from typing import Any, BinaryIO

from simeval.records import open_regular

MAX_BYTES = 16 << 20  # Isaac Lab's params/env.yaml is tens of kilobytes; a suite or profile far less
MAX_NODES = 1_000_000  # nodes a document stands for once its aliases are expanded


class YamlError(ValueError):
    """A YAML file that cannot be read as data within the bounds; the message names the file."""


def read_yaml(
    path: str,
    loader: type | None = None,
    *,
    max_bytes: int = MAX_BYTES,
    max_nodes: int = MAX_NODES,
    source: BinaryIO | None = None,
) -> Any:
    """The document in the YAML file at ``path``, constructed by ``loader`` (default ``yaml.SafeLoader``).

    ``source`` is the file already open (:func:`simeval.checkpoints.bounds.open_data` opens a run's
    ``params/*.yaml``); otherwise ``path`` is opened as data: a regular file only, checked on the open
    descriptor (:func:`simeval.records.open_regular`), so a FIFO never blocks the read.

    Raises:
        FileNotFoundError, PermissionError: as ``open`` does (callers word them).
        YamlError: one line naming ``path``: not a regular file (a FIFO, a directory), over ``max_bytes``,
            not valid YAML (with the line), nested too deeply, or standing for more than ``max_nodes`` nodes
            with its aliases expanded.
    """
    import yaml

    if source is not None:
        raw = source.read(max_bytes + 1)
    else:
        fd = open_regular(path, os.O_RDONLY, "a settings file is a regular file", follow=True, error=YamlError)
        with os.fdopen(fd, "rb") as f:
            raw = f.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise YamlError(f"{path}: over {max_bytes >> 20} MiB: not a settings file (refused unread).")
    chosen = loader or yaml.SafeLoader
    reader = chosen(raw)
    try:
        node = reader.get_single_node()
        if node is None:
            return None
        expanded = _expanded_size(node, max_nodes)
        if expanded > max_nodes:
            raise YamlError(
                f"{path}: its aliases expand to over {max_nodes:,} nodes (a YAML bomb?): not read. "
                "Write the values out instead of nesting aliases."
            )
        return reader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise YamlError(f"{path}: not valid YAML{where}: {problem}.") from None
    except RecursionError:
        raise YamlError(f"{path}: nested too deeply to be a settings file.") from None
    finally:
        reader.dispose()


def _expanded_size(root: Any, limit: int) -> int:
    """How many nodes the graph under ``root`` stands for with aliases expanded; past ``limit`` (or a cycle)
    it stops counting and returns ``limit + 1``."""
    import yaml

    sizes: dict[int, int] = {}
    on_path: set[int] = set()

    def size(node: Any) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in on_path:  # a recursive alias: unbounded once expanded
            return limit + 1
        if isinstance(node, yaml.ScalarNode):
            return 1
        on_path.add(key)
        children = (c for pair in node.value for c in pair) if isinstance(node, yaml.MappingNode) else node.value
        total = 1
        for child in children:
            total += size(child)
            if total > limit:
                break
        on_path.discard(key)
        sizes[key] = min(total, limit + 1)
        return sizes[key]

    return size(root)
