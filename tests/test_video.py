"""``--video``: the summary names the MP4, and only the recorded episode is rendered, cheaply.

One launcher run in a subprocess (MuJoCo reads ``MUJOCO_GL`` when it is first imported), its
frame renderer wrapped to count calls: sub-env 0's first episode is rendered (its reset and one
frame a step), no other sub-env, and no frame for the collector's reset no step follows.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from launch_helpers import REPO, TESTS

STEPS = 20

DRIVER = textwrap.dedent(
    """
    import sys

    from simeval.envs.simulators import prepare_headless

    prepare_headless()  # as the launcher does, before anything imports MuJoCo
    import simeval.worker.frames as frames
    from simeval.launch import main

    calls = []
    render_sub_env = frames.render_sub_env


    def counted(env, index):
        frame = render_sub_env(env, index)
        calls.append(index)
        return frame


    frames.render_sub_env = counted
    code = main(sys.argv[1:])
    print(f"RENDERED {len(calls)} OF SUB-ENVS {sorted(set(calls))}")

    import mujoco

    from simeval.envs.simulators.mujoco_native.env import MujocoBatchEnv

    env = MujocoBatchEnv("HalfCheetah-v5", 2, render_mode="rgb_array")
    env.reset()
    env.render()
    flags, names = env._renderer.scene.flags, mujoco.mjtRndFlag
    print(f"SHADOW {int(flags[names.mjRND_SHADOW])} REFLECTION {int(flags[names.mjRND_REFLECTION])}")
    sys.exit(code)
    """
)


def test_video_is_named_in_the_summary_and_only_the_recorded_episode_is_rendered(tmp_path):
    import imageio.v2 as imageio

    from simeval.checkpoints.shipped import shipped_checkpoint

    out = tmp_path / "out"
    args = ["--checkpoint", shipped_checkpoint(), "--episodes", "4", "--num-envs", "2", "--max-steps", str(STEPS)]
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, *args, "--video", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([REPO, TESTS])},
        cwd=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    listed = lines[lines.index("videos:") + 1].split(": ", 1)[1]  # the summary's line under its table
    assert os.path.isfile(listed) and os.path.samefile(listed, out / "videos" / "step_001001472.mp4")
    reader = imageio.get_reader(listed, format="FFMPEG")
    # Sub-env 0's first episode: its reset and one frame a step; 2 sub-envs x 2 episodes each, rendered once.
    assert f"RENDERED {STEPS + 1} OF SUB-ENVS [0]" in lines, lines[-3:]
    assert reader.count_frames() == STEPS + 1
    assert "SHADOW 0 REFLECTION 0" in lines  # software OpenGL spent most of a frame on them
