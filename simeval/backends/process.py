"""Process backend: a child Python process with its own CUDA context.

The child is started with ``subprocess`` (see ``_child.py`` for why not
multiprocessing's spawn) and talks over a socketpair. Weights go through
shared memory written in place (``shm.py``); torchrl's weight-sync schemes
are not used here because they need multiprocessing-spawned children, whose
start-up re-imports ``__main__`` before ``init_fn`` can run.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from concurrent.futures import Future
from multiprocessing.connection import Connection
from typing import Any

from simeval.backends.base import Backend
from simeval.backends.shm import SharedStaging
from simeval.errors import EvalError


class _Child:
    """One worker process, its socket, and the request it is running."""

    def __init__(self, setup: dict, env: Mapping[str, str], start_timeout: float) -> None:
        parent_sock, child_sock = socket.socketpair()
        fd = child_sock.fileno()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "simeval.backends._child", str(fd)], pass_fds=(fd,), env=dict(env)
        )
        child_sock.close()
        self.conn = Connection(parent_sock.detach())
        self.conn.send(("init", setup))
        self.lock = threading.Lock()
        self.future: Future | None = None
        self.fatal: EvalError | None = None
        self.closing = False
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
        self.fatal = EvalError(
            f"process eval worker did not start within {start_timeout:g} s (init_fn or the env/policy "
            "factory is stuck); raise start_timeout if start-up is legitimately slow."
        )
        self.proc.kill()

    @property
    def usable(self) -> bool:
        return self.proc.poll() is None and self.fatal is None

    def _read(self) -> None:
        while True:
            try:
                msg = self.conn.recv()
            except (EOFError, OSError):
                break
            if msg[0] == "ready":
                self.ready.set()
            elif msg[0] == "fatal":
                self.fatal = EvalError(f"process eval worker failed to start: {msg[1]}", msg[2])
                self.finish(exc=self.fatal)
            elif msg[0] == "error":
                self.finish(exc=EvalError(f"process eval worker failed: {msg[1]}", msg[2]))
            elif msg[0] == "result":
                self.finish(result=msg[1])
        code = self.proc.wait()
        with contextlib.suppress(Exception):
            self.conn.close()
        if self.closing:
            self.finish(exc=EvalError("evaluation cancelled by shutdown()"))
        else:
            self.finish(exc=self.fatal or EvalError(f"process eval worker died (exit code {code})."))

    def finish(self, result: Any = None, exc: EvalError | None = None) -> None:
        with self.lock:
            future, self.future = self.future, None
        if future is None:
            return
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result)

    def send(self, msg: tuple, future: Future) -> None:
        with self.lock:
            self.future = future
        try:
            self.conn.send(msg)
        except OSError:
            pass  # the reader sees the dead child and fails the future

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
        self.reader.join(timeout=2.0)


class ProcessBackend(Backend):
    """One child process at a time; a dead or failed child is replaced at the next request."""

    name = "process"

    def __init__(
        self,
        init_fn: str | bytes | None,
        payload: bytes,
        env: Mapping[str, str] | None = None,
        start_timeout: float = 120.0,
    ) -> None:
        self._setup = {
            "sys_path": list(sys.path),
            "cwd": os.getcwd(),
            "init_fn": init_fn,
            "payload": payload,
        }
        self._env = dict(os.environ if env is None else env)
        self._start_timeout = start_timeout
        self._staging = SharedStaging()
        self._child = self._spawn()  # starts now, overlapping with training set-up

    def _spawn(self) -> _Child:
        return _Child(self._setup, self._env, self._start_timeout)

    def start(self, step: int, weights: Mapping[str, Any] | None, future: Future) -> None:
        child = self._child
        if child.fatal is not None:  # report the start-up failure, then try afresh next time
            child.stop(timeout=1.0)
            self._child = self._spawn()
            future.set_exception(child.fatal)
            return
        if not child.usable:
            child.stop(timeout=1.0)
            child = self._child = self._spawn()
        described = self._staging.write(weights) if weights else None
        child.send(("eval", step, described), future)

    def shutdown(self, timeout: float) -> None:
        self._child.stop(timeout)
        self._staging.close()
