"""Where the launcher's checkpoints come from: one file (``--checkpoint``) or a directory (``--watch``).

Both are a :class:`CheckpointSource`: ``take()`` hands out the next checkpoint
(or None for "nothing now"), ``done`` says nothing more will come.

``--watch DIR``: the checkpoints training writes there, each once, in step order.
:class:`Watcher` is a generator of work: it yields each new checkpoint
(loaded only when its turn comes) or an :class:`Unreadable` for a file that
cannot be read, and never looks at what the consumer does with them. It is
restart-safe because the consumer passes the names already in
``results.jsonl`` (evaluated or failed) as ``seen``. A backlog costs one
cheap step peek per new file (memory-mapped, cached by name, size and
mtime), not a full load per file per scan. It stops when ``stop`` is set,
or when a ``DONE`` file appears and every checkpoint has been yielded.

Which files count is each format's ``WATCH`` patterns (simeval's ``*.pt``,
rsl_rl's ``model_*.pt``, skrl's ``checkpoints/agent_*.pt``, ...); a file's name
is its path relative to the directory. Training libraries other than simeval
write checkpoints in place, not atomically: a file that cannot be read yet and
changed in the last ``SETTLE_SECONDS`` is tried again on a later scan instead of
being recorded as failed. When the run ends (``--until-step``, a signal) with such a
file not read, :meth:`Watcher.left` hands it back judged then: a checkpoint below
``--until-step`` to evaluate, an :class:`Unreadable`, or an :class:`Unsettled` (still
changing), so that no file the run saw is left out of its summary and results.
An ``.onnx`` file beside rsl_rl's ``model_*.pt`` is the run's export of its latest
save, rewritten on each save with no step of its own (mjlab writes
``<run>/<run>.onnx``): the watch evaluates the ``model_*.pt`` files and leaves the
export to ``--checkpoint``.
"""

from __future__ import annotations

import glob
import os
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from simeval.checkpoints import Checkpoint, CheckpointError, formats, load_checkpoint, peek_step
from simeval.checkpoints.bounds import DEFAULT_MAX_BYTES
from simeval.launch.config import ConfigError

DONE_FILE = "DONE"
SETTLE_SECONDS = 10.0
UNSETTLED = "unsettled: still being written when the run ended"


@dataclass
class Unreadable:
    """A checkpoint file that could not be read; it is recorded as failed and not tried again."""

    path: str
    error: str
    step: int | None = None


@dataclass
class Unsettled:
    """A checkpoint file still being written when the run ended; recorded so that the next run reads it."""

    path: str
    step: int | None = None


class CheckpointSource(Protocol):
    """What :class:`~simeval.launch.pipeline.Pipeline` takes checkpoints from: a source of weights."""

    done: bool
    """True once no checkpoint will come any more."""

    def take(self) -> Checkpoint | Unreadable | None:
        """The next checkpoint (or an Unreadable file to record as failed), or None if there is none now."""

    def left(self, until: int | None, judge: bool = True) -> list[Checkpoint | Unreadable | Unsettled]:
        """At the end of the run: the files seen but never handed out, below ``until`` (see :meth:`Watcher.left`)."""


class One:
    """A source of one checkpoint (``--checkpoint``)."""

    def __init__(self, ck: Checkpoint) -> None:
        self.items, self.done = [ck], False

    def take(self) -> Checkpoint | None:
        """The checkpoint, the first time; then None, and ``done``."""
        if not self.items:
            self.done = True
            return None
        return self.items.pop()

    def left(self, until: int | None, judge: bool = True) -> list[Checkpoint | Unreadable | Unsettled]:
        """Nothing: the one checkpoint is handed out at once."""
        return []


def checkpoint_name(path: str, watch_dir: str | None) -> str:
    """How results.jsonl names a checkpoint: its path inside the watched directory, else its file name."""
    return os.path.relpath(path, watch_dir) if watch_dir else os.path.basename(path)


def check_watch_dir(directory: str) -> None:
    """``--watch DIR`` must be an existing directory: a typo fails at once, in one line, never waits."""
    if os.path.isdir(directory):
        return
    if os.path.exists(directory):
        raise ConfigError(f"--watch {directory}: not a directory (use --checkpoint for one file).")
    raise ConfigError(
        f"--watch {directory}: no such directory. Check the path; if training has not created it yet, "
        "create it (mkdir -p) or start the evaluation after training has."
    )


class Watcher:
    """The checkpoints of one run directory, each once, lowest step first (see the module docstring)."""

    def __init__(
        self,
        directory: str,
        seen: set[str],
        stop: threading.Event,
        poll_interval: float = 2.0,
        format: str | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.directory = directory
        self.format = format
        self.max_bytes = max_bytes
        self.seen = set(seen)
        self.stop = stop
        self.poll_interval = poll_interval
        self._steps: dict[str, tuple[tuple[int, int], int]] = {}  # name -> ((size, mtime_ns), step)
        self._settling: dict[str, tuple[str, int | None]] = {}  # skipped while written: name -> (path, step)
        self.done = False

    def __iter__(self) -> Iterator[Checkpoint | Unreadable]:
        while not self.stop.is_set():
            item = self.take()
            if self.done:
                return
            if item is None:
                self.stop.wait(self.poll_interval)
                continue
            yield item

    def take(self) -> Checkpoint | Unreadable | None:
        """The next checkpoint if one is there now, else None (and ``done`` once DONE is there and none is left)."""
        item = self._next()
        if item is None and os.path.exists(os.path.join(self.directory, DONE_FILE)):
            # One more look: a checkpoint written just before DONE; training is over, so nothing settles.
            item = self._next(final=True)
            if item is None:
                self.done = True
                print(f"{DONE_FILE} found and every checkpoint taken; done.", flush=True)
        return item

    def _next(self, final: bool = False) -> Checkpoint | Unreadable | None:
        """The lowest-step new checkpoint, loaded; an Unreadable; or None when there is none."""
        while True:
            ready = []
            for name, path in self._candidates():
                try:
                    ready.append((self._step_of(name, path), name, path))
                except (FileNotFoundError, CheckpointError) as exc:
                    if not os.path.exists(path):
                        continue  # rotated away between listing and peeking
                    if not final and _settling(path):
                        self._settling[name] = (path, None)
                        continue
                    self._mark(name)
                    return Unreadable(path, str(exc))
            if not ready:
                return None
            step, name, path = min(ready)
            try:
                ck = load_checkpoint(path, self.format, max_bytes=self.max_bytes, within=self.directory)
            except CheckpointError as exc:
                if not os.path.exists(path):
                    self._mark(name)
                    print(f"checkpoint {name} disappeared before its evaluation; skipped.", flush=True)
                    continue
                if not final and _settling(path):
                    self._settling[name] = (path, step)
                    return None  # a later scan reads it whole
                self._mark(name)
                return Unreadable(path, str(exc), step)
            self._mark(name)
            return ck

    def _mark(self, name: str) -> None:
        """``name`` is handed out (or gone): never again."""
        self.seen.add(name)
        self._settling.pop(name, None)

    def left(self, until: int | None, judge: bool = True) -> list[Checkpoint | Unreadable | Unsettled]:
        """The files skipped while being written and never handed out, each once, as the run ends.

        ``judge``: each is read now: a checkpoint below ``until`` (None: any) to evaluate, an Unreadable, or an
        Unsettled when it is still changing; one whose step is at or past ``until`` is left out. Else (a stop
        by signal) each is an Unsettled.
        """
        out: list[Checkpoint | Unreadable | Unsettled] = []
        for name, (path, step) in sorted(self._settling.items()):
            self._mark(name)
            if not os.path.exists(path) or (step is not None and until is not None and step >= until):
                continue
            item = self._judge(name, path, until) if judge and not _settling(path) else Unsettled(path, step)
            if item is not None:
                out.append(item)
        return out

    def _judge(self, name: str, path: str, until: int | None) -> Checkpoint | Unreadable | None:
        """The file at ``path``, no longer changing: loaded, an Unreadable, or None (past ``until``, or gone)."""
        step = None
        try:
            step = self._step_of(name, path)
            if until is not None and step >= until:
                return None
            return load_checkpoint(path, self.format, max_bytes=self.max_bytes, within=self.directory)
        except FileNotFoundError:
            return None
        except CheckpointError as exc:
            return Unreadable(path, str(exc), step) if os.path.exists(path) else None

    def _candidates(self) -> list[tuple[str, str]]:
        """Checkpoint files not yet seen, as (name relative to the directory, path).

        Temporary files of atomic writes start with '.'. Anything but a directory counts: what a name
        is (a FIFO, a link out of the directory) is judged when it is opened, on the descriptor.
        """
        patterns = formats.module(self.format).WATCH if self.format else formats.watch_patterns()
        found = {}
        root = glob.escape(self.directory)
        for pattern in patterns:
            for path in glob.glob(os.path.join(root, pattern)):
                name = os.path.relpath(path, self.directory)
                if not os.path.basename(name).startswith(".") and name not in self.seen and not os.path.isdir(path):
                    found[name] = path
        if self.format is None:
            for name in [n for n in found if n.endswith(".onnx") and _beside_rsl_rl_saves(found[n])]:
                del found[name]
        return sorted(found.items())

    def _step_of(self, name: str, path: str) -> int:
        st = os.stat(path)
        stamp = (st.st_size, st.st_mtime_ns)
        cached = self._steps.get(name)
        if cached is None or cached[0] != stamp:
            cached = (stamp, peek_step(path, self.format, max_bytes=self.max_bytes, within=self.directory))
            self._steps[name] = cached
        return cached[1]


def _beside_rsl_rl_saves(path: str) -> bool:
    """Whether the file ``path`` shares its directory with rsl_rl's ``model_<iteration>.pt`` saves."""
    return bool(glob.glob(os.path.join(glob.escape(os.path.dirname(path)), "model_*.pt")))


def _settling(path: str) -> bool:
    """A regular file changed within SETTLE_SECONDS: a library may still be writing it (a FIFO, a link or a
    device is judged at once)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    return stat.S_ISREG(st.st_mode) and time.time() - st.st_mtime < SETTLE_SECONDS
