"""Weights in POSIX shared memory: written in place by the trainer, read by the child.

The parent allocates one block per model id the first time it sees a
layout, then every trigger copies the training tensors straight into it (no
allocation of the model's size per trigger). The child maps the same block by
name and builds tensor views over it from the layout, which travels as plain
data, so nothing torch-specific is ever pickled between the processes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from multiprocessing import shared_memory
from typing import TYPE_CHECKING, Any

from simeval.backends.bootstrap import start_resource_tracker

if TYPE_CHECKING:
    from tensordict import TensorDict, TensorDictBase

_ALIGN = 64


def _dtype(name: str):
    import torch

    return getattr(torch, name.replace("torch.", ""))


def plan(td: TensorDictBase) -> tuple[list[tuple], int]:
    """Byte layout of every leaf: [(key, dtype, shape, offset, nbytes)], total size."""
    entries, offset = [], 0
    for key, value in sorted(td.items(True, True), key=lambda kv: str(kv[0])):
        nbytes = value.numel() * value.element_size()
        entries.append((key, str(value.dtype), tuple(value.shape), offset, nbytes))
        offset += -(-max(nbytes, 1) // _ALIGN) * _ALIGN
    return entries, max(offset, _ALIGN)


def views(buf: memoryview, entries: list[tuple]) -> TensorDict:
    """A TensorDict of tensors living in ``buf`` (a writable buffer)."""
    import torch
    from tensordict import TensorDict

    base = torch.frombuffer(buf, dtype=torch.uint8)
    out = TensorDict()
    for key, dtype, shape, offset, nbytes in entries:
        out.set(key, base[offset : offset + nbytes].view(_dtype(dtype)).view(shape))
    return out


class SharedStaging:
    """Parent side: one shared block per model id, rewritten in place per trigger."""

    def __init__(self) -> None:
        self._blocks: dict[str, tuple[shared_memory.SharedMemory, list, Any]] = {}

    def write(self, sources: Mapping[str, Any]) -> dict[str, dict]:
        """Copy each model's weights into its block; ``{model_id: {"name", "entries"}}`` for the child."""
        from simeval.weights import as_weights

        described = {}
        for model_id, source in sources.items():
            td = as_weights(source)
            entries, size = plan(td)
            block = self._blocks.get(model_id)
            if block is None or block[1] != entries:
                block = None
                if model_id in self._blocks:
                    self._release(model_id)
                start_resource_tracker()  # never multiprocessing's, which imports from the working directory
                shm = shared_memory.SharedMemory(create=True, size=size)
                block = (shm, entries, views(shm.buf, entries))
                self._blocks[model_id] = block
            block[2].update_(td)
            described[model_id] = {"name": block[0].name, "entries": entries}
        return described

    def _release(self, model_id: str) -> None:
        # The tensor views export the mapping's buffer: drop the last reference to them
        # first, or SharedMemory.close() raises BufferError and the mapping stays.
        shm = self._blocks.pop(model_id)[0]
        with contextlib.suppress(FileNotFoundError):
            shm.unlink()
        shm.close()

    def close(self) -> None:
        """Unlink and unmap every block."""
        for model_id in list(self._blocks):
            self._release(model_id)


class SharedReader:
    """Child side: maps blocks by name (once) and returns their tensor views."""

    def __init__(self) -> None:
        self._maps: dict[str, tuple[shared_memory.SharedMemory, Any]] = {}

    @staticmethod
    def _attach(name: str) -> shared_memory.SharedMemory:
        try:
            return shared_memory.SharedMemory(name=name, track=False)  # Python >= 3.13
        except TypeError:
            start_resource_tracker()  # attaching registers the block with this process's tracker
            shm = shared_memory.SharedMemory(name=name)
            # The parent owns the block: the child's tracker must not unlink it at exit.
            from multiprocessing import resource_tracker

            resource_tracker.unregister("/" + shm.name, "shared_memory")
            return shm

    def read(self, described: Mapping[str, dict] | None) -> dict[str, TensorDict] | None:
        """``{model_id: TensorDict}`` views of the blocks :meth:`SharedStaging.write` described, or None."""
        if not described:
            return None
        out = {}
        for model_id, desc in described.items():
            name = desc["name"]
            if name not in self._maps:
                shm = self._attach(name)
                self._maps[name] = (shm, views(shm.buf, [tuple(e) for e in desc["entries"]]))
            out[model_id] = self._maps[name][1]
        return out

    def close(self) -> None:
        """Unmap every block (the parent owns and unlinks them)."""
        while self._maps:
            shm = self._maps.popitem()[1][0]
            shm.close()
