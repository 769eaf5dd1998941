"""``--video``: an MP4 of the first episode of each evaluation round, rendered headless.

Frames of sub-env 0's first episode (``simeval.worker.frames.EpisodeFrames``) stream
into a temporary MP4 (no frame is kept in memory); ``dump(step=...)``, which
the worker calls after every round, moves it to ``<video_dir>/step_<step>.mp4``.
Nothing renders unless asked. ``MUJOCO_GL=egl`` (GPU or Mesa) by default, or ``osmesa``.
"""

from __future__ import annotations

import os

from simeval.worker.frames import EpisodeFrames


class EpisodeVideo(EpisodeFrames):
    def __init__(self, video_dir: str, fps: int = 20) -> None:
        super().__init__()
        self.video_dir = video_dir
        self.fps = fps
        self._writer = None
        self._tmp = os.path.join(video_dir, f".recording-{os.getpid()}.mp4")

    def on_start(self) -> None:
        self.on_end()
        if os.path.exists(self._tmp):
            os.unlink(self._tmp)

    def on_frame(self, frame) -> None:
        if self._writer is None:
            import imageio.v2 as imageio

            os.makedirs(self.video_dir, exist_ok=True)
            self._writer = imageio.get_writer(self._tmp, fps=self.fps, macro_block_size=1)
        self._writer.append_data(frame)

    def on_end(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def dump(self, step: int | None = None, suffix: str | None = None) -> None:
        self.finish()
        self.on_end()
        if os.path.exists(self._tmp):
            os.replace(self._tmp, os.path.join(self.video_dir, f"step_{int(step or 0):09d}.mp4"))
