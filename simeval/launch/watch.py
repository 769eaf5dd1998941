"""``--watch DIR``: the checkpoints training writes there, each once, in step order.

:class:`Watcher` is a generator of work: it yields each new checkpoint
(loaded only when its turn comes) or an :class:`Unreadable` for a file that
cannot be read, and never looks at what the consumer does with them. It is
restart-safe because the consumer passes the names already in
``results.jsonl`` (evaluated or failed) as ``seen``. A backlog costs one
cheap step peek per new file (memory-mapped, cached by name, size and
mtime), not a full load per file per scan. It stops when ``stop`` is set,
or when a ``DONE`` file appears and every checkpoint has been yielded.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from simeval.launch.checkpoint import Checkpoint, CheckpointError, load_checkpoint, peek_step

DONE_FILE = "DONE"


@dataclass
class Unreadable:
    """A checkpoint file that could not be read; it is recorded as failed and not tried again."""

    path: str
    error: str
    step: int | None = None


class Watcher:
    def __init__(self, directory: str, seen: set[str], stop: threading.Event, poll_interval: float = 2.0) -> None:
        self.directory = directory
        self.seen = set(seen)
        self.stop = stop
        self.poll_interval = poll_interval
        self._steps: dict[str, tuple[tuple[int, int], int]] = {}  # name -> ((size, mtime_ns), step)

    def __iter__(self) -> Iterator[Checkpoint | Unreadable]:
        while not self.stop.is_set():
            item = self._next()
            if item is None and os.path.exists(os.path.join(self.directory, DONE_FILE)):
                item = self._next()  # one more look: a checkpoint written just before DONE
                if item is None:
                    print(f"{DONE_FILE} found and every checkpoint evaluated; done.", flush=True)
                    return
            if item is None:
                self.stop.wait(self.poll_interval)
                continue
            yield item

    def _next(self) -> Checkpoint | Unreadable | None:
        """The lowest-step new checkpoint, loaded; an Unreadable; or None when there is none."""
        while True:
            ready = []
            for name, path in self._candidates():
                try:
                    ready.append((self._step_of(name, path), name, path))
                except (FileNotFoundError, CheckpointError) as exc:
                    if not os.path.exists(path):
                        continue  # rotated away between listing and peeking
                    self.seen.add(name)
                    return Unreadable(path, str(exc))
            if not ready:
                return None
            step, name, path = min(ready)
            self.seen.add(name)
            try:
                return load_checkpoint(path)
            except CheckpointError as exc:
                if not os.path.exists(path):
                    print(f"checkpoint {name} disappeared before its evaluation; skipped.", flush=True)
                    continue
                return Unreadable(path, str(exc), step)

    def _candidates(self) -> list[tuple[str, str]]:
        """Checkpoint files not yet seen (temporary files of atomic writes start with '.')."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        return [
            (n, os.path.join(self.directory, n))
            for n in names
            if n.endswith(".pt") and not n.startswith(".") and n not in self.seen
        ]

    def _step_of(self, name: str, path: str) -> int:
        st = os.stat(path)
        stamp = (st.st_size, st.st_mtime_ns)
        cached = self._steps.get(name)
        if cached is None or cached[0] != stamp:
            cached = (stamp, peek_step(path))
            self._steps[name] = cached
        return cached[1]
