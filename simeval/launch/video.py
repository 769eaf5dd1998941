"""``--video``: an MP4 of the first episode of each evaluation round, rendered headless.

Frames of sub-env 0's first episode (``simeval.worker.frames.EpisodeFrames``; a replay's:
the replayed episode's) stream into a temporary MP4 (no frame is kept in memory);
``dump(step=...)``, which the worker calls after every round, moves it to
``<video_dir>/step_<step>.mp4`` (or to the recorder's ``name``).
Nothing renders unless asked. ``MUJOCO_GL=egl`` (GPU or Mesa) by default, or ``osmesa``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from simeval.worker.frames import EpisodeFrames

if TYPE_CHECKING:
    import numpy as np


class EpisodeVideo(EpisodeFrames):
    """Streams each round's episode ``ordinal`` of ``sub_env`` (the first of sub-env 0 by default) to
    ``<video_dir>/step_<step>.mp4``, or ``<video_dir>/<name>`` when given, at ``fps``."""

    def __init__(
        self, video_dir: str, fps: int = 20, *, sub_env: int = 0, ordinal: int = 0, name: str | None = None
    ) -> None:
        super().__init__(sub_env, ordinal)
        self.video_dir = video_dir
        self.fps = fps
        self.name = name
        self._writer = None
        self._tmp = os.path.join(video_dir, f".recording-{os.getpid()}.mp4")

    def on_start(self) -> None:
        """Close any open recording and drop an unfinished file (or a link in its place: never written through)."""
        self.on_end()
        if os.path.lexists(self._tmp):
            os.unlink(self._tmp)

    def on_frame(self, frame: np.ndarray) -> None:
        """Append an (H, W, 3) uint8 frame to the recording (opened at the first frame)."""
        if self._writer is None:
            import imageio.v2 as imageio

            os.makedirs(self.video_dir, exist_ok=True)
            if os.path.lexists(self._tmp):  # the recording is a new file, never one a link points to
                os.unlink(self._tmp)
            self._writer = imageio.get_writer(self._tmp, fps=self.fps, macro_block_size=1)
        self._writer.append_data(frame)

    def on_end(self) -> None:
        """Close the recording."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def dump(self, step: int | None = None, suffix: str | None = None) -> str | None:
        """Finish the round's recording and move it to ``step_<step>.mp4`` (or ``name``); its path, None if
        nothing was recorded (``suffix`` is not used)."""
        self.finish()
        self.on_end()
        if not os.path.exists(self._tmp):
            return None
        path = os.path.join(self.video_dir, self.name or f"step_{int(step or 0):09d}.mp4")
        os.replace(self._tmp, path)
        return path
