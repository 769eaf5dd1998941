"""Frames of one episode of each round (sub-env 0's first by default), rendered only when asked.

:class:`EpisodeFrames` is a transform on a wrapper the evaluator owns (never on
a caller's env): it follows sub-env ``sub_env`` from the reset that starts a round,
and renders its episode ``ordinal`` (its first: 0, by default) one frame per step,
handing each to ``on_frame``: the episode's first state (the round's reset, or the
reset that follows the sub-env's previous episode), then one after each step
(T + 1 frames for an episode of T steps). The first state is rendered when the
episode's first step starts, so a reset no step follows (the collector's, when it
is built) renders nothing, and no other sub-env or episode is rendered.
:class:`FrameBuffer` keeps them in memory (``RayEvalWorker``'s ``frames``);
the launcher's MP4 writer (``simeval.launch.video``) streams them to a file
(``--video``; ``--replay ... --video``: the replayed episode's).
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
    """Sub-env 0 of a batched env as an (H, W, 3) uint8 frame (:func:`render_sub_env` of 0)."""
    return render_sub_env(env, 0)


def render_sub_env(env: EnvBase, index: int) -> np.ndarray:
    """Sub-env ``index`` of a batched env as an (H, W, 3) uint8 frame.

    The native env (``simeval.envs.simulators.mujoco_native.env``) renders the sub-env itself; a
    gymnasium vector env under torchrl's GymWrapper renders through that sub-env (built with
    ``render_mode="rgb_array"``), or picks its frame from the batch the vector env renders.
    """
    base_env = innermost(env)
    vec = _gym_env(base_env)
    if vec is not None and hasattr(vec, "envs"):
        return vec.envs[index].render()
    if vec is not None and hasattr(vec, "render"):
        frame = vec.render()
        return frame[index] if getattr(frame, "ndim", 3) == 4 else frame
    return base_env.render(index) if index else base_env.render()


class EpisodeFrames(Transform):
    """Renders episode ``ordinal`` of sub-env ``sub_env`` (sub-env 0's first by default) of each round."""

    def __init__(self, sub_env: int = 0, ordinal: int = 0) -> None:
        super().__init__()
        if sub_env < 0 or ordinal < 0:
            raise ValueError(f"sub_env and ordinal must be >= 0, got {sub_env} and {ordinal}.")
        self.sub_env = sub_env
        self.ordinal = ordinal
        self._recording = False
        self._reset_frame_due = False
        self._ended = 0  # the sub-env's episodes that ended in this round
        self._following = False  # a round runs and the episode is still to come

    # -- what subclasses do with the frames --------------------------------
    def on_start(self) -> None:
        """A round starts (before its first frame)."""

    def on_frame(self, frame: np.ndarray) -> None:
        """One (H, W, 3) uint8 frame."""

    def on_end(self) -> None:
        """The recorded episode ended (or the round ended before it did)."""

    # -- the transform --------------------------------------------------------
    def _frame(self) -> None:
        self.on_frame(render_sub_env(self.parent, self.sub_env))

    def _begin_episode(self) -> None:
        """The recorded episode starts: its first state is rendered when its first step starts."""
        self._following = False
        self._recording = True
        self._reset_frame_due = True

    def _reset(self, tensordict: TensorDictBase | None, tensordict_reset: TensorDictBase) -> TensorDictBase:
        # A reset without a "_reset" mask starts a round (the worker resets every env);
        # auto-resets inside the round carry a mask, even when every sub-env is done.
        if tensordict is None or "_reset" not in tensordict.keys():
            if self._recording:
                self.on_end()
            self._recording = self._reset_frame_due = False
            self._ended = 0
            self.on_start()
            if self.ordinal == 0:
                self._begin_episode()
            else:
                self._following = True
        return tensordict_reset

    def _inv_call(self, tensordict: TensorDictBase) -> TensorDictBase:
        if self._reset_frame_due:  # a step starts: the env still shows the episode's first state
            self._reset_frame_due = False
            self._frame()
        return super()._inv_call(tensordict)

    def _step(self, tensordict: TensorDictBase, next_tensordict: TensorDictBase) -> TensorDictBase:
        if not (self._recording or self._following):
            return next_tensordict
        if self._recording:
            self._frame()
        if bool(next_tensordict.get("done").reshape(-1)[self.sub_env]):
            if self._recording:
                self._recording = False
                self.on_end()
            else:
                self._ended += 1
                if self._ended == self.ordinal:  # the next episode is the one: it starts at the sub-env's reset
                    self._begin_episode()
        return next_tensordict

    def finish(self) -> None:
        """End the recording now (a round stopped before the episode ended)."""
        self._reset_frame_due = self._following = False
        if self._recording:
            self._recording = False
            self.on_end()


class FrameBuffer(EpisodeFrames):
    """Keeps the frames of the current round in memory; ``take()`` hands them over."""

    def __init__(self, sub_env: int = 0, ordinal: int = 0) -> None:
        super().__init__(sub_env, ordinal)
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
