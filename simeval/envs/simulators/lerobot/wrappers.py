"""The gymnasium wrappers each LeRobot sub-env runs under (imports gymnasium: loaded when an env is built)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

# LeRobot's observation keys (lerobot.utils.constants), as lerobot-eval's preprocess_observation names them.
IMAGE = "observation.image"
IMAGES = "observation.images"
STATE = "observation.state"
ENV_STATE = "observation.environment_state"


def _image_box(space: gym.spaces.Box) -> gym.spaces.Box:
    h, w, c = space.shape
    return gym.spaces.Box(0.0, 1.0, (c, h, w), np.float32)


class LeRobotKeys(gym.ObservationWrapper):
    """A LeRobot sim env's observation under the keys and dtypes lerobot-eval gives its policy.

    ``pixels`` (uint8 HWC; a dict of cameras) becomes ``observation.image`` (``observation.images.<camera>``)
    as float32 CHW in [0, 1], divided by 255 in float32 as lerobot-eval does; ``agent_pos`` becomes
    ``observation.state`` and ``environment_state`` ``observation.environment_state``, both float32.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        spaces = env.observation_space.spaces
        out: dict[str, gym.spaces.Space] = {}
        pixels = spaces.get("pixels")
        if isinstance(pixels, gym.spaces.Dict):
            out |= {f"{IMAGES}.{cam}": _image_box(box) for cam, box in pixels.spaces.items()}
        elif pixels is not None:
            out[IMAGE] = _image_box(pixels)
        for source, key in (("environment_state", ENV_STATE), ("agent_pos", STATE)):
            if source in spaces:
                box = spaces[source]
                out[key] = gym.spaces.Box(
                    box.low.astype(np.float32), box.high.astype(np.float32), box.shape, np.float32
                )
        self.observation_space = gym.spaces.Dict(out)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        """The env's reset, its observation under LeRobot's keys and ``info["success"]`` set."""
        observation, info = super().reset(seed=seed, options=options)
        return observation, _with_success(info)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        """The env's step, its observation under LeRobot's keys and ``info["success"]``: its ``is_success``."""
        observation, reward, terminated, truncated, info = super().step(action)
        return observation, reward, terminated, truncated, _with_success(info)

    def observation(self, observation: dict[str, Any]) -> dict[str, np.ndarray]:
        """The sub-env's observation under LeRobot's keys (see the class)."""
        out: dict[str, np.ndarray] = {}
        pixels = observation.get("pixels")
        images = pixels if isinstance(pixels, dict) else ({None: pixels} if pixels is not None else {})
        for cam, img in images.items():
            key = IMAGE if cam is None else f"{IMAGES}.{cam}"
            out[key] = np.ascontiguousarray(np.transpose(img, (2, 0, 1))).astype(np.float32) / np.float32(255)
        for source, key in (("environment_state", ENV_STATE), ("agent_pos", STATE)):
            if source in observation:
                out[key] = np.asarray(observation[source]).astype(np.float32)
        return out


def _with_success(info: dict) -> dict:
    return {**info, "success": bool(info.get("is_success", False))}


class ReseedEachEpisode(gym.Wrapper):
    """Every episode of a sub-env starts from its own seed, as lerobot-eval seeds its batches.

    lerobot-eval runs ``n_episodes`` in batches of ``batch_size`` envs and seeds batch ``k``'s env
    ``i`` with ``seed + k * batch_size + i``. A seeded reset (``seed + i``, from the vector env's
    seeded reset) starts that count at episode 0; each later reset of this sub-env after it has
    stepped is its next episode (``k + 1``), seeded ``seed + (k + 1) * stride + i``. A reset before
    any step (torchrl resets after seeding) restarts the same episode. With ``stride`` the number
    of sub-envs, sub-env ``i``'s ``k``-th episode is lerobot-eval's batch ``k``, env ``i``.
    """

    def __init__(self, env: gym.Env, stride: int) -> None:
        super().__init__(env)
        self.stride = stride
        self._first: int | None = None
        self._episode = 0
        self._stepped = False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        """The next episode's seeded reset (see the class); an explicit ``seed`` restarts the count from it."""
        if seed is not None:
            self._first, self._episode = seed, 0
        elif self._first is not None:
            self._episode += self._stepped
            seed = self._first + self._episode * self.stride
        self._stepped = False
        return self.env.reset(seed=seed, options=options)

    def seed_of(self, episode: int) -> int | None:
        """The seed of episode ``episode`` since the last seeded reset (None: no seeded reset yet)."""
        return None if self._first is None else self._first + episode * self.stride

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        """The env's step (the episode now counts as run)."""
        self._stepped = True
        return self.env.step(action)


class SeededPositions(gym.Wrapper):
    """A seeded reset of LeRobot's MetaWorld env draws the object and goal positions from that seed.

    MetaWorld 3 ignores ``reset(seed=...)``, and LeRobot's ``MetaworldEnv`` unfreezes the task's
    positions so that each reset draws them from NumPy's global generator: an episode's seed then
    does not fix its initial state (lerobot-eval's episodes depend on the order of its resets).
    Here a seeded reset seeds the MetaWorld env (``seed()``) and has it draw the positions from its
    own generator (``seeded_rand_vec``), so a seed fixes the episode, whichever worker or sub-env runs it.
    """

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        """The env's reset, its positions drawn from ``seed`` when one is given."""
        inner = self.env.unwrapped._env  # LeRobot's MetaworldEnv holds the MetaWorld env here
        if seed is not None:
            inner.seeded_rand_vec = True
            inner.seed(int(seed) % 2**32)
        return self.env.reset(seed=seed, options=options)
