"""MP4 of the first episode of each evaluation round (``--video``), rendered headless.

A transform on the eval env renders sub-env 0 from the start of a round until
its first episode ends, streaming frames into an MP4 (no frame is kept in
memory); ``dump(step=...)``, which the worker calls after every round, moves
the file to ``<video_dir>/step_<step>.mp4``. Nothing renders unless asked.
Needs ``MUJOCO_GL=egl`` (GPU or Mesa) or ``osmesa``; ``egl`` is the default.
Works on both backends of ``simeval.envs.make_env`` (see :func:`render_first`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from torchrl.envs.transforms import Transform

if TYPE_CHECKING:
    import numpy as np
    from torchrl.envs import EnvBase


def render_first(base_env: EnvBase) -> np.ndarray:
    """Sub-env 0 of a batched env as an (H, W, 3) uint8 frame.

    The native env (``simeval.envs.mujoco``) renders sub-env 0 itself; a
    gymnasium vector env under torchrl's GymWrapper renders through its first
    sub-env (built with ``render_mode="rgb_array"``).
    """
    vec = getattr(base_env, "_env", None)
    if vec is not None and hasattr(vec, "envs"):
        return vec.envs[0].render()
    return base_env.render()


class EpisodeVideo(Transform):
    def __init__(self, video_dir: str, fps: int = 20) -> None:
        super().__init__()
        self.video_dir = video_dir
        self.fps = fps
        self._writer = None
        self._recording = False
        self._tmp = os.path.join(video_dir, f".recording-{os.getpid()}.mp4")

    def _render(self):
        return render_first(self.parent.base_env)

    def _close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._recording = False

    def _frame(self) -> None:
        if not self._recording:
            return
        if self._writer is None:
            import imageio.v2 as imageio

            os.makedirs(self.video_dir, exist_ok=True)
            self._writer = imageio.get_writer(self._tmp, fps=self.fps, macro_block_size=1)
        self._writer.append_data(self._render())

    def _reset(self, tensordict, tensordict_reset):
        # A reset without a "_reset" mask starts a round (the worker resets every env);
        # auto-resets inside the round carry a mask, even when every sub-env is done.
        if tensordict is None or "_reset" not in tensordict.keys():
            self._close()
            if os.path.exists(self._tmp):
                os.unlink(self._tmp)
            self._recording = True
            self._frame()
        return tensordict_reset

    def _step(self, tensordict, next_tensordict):
        if self._recording:
            self._frame()
            if bool(next_tensordict.get("done").reshape(-1)[0]):
                self._close()
        return next_tensordict

    def dump(self, step: int | None = None, suffix: str | None = None) -> None:
        self._close()
        if os.path.exists(self._tmp):
            os.replace(self._tmp, os.path.join(self.video_dir, f"step_{int(step or 0):09d}.mp4"))
