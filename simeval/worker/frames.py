"""Frames of sub-env 0's first episode of each round, rendered only when asked.

:class:`EpisodeFrames` is a transform on a wrapper the evaluator owns (never on
a caller's env): from the reset that starts a round until sub-env 0's first
episode ends it renders one frame per step and hands each to ``on_frame``: the
reset's frame, then one after each step (T + 1 frames for an episode of T steps).
The reset's frame is rendered when the first step starts, so a reset no step
follows (the collector's, when it is built) renders nothing.
:class:`FrameBuffer` keeps them in memory (``RayEvalWorker``'s ``frames``);
the launcher's MP4 writer (``simeval.launch.video``) streams them to a file.
Rendering needs ``MUJOCO_GL=egl`` (GPU or Mesa) or ``osmesa`` for MuJoCo.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchrl.envs.transforms import Transform

from simeval.envs.layout import innermost

if TYPE_CHECKING:
    import numpy as np
    from tensordict import TensorDictBase
    from torchrl.envs import EnvBase


def _gym_env(base_env: EnvBase) -> Any:
    """The gymnasium env under torchrl's GymWrapper / IsaacLabWrapper, if any."""
    return getattr(base_env, "_env", None)


def can_render(env: EnvBase) -> bool:
    """True when the env was built to render RGB frames (``render_mode == "rgb_array"``)."""
    base_env = innermost(env)
    inner = _gym_env(base_env)
    for candidate in (base_env, inner, getattr(inner, "unwrapped", None)):
        if getattr(candidate, "render_mode", None) == "rgb_array":
            return True
    return False


def render_first(env: EnvBase) -> np.ndarray:
    """Sub-env 0 of a batched env as an (H, W, 3) uint8 frame.

    The native env (``simeval.envs.simulators.mujoco_native.env``) renders sub-env 0 itself; a
    gymnasium vector env under torchrl's GymWrapper renders through its first
    sub-env (built with ``render_mode="rgb_array"``).
    """
    base_env = innermost(env)
    vec = _gym_env(base_env)
    if vec is not None and hasattr(vec, "envs"):
        return vec.envs[0].render()
    if vec is not None and hasattr(vec, "render"):
        frame = vec.render()
        return frame[0] if getattr(frame, "ndim", 3) == 4 else frame
    return base_env.render()


class EpisodeFrames(Transform):
    """Renders sub-env 0 from the start of each round until its first episode ends."""

    def __init__(self) -> None:
        super().__init__()
        self._recording = False
        self._reset_frame_due = False

    # -- what subclasses do with the frames --------------------------------
    def on_start(self) -> None:
        """A round starts (before its first frame)."""

    def on_frame(self, frame: np.ndarray) -> None:
        """One (H, W, 3) uint8 frame."""

    def on_end(self) -> None:
        """Sub-env 0's first episode of the round ended."""

    # -- the transform --------------------------------------------------------
    def _frame(self) -> None:
        self.on_frame(render_first(self.parent))

    def _reset(self, tensordict: TensorDictBase | None, tensordict_reset: TensorDictBase) -> TensorDictBase:
        # A reset without a "_reset" mask starts a round (the worker resets every env);
        # auto-resets inside the round carry a mask, even when every sub-env is done.
        if tensordict is None or "_reset" not in tensordict.keys():
            if self._recording:
                self.on_end()
            self._recording = True
            self.on_start()
            self._reset_frame_due = True
        return tensordict_reset

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self._reset_frame_due:  # a step starts: the env still shows the reset's state
            self._reset_frame_due = False
            self._frame()
        return super()._inv_call(tensordict)

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        if self._recording:
            self._frame()
            if bool(next_tensordict.get("done").reshape(-1)[0]):
                self._recording = False
                self.on_end()
        return next_tensordict

    def finish(self) -> None:
        """End the recording now (a round stopped before the episode ended)."""
        self._reset_frame_due = False
        if self._recording:
            self._recording = False
            self.on_end()


class FrameBuffer(EpisodeFrames):
    """Keeps the frames of the current round in memory; ``take()`` hands them over."""

    def __init__(self) -> None:
        super().__init__()
        self._frames: list = []

    def on_start(self) -> None:
        """Drop the frames of an earlier round."""
        self._frames = []

    def on_frame(self, frame: np.ndarray) -> None:
        """Keep a copy of ``frame``."""
        self._frames.append(frame.copy())

    def take(self) -> np.ndarray | None:
        """(T, H, W, 3) uint8 frames of the last round, or None if nothing rendered."""
        import numpy as np

        self.finish()
        frames, self._frames = self._frames, []
        return np.stack(frames) if frames else None
