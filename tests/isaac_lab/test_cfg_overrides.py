"""Isaac Lab task-config overrides (a suite condition's ``cfg``) on the real Isaac Lab 3.0, kit-less on Newton.

One Isaac Lab process (Isaac Lab keeps one simulation per process) runs this
file as a script: it asks ``simeval.envs.make_env`` for a bad override path and
for overrides that are not data (no sim is built for them), loads suite files
whose overrides are checked against the task's config, then builds the offline manager-based cartpole
(``isaaclab:Simeval-Isaac-Cartpole``, 4 sub-envs) with the pole three times as
heavy (``events.add_pole_mass``) and a fixed initial state, reads the overrides
back from the env's config and the pole's mass back from the articulation and
from the MuJoCo-Warp model that Newton steps, and plays zero actions for one
episode; then turns the mass event back to its nominal scale and plays again.
The tests read what it wrote.

    python test_cfg_overrides.py OUT.json

Overrides are data only: Isaac Lab 3.0 imports and calls a term's ``func`` given as a
``"module:function"`` string (verified: a gadget module named in
``events.add_pole_mass.func`` was imported and called at every reset), so a suite
naming one is refused when it is loaded, and nothing it names is imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from isaac_script import REPO, error_of, probe_of

TASK = "isaaclab:Simeval-Isaac-Cartpole"
MASS = "events.add_pole_mass.params.mass_distribution_params"
HEAVY = 3.0
STEPS = 60
# Every sub-env starts from the same state, so what differs between two episodes is the pole's mass.
FIXED_START = {
    "events.reset_cart_position.params.position_range": [0.0, 0.0],
    "events.reset_cart_position.params.velocity_range": [0.0, 0.0],
    "events.reset_pole_position.params.position_range": [0.2, 0.2],
    "events.reset_pole_position.params.velocity_range": [0.0, 0.0],
}
DATA_ONLY = "a cfg override sets data only"
# A module a suite's author could leave on sys.path (the launcher's working directory): importing it, or calling
# its function, leaves a marker file. Isaac Lab imports and calls it when a term's func names it.
GADGET = """\
import os
open(os.path.join(os.environ["SIMEVAL_MARKER_DIR"], "imported"), "w").close()
def touch(*args, **kwargs):
    open(os.path.join(os.environ["SIMEVAL_MARKER_DIR"], "called"), "w").close()
"""
SUITE = """\
name: cartpole-cfg
episodes: 2
num_envs: 2
max_steps: 10
tasks:
  - env: {task}
    conditions:
      nominal: {{}}
      {name}: {{cfg: {{{path}: {value}}}}}
"""

pytestmark = [pytest.mark.required, pytest.mark.timeout(1500)]  # the first test waits for isaac_scripts


@pytest.fixture(scope="module")
def probed(isaac_scripts) -> dict:
    return probe_of(isaac_scripts, __name__)


def test_overrides_land_in_the_env_config_as_the_configs_types(probed):
    cfg = probed["cfg"]
    assert cfg["mass"] == {"value": [HEAVY, HEAVY], "type": "tuple"}  # a YAML list became the field's tuple
    assert cfg["pole_position_range"] == {"value": [0.2, 0.2], "type": "tuple"}
    assert cfg["term_mass"] == [HEAVY, HEAVY]  # what Isaac Lab's event manager runs with


def test_a_bad_path_is_one_line_value_error_naming_the_path_the_part_and_what_there_is(probed):
    bad = probed["bad"]
    assert bad["type"] == "ValueError" and "\n" not in bad["message"]
    assert bad["message"] == (
        "cfg override 'events.add_pole_mas.params.x': 'add_pole_mas' is not in events "
        "(have: reset_cart_position, reset_pole_position, add_pole_mass)."
    )
    index = probed["bad_index"]
    assert index["type"] == "ValueError" and "\n" not in index["message"]
    assert "'events.reset_pole_position.params.position_range.2'" in index["message"]
    assert "(have: 0..1)" in index["message"]


def test_the_nominal_mass_event_draws_nothing_and_changes_nothing(probed):
    assert probed["identity_term"] == {"returned": None, "rng_unchanged": True}


def test_the_mass_event_sets_the_poles_mass_in_newton(probed):
    heavy, nominal = probed["heavy"], probed["nominal"]
    assert heavy["body_names"] == ["slider", "cart", "pole"]
    assert heavy["pole_mass"] == [HEAVY] * 4  # the articulation's data (every sub-env)
    assert heavy["cart_mass"] == [1.0] * 4  # only the pole
    assert heavy["solver_pole_mass"] == pytest.approx([HEAVY] * 4)  # the model MuJoCo-Warp steps
    assert heavy["pole_inertia_ratio"] == pytest.approx(HEAVY, rel=1e-5)  # inertia scaled with the mass
    assert nominal["pole_mass"] == [1.0] * 4 and nominal["solver_pole_mass"] == pytest.approx([1.0] * 4)
    ranged = probed["ranged"]  # the range [0.5, 2.0]: each sub-env's reset draws its own scale
    assert all(0.5 <= m <= 2.0 for m in ranged) and len(set(ranged)) == 4


def test_a_heavier_pole_changes_the_returns_under_a_fixed_policy(probed):
    heavy, nominal = probed["heavy"]["returns"], probed["nominal"]["returns"]
    assert len(heavy) == len(nominal) == 4
    assert max(heavy) - min(heavy) < 1e-4 and max(nominal) - min(nominal) < 1e-4  # a fixed start: one episode, 4x
    assert abs(heavy[0] - nominal[0]) > 0.05, (heavy, nominal)


def test_overrides_that_are_not_data_are_refused_before_any_env_is_built(probed):
    refused = probed["refused"]
    expected = {
        "func": "'func' names a callable or a class the simulator imports or calls",
        "clone_strategy": "the field holds a callable (function",
        "asset_cfg": "the field holds a config object (SceneEntityCfg)",
        "params": "the field holds a dict that holds more than plain data",
        "min_mass": "a string lands where the config holds 1e-06",
    }
    assert set(refused) == set(expected)
    for name, words in expected.items():
        error = refused[name]
        assert error["type"] == "ValueError" and "\n" not in error["message"], error
        assert error["message"].startswith("cfg override '") and words in error["message"], error
        assert DATA_ONLY in error["message"]


def test_a_suite_is_checked_against_the_tasks_config_when_it_is_loaded(probed):
    suites = probed["suites"]
    assert suites["genuine"] == {"type": None, "message": ""}  # the pole-mass override loads as before
    for name, words in (
        ("callable", "tasks[0].conditions.evil.cfg: cfg override 'scene.clone_cfg.clone_strategy': the field holds"),
        ("bad_path", "tasks[0].conditions.typo.cfg: cfg override 'events.add_pole_mas.params.x': 'add_pole_mas' is"),
    ):
        error = suites[name]
        assert error["type"] == "ConfigError" and "\n" not in error["message"], error
        assert error["message"].startswith(suites["path"] + ": " + words), error


def test_a_suite_naming_a_module_for_a_terms_func_is_refused_at_load_and_nothing_is_imported(tmp_path):
    gadget, marks, out = tmp_path / "gadget", tmp_path / "marks", tmp_path / "out"
    gadget.mkdir()
    marks.mkdir()
    (gadget / "simeval_gadget.py").write_text(GADGET)
    suite = tmp_path / "evil.yaml"
    suite.write_text(
        SUITE.format(task=TASK, name="evil", path="events.add_pole_mass.func", value="simeval_gadget:touch")
    )
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{gadget}", "SIMEVAL_MARKER_DIR": str(marks)}
    checkpoint = os.path.join(REPO, "simeval", "data", "isaaclab_cartpole_rsl_rl", "model_149.pt")
    cmd = [sys.executable, "-m", "simeval.launch", "--suite", str(suite), "--checkpoint", checkpoint, "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=420, env=env, cwd=REPO)
    last = (proc.stderr.strip().splitlines() or [""])[-1]
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert last.endswith(
        f"{suite}: tasks[0].conditions.evil.cfg.events.add_pole_mass.func: 'func' names a callable or a class "
        "the simulator imports or calls; a cfg override sets data only: numbers, booleans, null, strings where "
        "the config holds a string, and lists or mappings of these."
    ), last
    assert list(marks.iterdir()) == [] and not (out / "results.jsonl").exists()
    # the gadget is live: imported, it leaves its marker
    subprocess.run([sys.executable, "-c", "import simeval_gadget"], check=True, env=env, cwd=REPO, timeout=60)
    assert [p.name for p in marks.iterdir()] == ["imported"]


def test_cfg_overrides_are_for_isaac_lab_tasks_only():
    from simeval.envs import make_env

    with pytest.raises(ValueError, match=r"^cfg overrides apply to Isaac Lab and mjlab tasks only"):
        make_env("HalfCheetah-v5", cfg_overrides={MASS: [0.5, 2.0]})


# ---- the Isaac Lab process ----


def _episode(env, robot) -> dict:
    """Zero actions from a reset of every sub-env to the end of their (simultaneous) episodes."""
    import torch
    from isaaclab_newton.physics import NewtonManager

    td = env.reset()
    total = torch.zeros(env.batch_size[0], dtype=torch.float64)
    returns = [None] * env.batch_size[0]
    for _ in range(STEPS):
        td["action"] = torch.zeros(env.action_spec.shape)
        td, td_next = env.step_and_maybe_reset(td)
        total += td["next", "reward"].reshape(-1).double()
        for e in td["next", "done"].reshape(-1).nonzero().flatten().tolist():
            if returns[e] is None:
                returns[e] = float(total[e])
        td = td_next
        if all(r is not None for r in returns):
            break
    pole = robot.body_names.index("pole")
    solver = NewtonManager._solver.mjw_model  # MuJoCo-Warp's model: body 0 is its world body
    return {
        "returns": returns,
        "body_names": list(robot.body_names),
        "pole_mass": robot.data.body_mass.torch[:, pole].tolist(),
        "cart_mass": robot.data.body_mass.torch[:, robot.body_names.index("cart")].tolist(),
        "pole_inertia": robot.data.body_inertia.torch[0, pole].tolist(),
        "solver_pole_mass": solver.body_mass.numpy()[:, pole + 1].tolist(),
    }


def _refused() -> dict:
    """What ``make_env`` says to overrides that are not data, each in the real config (no env is built)."""
    from simeval.envs import make_env

    cases = {
        "func": {"events.add_pole_mass.func": "os:system"},
        "clone_strategy": {"scene.clone_cfg.clone_strategy": "random"},  # a callable, by its value in the config
        "asset_cfg": {"events.add_pole_mass.params.asset_cfg": {"name": "robot"}},
        "params": {"events.add_pole_mass.params": {"mass_distribution_params": [2.0, 2.0]}},
        "min_mass": {"events.add_pole_mass.params.min_mass": "tiny"},
    }
    return {
        name: error_of(lambda o=o: make_env(TASK, num_envs=4, device="cpu", cfg_overrides=o))
        for name, o in cases.items()
    }


def _suites(tmp: str) -> dict:
    """What ``load_suite`` says to suite files whose overrides the task's config takes, or does not."""
    from simeval.launch.suite import load_suite

    cases = {
        "genuine": ("heavy", MASS, "[3.0, 3.0]"),
        "callable": ("evil", "scene.clone_cfg.clone_strategy", "random"),
        "bad_path": ("typo", "events.add_pole_mas.params.x", "1.0"),
    }
    out = {"path": os.path.join(tmp, "suite.yaml")}
    for label, (name, path, value) in cases.items():
        with open(out["path"], "w") as f:
            f.write(SUITE.format(task=TASK, name=name, path=path, value=value))
        out[label] = error_of(lambda: load_suite(out["path"]))
    return out


def _probe(out: str) -> None:
    import torch

    from simeval.envs import make_env
    from simeval.envs.simulators.isaaclab import offline as isaaclab_offline

    refused, suites = _refused(), _suites(os.path.dirname(out))
    bad = error_of(lambda: make_env(TASK, num_envs=4, device="cpu", cfg_overrides={"events.add_pole_mas.params.x": 1}))
    bad_index = error_of(
        lambda: make_env(
            TASK, num_envs=4, device="cpu", cfg_overrides={"events.reset_pole_position.params.position_range.2": 0}
        )
    )
    # The nominal term returns before touching the asset or the random generator.
    term = object.__new__(isaaclab_offline.randomize_rigid_body_mass_unless_identity)
    term.default_mass = None
    rng = torch.get_rng_state()
    returned = term(None, None, None, (1.0, 1.0), "scale")
    identity = {"returned": returned, "rng_unchanged": bool(torch.equal(rng, torch.get_rng_state()))}

    env = make_env(
        TASK, num_envs=4, device="cpu", seed=0, max_steps=STEPS, obs_norm=False,
        cfg_overrides={MASS: [HEAVY, HEAVY], **FIXED_START},
    )  # fmt: skip
    unwrapped = env._isaac_unwrapped
    robot = unwrapped.scene["robot"]
    events = unwrapped.cfg.events
    mass = events.add_pole_mass.params["mass_distribution_params"]
    pole_range = events.reset_pole_position.params["position_range"]
    term_cfg = unwrapped.event_manager.get_term_cfg("add_pole_mass")
    cfg = {
        "mass": {"value": list(mass), "type": type(mass).__name__},
        "pole_position_range": {"value": list(pole_range), "type": type(pole_range).__name__},
        "term_mass": list(term_cfg.params["mass_distribution_params"]),
    }
    heavy = _episode(env, robot)
    term_cfg.params["mass_distribution_params"] = (1.0, 1.0)  # back to nominal: the next reset restores the mass
    nominal = _episode(env, robot)
    heavy["pole_inertia_ratio"] = heavy["pole_inertia"][0] / nominal["pole_inertia"][0]
    term_cfg.params["mass_distribution_params"] = (0.5, 2.0)  # a range: one draw per sub-env at each reset
    env.reset()
    ranged = robot.data.body_mass.torch[:, robot.body_names.index("pole")].tolist()
    env.close()
    result = {"bad": bad, "bad_index": bad_index, "identity_term": identity, "cfg": cfg, "ranged": ranged}
    result.update(refused=refused, suites=suites)
    with open(out, "w") as f:
        json.dump({**result, "heavy": heavy, "nominal": nominal}, f)


if __name__ == "__main__":
    _probe(sys.argv[1])
