"""Process backend: a child Python process with its own CUDA context.

The child is started with ``subprocess`` (see ``child.py`` for why not
multiprocessing's spawn), through a bootstrap that sets its ``sys.path`` to the
parent's before it imports anything (``bootstrap.py``: never the working
directory, which may be a run directory of someone else's), and talks over a
socketpair. Weights go through shared memory written in place (``shm.py``); torchrl's weight-sync schemes
are not used here because they need multiprocessing-spawned children, whose
start-up re-imports ``__main__`` before ``init_fn`` can run.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from multiprocessing.connection import Connection
from typing import Any

from simeval.backends.base import Backend, BackendOptions, WorkerRecipe, cancelled, complete
from simeval.backends.bootstrap import child_command
from simeval.backends.host import make_setup
from simeval.backends.shm import SharedStaging
from simeval.errors import EvalError, WorkerLost
from simeval.settings import RoundOverrides


class _Child:
    """One worker process, its socket, and the request it is running.

    The reader thread completes the running request's future. Once the child
    is gone it sets ``ended`` (under the lock), so a request sent afterwards
    fails at once instead of waiting for a reply that cannot come.
    """

    def __init__(self, setup: dict, env: Mapping[str, str], start_timeout: float) -> None:
        parent_sock, child_sock = socket.socketpair()
        fd = child_sock.fileno()
        self.proc = subprocess.Popen(  # noqa: S603 - this interpreter and simeval's own bootstrap, no shell
            child_command(fd, setup["sys_path"]), pass_fds=(fd,), env=dict(env)
        )
        child_sock.close()
        self.conn = Connection(parent_sock.detach())
        self.conn.send(("init", setup))
        self.lock = threading.Lock()
        self.future: Future | None = None
        self.fatal: EvalError | None = None
        self.fatal_reported = False
        self.ended = False
        self.closing = False
        self.progress: tuple[int, int, int] | None = None  # the running round's last ("progress", ...) message
        self.ready = threading.Event()
        self.reader = threading.Thread(target=self._read, name="simeval-process-reader", daemon=True)
        self.reader.start()
        self.watchdog = threading.Timer(start_timeout, self._start_timed_out, args=(start_timeout,))
        self.watchdog.daemon = True
        self.watchdog.start()

    def _start_timed_out(self, start_timeout: float) -> None:
        """A child stuck in init_fn or in building its env must not leave callers waiting."""
        if self.ready.is_set() or self.proc.poll() is not None:
            return
        self.fatal = WorkerLost(
            f"process eval worker did not start within {start_timeout:g} s (init_fn or the env/policy "
            "factory is stuck); raise start_timeout if start-up is legitimately slow."
        )
        self.proc.kill()

    @property
    def usable(self) -> bool:
        return self.proc.poll() is None and self.fatal is None and not self.ended

    def _read(self) -> None:
        while True:
            try:
                msg = self.conn.recv()
            except (EOFError, OSError):
                break
            kind = msg[0]
            if kind == "ready":
                self.ready.set()
            elif kind == "fatal":
                self.fatal = EvalError(f"process eval worker failed to start: {msg[1]}", msg[2])
                self._finish(exc=self.fatal)
            elif kind == "error":
                self._finish(exc=EvalError(f"process eval worker failed: {msg[1]}", msg[2]))
            elif kind == "result":
                self._finish(result=msg[1])
            elif kind == "progress":
                self.progress = msg[1]
        code = self.proc.wait()
        with contextlib.suppress(Exception):
            self.conn.close()
        if self.closing:
            exc = cancelled()
        else:
            exc = self.fatal or WorkerLost(f"process eval worker died (exit code {code}).")
        self._finish(exc=exc, last=True)

    def _finish(self, result: Any = None, exc: EvalError | None = None, last: bool = False) -> None:
        with self.lock:
            future, self.future = self.future, None
            self.progress = None
            if last:
                self.ended = True
            if future is not None and exc is not None and exc is self.fatal:
                self.fatal_reported = True
        if future is not None:
            complete(future, result, exc)

    def send(self, msg: tuple, future: Future) -> None:
        with self.lock:
            ended = self.ended
            if not ended:
                self.future = future
                self.progress = None
        if ended:
            complete(future, exc=self.fatal or WorkerLost("process eval worker died before the request reached it."))
            return
        try:
            self.conn.send(msg)
        except OSError:
            pass  # the reader sees the dead child and fails the future

    def abandon(self) -> None:
        """Kill the child now, its running request detached: whoever gave up on the round completes it."""
        with self.lock:
            self.future = None
            self.closing = True  # the reader completes nothing when it sees the child end
        self.watchdog.cancel()
        with contextlib.suppress(OSError):
            self.proc.kill()  # the reader reaps it

    def stop(self, timeout: float) -> None:
        self.closing = True
        self.watchdog.cancel()
        with contextlib.suppress(Exception):
            self.conn.send(("close",))
        if self.future is not None and self.proc.poll() is None:
            self.proc.terminate()  # a round is running: stop it now
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if threading.current_thread() is not self.reader:  # stop() may run on the reader's own thread
            self.reader.join(timeout=2.0)


class ProcessBackend(Backend):
    """One child process at a time; a dead or failed child is replaced at the next request.

    A child whose round timed out is killed at once and a fresh one started in its place.
    """

    name = "process"

    def __init__(self, setup: dict, env: Mapping[str, str] | None = None, start_timeout: float = 120.0) -> None:
        super().__init__()
        self._setup = setup
        self._env = dict(os.environ if env is None else env)
        self._start_timeout = start_timeout
        self._staging = SharedStaging()
        self._child = self._spawn()  # starts now, overlapping with training set-up

    @classmethod
    def create(cls, recipe: WorkerRecipe, options: BackendOptions) -> ProcessBackend:
        """Start a child process for ``recipe`` (which must hold an env factory and a policy factory)."""
        recipe.require_factories("'process'", "a child process (backend='process', or weight_sync_schemes)")
        return cls(make_setup(recipe), start_timeout=options.start_timeout)

    def _spawn(self) -> _Child:
        return _Child(self._setup, self._env, self._start_timeout)

    def _start(
        self, step: int, weights: Mapping[str, Any] | None, future: Future, overrides: RoundOverrides | None
    ) -> None:
        child = self._child
        if not child.usable:
            child.stop(timeout=1.0)
            self._child = self._spawn()
            if child.fatal is not None and not child.fatal_reported:
                # A start-up failure no request has seen yet: report it (the next request
                # runs on the fresh child). Backend.start completes it once its lock is released.
                complete(future, exc=child.fatal)
                return
            child = self._child
        described = self._staging.write(weights) if weights else None
        child.send(("eval", step, described, overrides), future)

    def progress(self) -> tuple[int, int, int] | None:
        """The running round's counts, as the child last sent them (about twice a second)."""
        return self._child.progress

    def _replace_worker(self, error: EvalError) -> None:
        """Kill the child running a timed-out round and start a fresh one for the next request."""
        self._child.abandon()
        self._child = self._spawn()  # starts now, overlapping with the wait for the next request

    def _shutdown(self, timeout: float) -> None:
        self._child.stop(timeout)
        self._staging.close()
