"""Fuzzing every input a user hands simeval: checkpoint files of every format, launcher flags, YAML profiles, suites.

Each answer must be a success or one line that names the file (or flag) and what
is wrong: never an internal error's text, never a hang (each launcher run is
bounded), never a partial ``results.jsonl`` line. The inputs are drawn by
hypothesis from valid ones (tests/fuzz_inputs.py): the seeded slice here runs in
``make test`` (the same inputs every run); ``make fuzz`` tries thousands more,
random, and prints any failing input.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest
import torch
import yaml
from fuzz_inputs import (
    BOMBS,
    CFG_GADGETS,
    EVIL_MODULE,
    GADGETS,
    MARKER,
    SEEDS,
    flip,
    fuzz_settings,
    gadget_checkpoint,
    internal,
    main_file,
    mutate_structure,
    odd_values,
    swap_members,
)
from hypothesis import given
from hypothesis import strategies as st

from simeval.checkpoints import CheckpointError, load_checkpoint

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FORMATS = sorted(SEEDS)
TORCH_FORMATS = ["rl_games", "rsl_rl", "simeval", "skrl", "torchrl"]

pytestmark = pytest.mark.timeout(1800)


# Module-level, not fixtures: hypothesis prints a failing example's arguments, and these are large.
_SEEDS: dict[str, dict[str, bytes]] = {}
_ENV: list = []


def seeds() -> dict[str, dict[str, bytes]]:
    """One valid file set per format, made once."""
    if not _SEEDS:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            _SEEDS.update({name: (make(tmp) if name == "onnx" else make()) for name, make in SEEDS.items()})
    return _SEEDS


def env():
    """HalfCheetah-v5 with one sub-env: what the damaged files that still load are built for."""
    if not _ENV:
        from simeval.envs import make_env

        _ENV.append(make_env("HalfCheetah-v5", num_envs=1, obs_norm=False))
    return _ENV[0]


def _write(root, files: dict[str, bytes], replace: dict[str, bytes] | None = None) -> str:
    for name, raw in {**files, **(replace or {})}.items():
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(raw)
    return os.path.join(root, main_file(files))


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    assert "\n" not in text, f"{type(exc).__name__} over several lines: {text!r}"
    return text


def answers_in_one_line(path: str) -> None:
    """The oracle: ``path`` loads, builds and acts, or one line names the file and says what is wrong."""
    from tensordict import TensorDict

    from simeval.factories import build_policy, weights_bound
    from simeval.weights import load_weights

    try:
        ck = load_checkpoint(path)
    except CheckpointError as exc:
        message = _one_line(exc)
        assert message.startswith(f"{path}: "), message
        assert not internal(message[len(path) + 2 :]), message
        return
    try:  # as the launcher does: the file's own factory (registered ones only), its kwargs within the weights' bound
        policy = build_policy(ck.policy_factory, ck.policy_kwargs, env(), max_bytes=weights_bound(ck.policy))
        load_weights(policy, ck.policy, "policy")
        with torch.no_grad():
            policy(TensorDict({"observation": torch.zeros(1, 17)}, batch_size=[1]))
    except (CheckpointError, ValueError) as exc:
        message = _one_line(exc)
        assert not internal(message), f"{path}: {message}"


def test_every_seed_is_valid(tmp_path):
    for name, files in seeds().items():
        path = _write(tmp_path / name, files)
        assert load_checkpoint(path).meta.get("format", "simeval") == name, name
        answers_in_one_line(path)


@pytest.mark.parametrize("fmt", FORMATS)
@fuzz_settings(25)
@given(data=st.data())
def test_damaged_files_of_every_format_answer_in_one_line(tmp_path_factory, fmt, data):
    files = seeds()[fmt]
    raw = files[main_file(files)]
    kind = data.draw(st.sampled_from(["flip", "truncate", "swap"] if raw[:2] == b"PK" else ["flip", "truncate"]))
    if kind == "flip":
        flips = data.draw(st.lists(st.tuples(st.integers(0, len(raw) - 1), st.integers(0, 7)), min_size=1, max_size=8))
        damaged = flip(raw, flips)
    elif kind == "truncate":
        damaged = raw[: data.draw(st.integers(0, len(raw) - 1))]
    else:
        damaged = swap_members(raw, data.draw(st.integers(0, 99)), data.draw(st.integers(0, 99)))
    path = _write(tmp_path_factory.mktemp(fmt), files, {main_file(files): damaged})
    answers_in_one_line(path)


@pytest.mark.parametrize("fmt", TORCH_FORMATS)
@fuzz_settings(25)
@given(data=st.data())
def test_odd_fields_and_tensors_of_every_torch_format_answer_in_one_line(tmp_path_factory, fmt, data):
    import io

    files = seeds()[fmt]
    name = main_file(files)
    loaded = torch.load(io.BytesIO(files[name]), weights_only=True)
    mutated = mutate_structure(data.draw, loaded)
    buf = io.BytesIO()
    torch.save(mutated, buf)
    path = _write(tmp_path_factory.mktemp(fmt), files, {name: buf.getvalue()})
    answers_in_one_line(path)


@fuzz_settings(25)
@given(
    field=st.sampled_from(
        ["actor", "clip_actions", "actor.hidden_dims", "actor.activation", "actor.obs_normalization"]
    ),  # noqa: E501
    value=odd_values(),
)
def test_an_agent_yaml_with_odd_types_answers_in_one_line(tmp_path_factory, field, value):
    files = seeds()["rsl_rl"]
    agent = yaml.safe_load(files["params/agent.yaml"])
    parent, key = (agent["actor"], field.split(".")[1]) if "." in field else (agent, field)
    parent[key] = value
    path = _write(tmp_path_factory.mktemp("rsl_rl"), files, {"params/agent.yaml": yaml.safe_dump(agent).encode()})
    answers_in_one_line(path)


@fuzz_settings(25)
@given(data=st.data())
def test_an_sb3_zip_with_odd_data_or_weights_answers_in_one_line(tmp_path_factory, data):
    import io
    import zipfile

    files = seeds()["sb3"]
    with zipfile.ZipFile(io.BytesIO(files["model.zip"])) as z:
        members = {info.filename: z.read(info) for info in z.infolist()}
    if data.draw(st.booleans()):
        saved = json.loads(members["data"])
        key = data.draw(st.sampled_from(sorted(saved)))
        saved[key] = data.draw(odd_values())
        members["data"] = json.dumps(saved, allow_nan=True).encode()
    else:
        state = torch.load(io.BytesIO(members["policy.pth"]), weights_only=True)
        buf = io.BytesIO()
        torch.save(mutate_structure(data.draw, state), buf)
        members["policy.pth"] = buf.getvalue()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as out:
        for member, blob in members.items():
            out.writestr(member, blob)
    path = _write(tmp_path_factory.mktemp("sb3"), files, {"model.zip": buf.getvalue()})
    answers_in_one_line(path)


# -- the launcher: flags, YAML profiles, suite files ------------------------------------------------

# Flags and their kinds; each fuzzed value is drawn from the kind's odd values. --serve, --watch, --video, --out,
# --launcher docker and --init-fn are left out: they start servers, wait for files, or run containers and code.
FLAGS = {
    "backend": "word", "num-gpus": "number", "num-cpus": "number", "workers": "number", "max-restarts": "number",
    "device": "word", "env": "word", "env-backend": "word", "num-envs": "number", "episodes": "number",
    "time-budget": "number", "max-steps": "number", "seed": "number", "policy": "word", "policy-kwargs": "json",
    "info-keys": "word", "format": "word", "logger": "word", "until-step": "number", "poll-interval": "number",
    "start-timeout": "number", "round-timeout": "number", "max-checkpoint-size": "size",
}  # fmt: skip
WORDS = ["thread", "process", "ray", "native", "warp", "cpu", "cuda:0", "cuda:9", "HalfCheetah-v5", "Hopper-v5",
         "isaaclab:X", "mjlab:X", "simeval", "rsl_rl", "csv", "tensorboard", "mlflow", "a:b", "os:system", "", " ",
         "-", "--", "\u00e9", "x" * 300, "NaN", "..", "/dev/null"]  # fmt: skip
NUMBERS = ["0", "-1", "1", "2", "1.5", "-0.0", "nan", "inf", "-inf", "1e308", "1e-9", "99999999999999999999", "x", ""]


SIZES = ["32G", "1K", "0", "-1G", "1.5T", "9" * 30 + "G", "nanG", "G", "64 MiB", "1e9"]


def _value(kind: str) -> st.SearchStrategy[str]:
    if kind == "size":
        return st.one_of(st.sampled_from(SIZES), st.sampled_from(NUMBERS))
    if kind == "number":
        return st.one_of(st.sampled_from(NUMBERS), st.integers(-5, 5).map(str))
    if kind == "json":
        return st.one_of(st.sampled_from(["{}", "[]", "{", "null", '{"hidden": 3}', "1"]), odd_values().map(json.dumps))
    return st.one_of(st.sampled_from(WORDS), st.text(max_size=8))


# Settings that keep a valid run short: one one-step-capped episode; fuzzed flags come after them and win.
QUICK = ["--episodes", "1", "--num-envs", "1", "--max-steps", "5", "--start-timeout", "60"]


# Memory a launcher run may take (its heap, RLIMIT_DATA): an input that makes it allocate without bound fails.
LAUNCHER_MEMORY = 4 << 30


def _bounded_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_DATA, (LAUNCHER_MEMORY, LAUNCHER_MEMORY))


def run_launcher(args: list[str], out, quick: bool = True) -> None:
    """The oracle for the launcher: exit 0, or exit 2 with one error line; never a hang, memory without bound
    (it runs under a 4 GiB heap limit) or a partial results line."""
    from simeval.checkpoints.shipped import shipped_checkpoint

    argv = [
        sys.executable,
        "-m",
        "simeval.launch",
        "--checkpoint",
        shipped_checkpoint(),
        *(QUICK if quick else []),
        *args,
    ]
    argv += ["--out", str(out)]
    env = {**os.environ, "PYTHONPATH": REPO, "RAY_ADDRESS": "local"}
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=240,
            env=env,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            preexec_fn=_bounded_memory,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the launcher hung on {args!r}")
    errors = [line for line in proc.stderr.splitlines() if line.startswith("simeval-launch: error:")]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    if proc.returncode == 2:
        assert len(errors) == 1, proc.stderr[-2000:]
        assert not internal(errors[0][len("simeval-launch: error: ") :]), (args, errors[0])
    else:
        assert proc.returncode == 0 and not errors, (args, proc.returncode, proc.stderr[-2000:])
    results = out / "results.jsonl"
    if results.exists():
        text = results.read_text()
        assert text == "" or text.endswith("\n"), "a partial results line"
        for line in text.splitlines():
            json.loads(line)


@fuzz_settings(8, launcher=True)
@given(flags=st.lists(st.sampled_from(sorted(FLAGS)), min_size=1, max_size=3, unique=True), data=st.data())
def test_launcher_flags_answer_in_one_line(tmp_path_factory, flags, data):
    args = []
    for flag in flags:
        args += [f"--{flag}", data.draw(_value(FLAGS[flag]))]
    run_launcher(args, tmp_path_factory.mktemp("flags") / "out")


@fuzz_settings(8, launcher=True)
@given(doc=st.one_of(
    st.dictionaries(st.sampled_from(sorted(FLAGS) + [k.replace("-", "_") for k in FLAGS] + ["nonsense"]),
                    odd_values(), max_size=3),
    odd_values(),
    st.binary(max_size=40).map(lambda b: b.decode("latin-1")),
))  # fmt: skip
def test_yaml_profiles_answer_in_one_line(tmp_path_factory, doc):
    tmp = tmp_path_factory.mktemp("yaml")
    profile = tmp / "profile.yaml"
    profile.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    run_launcher(["--config", str(profile)], tmp / "out")


SUITE = {
    "name": "fuzz",
    "seed": 0,
    "episodes": 1,
    "num_envs": 1,
    "max_steps": 5,
    "tasks": [{"env": "HalfCheetah-v5", "conditions": {"nominal": {}, "noisy": {"observation_noise": 0.1}}}],
}
SETTINGS = ["observation_noise", "action_noise", "action_delay", "action_scale", "body_mass_scale", "friction_scale",
            "gravity", "push", "push_step", "init_noise_scale", "light_intensity", "cfg", "nonsense"]  # fmt: skip


@fuzz_settings(8, launcher=True)
@given(data=st.data())
def test_suite_files_answer_in_one_line(tmp_path_factory, data):
    import copy

    suite = copy.deepcopy(SUITE)
    where = data.draw(st.sampled_from(["top", "task", "condition", "setting"]))
    if where == "top":
        suite[data.draw(st.sampled_from(sorted(suite) + ["nonsense"]))] = data.draw(odd_values())
    elif where == "task":
        suite["tasks"][0][data.draw(st.sampled_from(["env", "conditions", "reference", "num_envs", "x"]))] = data.draw(
            odd_values()
        )
    elif where == "condition":
        suite["tasks"][0]["conditions"][data.draw(st.text(max_size=6))] = data.draw(odd_values())
    else:
        suite["tasks"][0]["conditions"]["noisy"] = {data.draw(st.sampled_from(SETTINGS)): data.draw(odd_values())}
    tmp = tmp_path_factory.mktemp("suite")
    path = tmp / "suite.yaml"
    path.write_text(yaml.safe_dump(suite))
    run_launcher(["--suite", str(path)], tmp / "out", quick=False)  # a suite sets episodes and caps per task


# -- what the fuzzers found, kept as plain tests ------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("env: null", "env must be text, got None"),
        ("episodes: 2.5", "episodes must be a whole number, got 2.5"),
        ("video: 1", "video must be true or false, got 1"),
        ("num_gpus: true", "num_gpus must be a number, got True"),
        ("policy_kwargs: [1]", "policy_kwargs must be a mapping, got [1]"),
        ("poll_interval: .nan", "--poll-interval must be a number of seconds > 0, got nan"),
    ],
)
def test_a_profile_value_of_the_wrong_kind_is_named_in_one_line(tmp_path, line, error):
    from simeval.launch.cli import parse
    from simeval.launch.config import ConfigError

    profile = tmp_path / "p.yaml"
    profile.write_text(line + "\n")
    with pytest.raises(ConfigError) as caught:
        parse(["--config", str(profile), "--checkpoint", "x.pt"])
    assert error in str(caught.value) and "\n" not in str(caught.value)


def test_weights_that_hold_nan_or_the_wrong_dtype_are_refused_in_one_line(tmp_path):
    from simeval.factories import build_policy
    from simeval.weights import load_weights

    ck = load_checkpoint(_write(tmp_path, seeds()["simeval"]))
    policy = build_policy(ck.policy_factory, ck.policy_kwargs, env())
    name = next(iter(ck.policy.keys(True, True)))
    broken = ck.policy.clone()
    broken[name].fill_(float("nan"))
    with pytest.raises(ValueError, match=r"weights for 'policy' hold NaN \(.*\): training diverged"):
        load_weights(policy, broken, "policy")
    broken[name] = broken[name].to(torch.int64)
    with pytest.raises(ValueError, match=r"dtype mismatch .*torch.int64 vs torch.float32"):
        load_weights(policy, broken, "policy")


def test_rsl_rls_params_of_the_wrong_kind_are_named(tmp_path):
    files = dict(seeds()["rsl_rl"])
    agent = yaml.safe_load(files["params/agent.yaml"])
    agent["actor"]["activation"] = ["elu"]
    files["params/agent.yaml"] = yaml.safe_dump(agent).encode()
    path = _write(tmp_path, files)
    with pytest.raises(CheckpointError, match=r"params/agent.yaml says activation \['elu'\]: rsl_rl's are elu, "):
        load_checkpoint(path)


@pytest.mark.parametrize(
    ("policy", "error"),
    [
        (None, "policy is missing"),
        ({}, "policy holds no weights"),
        ([1], "policy is a list, not a mapping of weights"),
        ({"net/0.weight": None}, "policy holds 'net/0.weight' -> nothing, not a weight's name and tensor"),
    ],
)
def test_a_simeval_checkpoint_without_its_weights_says_what_is_missing(tmp_path, policy, error):
    files = dict(seeds()["simeval"])
    data = torch.load(io.BytesIO(files[main_file(files)]), weights_only=True)
    data["policy"] = policy
    buffer = io.BytesIO()
    torch.save(data, buffer)
    path = _write(tmp_path, files, {main_file(files): buffer.getvalue()})
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(path)
    assert error in str(caught.value) and not internal(str(caught.value))


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("policy_factory", "rimeval.policies:gaussian_actor", "policy factory 'rimeval.policies:gaussian_actor' is "
         "not registered"),
        ("policy_kwargs", {"hidden": [-1]}, "cannot build a policy from policy_kwargs {'hidden': [-1]}"),
    ],
)  # fmt: skip
def test_a_simeval_checkpoint_naming_a_factory_it_cannot_build_answers_in_one_line(tmp_path, field, value, error):
    from simeval.factories import build_policy

    files = dict(seeds()["simeval"])
    data = torch.load(io.BytesIO(files[main_file(files)]), weights_only=True)
    data[field] = value
    buffer = io.BytesIO()
    torch.save(data, buffer)
    ck = load_checkpoint(_write(tmp_path, files, {main_file(files): buffer.getvalue()}))
    with pytest.raises(ValueError) as caught:
        build_policy(ck.policy_factory, ck.policy_kwargs, env())
    assert error in str(caught.value) and "\n" not in str(caught.value), caught.value


# -- dictionaries: inputs that try to run code, and inputs that try to exhaust memory ---------------------------------


@pytest.mark.parametrize("gadget", sorted(GADGETS))
def test_a_checkpoint_naming_code_runs_none_of_it(tmp_path, monkeypatch, gadget):
    """The oracle: the policy is refused in one line, no marker file appears, nothing named is imported."""
    from simeval.factories import build_policy

    factory, kwargs = GADGETS[gadget]
    marker = tmp_path / "ran"
    (tmp_path / "evilmod.py").write_text(EVIL_MODULE.replace(MARKER, str(marker)))
    monkeypatch.syspath_prepend(str(tmp_path))  # where a checkpoint's module name would be found, were it imported
    monkeypatch.chdir(tmp_path)
    shipped = seeds()["simeval"]["step_000125000.pt"]
    raw = gadget_checkpoint(shipped, factory, kwargs, str(marker), str(tmp_path / "evilmod.py"))
    path = _write(tmp_path / "ckpt", {"step_000125000.pt": raw})
    answers_in_one_line(path)
    ck = load_checkpoint(path)
    with pytest.raises(ValueError) as caught:
        build_policy(ck.policy_factory, ck.policy_kwargs, env())
    assert "\n" not in str(caught.value) and not internal(str(caught.value)), caught.value
    assert not marker.exists() and "evilmod" not in sys.modules


# A reader's memory: the bombs would take 10 GB and more; each answer must come within this heap.
BOMB_HEAP = 2 << 30
_BOMB_RUNNER = """
import json, resource, sys
import test_fuzz
answers = {}
for path in sys.argv[1:]:
    try:
        test_fuzz.answers_in_one_line(path)
        answers[path] = "answered"
    except BaseException as exc:  # the oracle's failure or the heap's: either is reported
        answers[path] = f"{type(exc).__name__}: {str(exc)[:300]}"
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
print(json.dumps({"answers": answers, "peak_bytes": peak}))
"""


def _bounded_bomb_heap() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_DATA, (BOMB_HEAP, BOMB_HEAP))


def test_memory_bombs_are_answered_within_a_bounded_heap(tmp_path):
    """Every bomb answered in one line by a process whose heap cannot hold any of them (docs/reliability.md)."""
    paths = {name: make(str(tmp_path / name), seeds()) for name, make in BOMBS.items()}
    proc = subprocess.run(
        [sys.executable, "-c", _BOMB_RUNNER, *paths.values()],
        capture_output=True, text=True, timeout=600, cwd=REPO, preexec_fn=_bounded_bomb_heap,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([REPO, os.path.join(REPO, "tests")])},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    failed = {name: report["answers"][path] for name, path in paths.items() if report["answers"][path] != "answered"}
    assert not failed, failed
    print(f"{len(paths)} bombs answered in one line; peak RSS {report['peak_bytes'] / 2**20:.0f} MiB")


@pytest.mark.parametrize("gadget", sorted(CFG_GADGETS))
@pytest.mark.parametrize("env", ["isaaclab:Simeval-Isaac-Cartpole", "mjlab:Mjlab-Velocity-Flat-Unitree-Go1"])
def test_a_suite_whose_cfg_names_code_is_refused_at_load(tmp_path, env, gadget):
    """Checked on the values alone, so without the simulator installed too (tests/isaac_lab checks the real cfg)."""
    from simeval.launch.config import ConfigError
    from simeval.launch.suite import load_suite

    suite = {"name": "g", "tasks": [{"env": env, "conditions": {"evil": {"cfg": CFG_GADGETS[gadget]}}}]}
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(suite))
    with pytest.raises(ConfigError) as caught:
        load_suite(str(path))
    message = _one_line(caught.value)
    assert message.startswith(f"{path}: tasks[0].conditions.evil.cfg"), message
    assert not internal(message), message
