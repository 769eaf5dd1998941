"""A LeRobot pretrained_model/ directory is data: what it names is refused in one line, nothing imported."""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from act_policy import save_act  # noqa: E402

pytestmark = [pytest.mark.required, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> str:
    return str(save_act(tmp_path_factory.mktemp("act") / "pretrained_model"))


@pytest.fixture
def policy_dir(saved, tmp_path) -> str:
    copy = tmp_path / "checkpoints" / "004200" / "pretrained_model"
    shutil.copytree(saved, copy)
    return str(copy)


def edit_json(path: str, change) -> None:
    with open(path) as f:
        value = json.load(f)
    change(value)
    with open(path, "w") as f:
        json.dump(value, f)


def refusal(policy_dir: str) -> str:
    from simeval.checkpoints import CheckpointError, load_checkpoint

    with pytest.raises(CheckpointError) as info:
        load_checkpoint(policy_dir)
    text = str(info.value)
    assert "\n" not in text
    return text


def test_the_directory_and_its_model_file_read_the_same_with_the_step_from_lerobot_trains_layout(policy_dir):
    from simeval.checkpoints import load_checkpoint, peek_step

    by_dir, by_file = load_checkpoint(policy_dir), load_checkpoint(os.path.join(policy_dir, "model.safetensors"))
    assert by_dir.sha256 == by_file.sha256 and by_dir.meta["format"] == "lerobot"
    assert by_dir.step == peek_step(policy_dir) == 4200
    assert by_dir.policy_factory == "simeval.checkpoints.formats.lerobot:actor"
    stats = by_dir.policy["__extra_state__", "module.processors"]
    assert "preprocessor.3.observation.state.mean" in stats.keys()


def test_a_processor_step_named_by_module_path_is_refused_unimported(policy_dir):
    path = os.path.join(policy_dir, "policy_preprocessor.json")
    edit_json(path, lambda v: v["steps"].insert(0, {"class": "evil_steps_module.Step", "config": {}}))
    text = refusal(policy_dir)
    assert "policy_preprocessor.json" in text and "evil_steps_module.Step" in text and "nothing was imported" in text
    assert "evil_steps_module" not in sys.modules


def test_an_unknown_registry_name_is_refused(policy_dir):
    path = os.path.join(policy_dir, "policy_postprocessor.json")
    edit_json(path, lambda v: v["steps"].append({"registry_name": "tokenizer_processor", "config": {}}))
    assert "'tokenizer_processor'" in refusal(policy_dir)


def test_a_state_file_outside_the_directory_is_refused(policy_dir):
    path = os.path.join(policy_dir, "policy_preprocessor.json")
    edit_json(path, lambda v: v["steps"][3].update(state_file="../../secrets.safetensors"))
    assert "is not a file name in its directory" in refusal(policy_dir)


def test_a_policy_type_simeval_does_not_run_is_refused(policy_dir):
    edit_json(os.path.join(policy_dir, "config.json"), lambda v: v.update(type="diffusion"))
    assert "of type 'diffusion'" in refusal(policy_dir)


def test_temporal_ensembling_is_refused_with_the_fix(policy_dir):
    edit_json(os.path.join(policy_dir, "config.json"), lambda v: v.update(temporal_ensemble_coeff=0.01))
    assert "temporal_ensemble_coeff" in refusal(policy_dir)


def test_an_oversized_config_is_refused_unread(policy_dir):
    with open(os.path.join(policy_dir, "config.json"), "w") as f:
        f.write('{"type": "act", "pad": "' + "x" * (2 << 20) + '"}')
    assert "refused unread" in refusal(policy_dir)


def test_a_damaged_model_file_is_one_line(policy_dir):
    model = os.path.join(policy_dir, "model.safetensors")
    with open(model, "r+b") as f:
        f.truncate(os.path.getsize(model) // 2)
    assert "safetensors" in refusal(policy_dir)
