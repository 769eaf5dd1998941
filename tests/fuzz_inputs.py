"""Inputs for the fuzzers (tests/test_fuzz.py): a valid file of every checkpoint format, the ways files get damaged,
and the oracle every answer must pass.

A seed of each format is made the way its library writes it (the library itself
where that is cheap: SB3's ``model.save``, skrl's model instantiator, rl_games'
ModelBuilder, torchrl's actor; rsl_rl's saved dict and run layout as its runner
writes them; simeval's shipped checkpoint; an ONNX export of it), all for
HalfCheetah-v5 (17 observations, 6 actions), so that a damaged file that still
loads is also built into a policy and run.

``SIMEVAL_FUZZ_EXAMPLES`` sets how many inputs each file fuzzer tries and
``SIMEVAL_FUZZ_LAUNCHER_EXAMPLES`` each launcher fuzzer (a process per input;
a tenth of the former unless set): ``make fuzz`` runs thousands, random; ``make
test`` the seeded slice.
"""

from __future__ import annotations

import io
import json
import os
import re
import zipfile

import torch
from hypothesis import settings
from hypothesis import strategies as st

OBS, ACT = 17, 6
EXAMPLES = int(os.environ.get("SIMEVAL_FUZZ_EXAMPLES", "0"))
LAUNCHER_EXAMPLES = int(os.environ.get("SIMEVAL_FUZZ_LAUNCHER_EXAMPLES", str(EXAMPLES // 10)))
LONG = EXAMPLES > 0 or LAUNCHER_EXAMPLES > 0


def fuzz_settings(default: int, launcher: bool = False) -> settings:
    """The seeded slice (``default`` examples, the same every run) or, with SIMEVAL_FUZZ_EXAMPLES (or
    SIMEVAL_FUZZ_LAUNCHER_EXAMPLES for a ``launcher`` fuzzer), a random long run.

    No deadline (an input may take seconds to load and build, a launcher run more), and every health check
    on: no fuzzer here needs one suppressed (their draws are small and fast, they filter nothing, and
    ``tmp_path_factory`` is session-scoped). A fuzzer that comes to need one suppresses that one, where it
    is defined, saying why."""
    return settings(
        max_examples=(LAUNCHER_EXAMPLES if launcher else EXAMPLES) or default,
        derandomize=not LONG,
        deadline=None,
        database=None,
    )


# What an internal error's text looks like: a message from Python itself, not one simeval wrote.
INTERNAL = re.compile(
    r"object has no attribute|local variable|referenced before assignment|unsupported operand|not subscriptable"
    r"|object is not (callable|iterable)|takes \d+ positional|unexpected keyword argument|index out of range"
    r"|NoneType|must be real number|cannot convert|division by zero|math domain error|maximum recursion"
    r"|unhashable type|not supported between instances|mat1 and mat2|size mismatch for|Traceback"
    r"|^'[^']*'$|^\d+$|^KeyError|^TypeError|^AttributeError|^IndexError|^RuntimeError: "
)


def internal(message: str) -> bool:
    """Whether one line of error text reads like Python's own words rather than simeval's."""
    return bool(INTERNAL.search(message))


# -- seeds: one valid file per format -------------------------------------------------------------


def _save(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _linear(out: int, inp: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(out, inp, generator=gen) * 0.1, torch.zeros(out)


def seed_simeval() -> dict[str, bytes]:
    from simeval.checkpoints.shipped import shipped_checkpoint

    return {"step_000125000.pt": open(shipped_checkpoint(), "rb").read()}


def seed_rsl_rl() -> dict[str, bytes]:
    """``model_7.pt`` as rsl_rl 5's OnPolicyRunner saves it, and ``params/agent.yaml`` as Isaac Lab writes it."""
    gen = torch.Generator().manual_seed(0)
    w0, b0 = _linear(32, OBS, gen)
    w1, b1 = _linear(ACT, 32, gen)
    actor = {
        "obs_normalizer._mean": torch.zeros(1, OBS),
        "obs_normalizer._var": torch.ones(1, OBS),
        "obs_normalizer._std": torch.ones(1, OBS),
        "obs_normalizer.count": torch.tensor(10),
        "mlp.0.weight": w0, "mlp.0.bias": b0, "mlp.2.weight": w1, "mlp.2.bias": b1,
        "distribution.std_param": torch.ones(ACT),
    }  # fmt: skip
    data = {"actor_state_dict": actor, "critic_state_dict": {}, "optimizer_state_dict": {}, "iter": 7, "infos": None}
    agent = "actor:\n  hidden_dims: [32]\n  activation: elu\n  obs_normalization: true\nclip_actions: null\n"
    return {"model_7.pt": _save(data), "params/agent.yaml": agent.encode()}


def seed_skrl() -> dict[str, bytes]:
    """``checkpoints/agent_400.pt`` as skrl's agent writes it (model instantiator, RunningStandardScaler)."""
    import gymnasium as gym
    import numpy as np
    from skrl.resources.preprocessors.torch import RunningStandardScaler
    from skrl.utils.model_instantiators.torch import gaussian_model

    torch.manual_seed(0)
    obs = gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
    act = gym.spaces.Box(-1.0, 1.0, (ACT,), np.float32)
    net = [{"name": "net", "input": "OBSERVATIONS", "layers": [32], "activations": "elu"}]
    policy = gaussian_model(observation_space=obs, action_space=act, device="cpu", network=net, output="ACTIONS")
    policy.init_state_dict(role="policy")
    scaler = RunningStandardScaler(size=obs, device="cpu")
    data = {"policy": policy.state_dict(), "observation_preprocessor": scaler.state_dict()}
    return {"checkpoints/agent_400.pt": _save(data)}


def seed_rl_games() -> dict[str, bytes]:
    """``nn/last_x_ep_2_rew_-1.0.pth`` as rl_games writes it (its ModelBuilder's continuous A2C)."""
    from rl_games.algos_torch.model_builder import ModelBuilder
    from test_format_rl_games import rl_games_config

    torch.manual_seed(0)
    params = rl_games_config("x", "unused")["params"]
    shapes = {"actions_num": ACT, "input_shape": (OBS,), "num_seqs": 1, "value_size": 1, "normalize_input": True}
    net = ModelBuilder().load(params).build(shapes)
    data = {"model": net.state_dict(), "epoch": 2, "frame": 1024, "last_mean_rewards": -1.0}
    return {"nn/last_x_ep_2_rew_-1.0.pth": _save(data)}


def seed_torchrl() -> dict[str, bytes]:
    """A torchrl ProbabilisticActor's state_dict and VecNorm statistics, as a torchrl training script saves them."""
    from tensordict.nn import AddStateIndependentNormalScale, TensorDictModule
    from torchrl.data import Bounded
    from torchrl.modules import MLP, ProbabilisticActor, TanhNormal

    torch.manual_seed(0)
    spec = Bounded(-1.0, 1.0, shape=(ACT,))
    net = torch.nn.Sequential(
        MLP(in_features=OBS, out_features=ACT, num_cells=[32]), AddStateIndependentNormalScale(ACT)
    )
    actor = ProbabilisticActor(
        TensorDictModule(net, in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"],
        spec=spec,
        distribution_class=TanhNormal,
    )
    return {"actor_3000.pt": _save({"actor": actor.state_dict(), "frames": 3000})}


def seed_sb3() -> dict[str, bytes]:
    """``model.zip`` as SB3's ``model.save`` writes it (PPO, MlpPolicy, untrained)."""
    import gymnasium as gym
    from stable_baselines3 import PPO

    model = PPO("MlpPolicy", gym.make("HalfCheetah-v5"), policy_kwargs={"net_arch": [32]}, seed=0, device="cpu")
    buf = io.BytesIO()
    model.save(buf)
    return {"model.zip": buf.getvalue()}


def seed_onnx(tmp_dir: str) -> dict[str, bytes]:
    """The shipped checkpoint exported by ``python -m simeval.export --to onnx``."""
    from simeval.checkpoints.shipped import shipped_checkpoint
    from simeval.export import export_checkpoint

    out = os.path.join(tmp_dir, "policy.onnx")
    export_checkpoint(shipped_checkpoint(), "onnx", out)
    return {"policy.onnx": open(out, "rb").read()}


SEEDS = {
    "simeval": seed_simeval,
    "rsl_rl": seed_rsl_rl,
    "skrl": seed_skrl,
    "rl_games": seed_rl_games,
    "torchrl": seed_torchrl,
    "sb3": seed_sb3,
    "onnx": seed_onnx,
}


def main_file(files: dict[str, bytes]) -> str:
    """The checkpoint among a seed's files (the others are its run's sidecars)."""
    return next(name for name in files if not name.endswith(".yaml"))


# -- damage -----------------------------------------------------------------------------------------


def flip(raw: bytes, flips: list[tuple[int, int]]) -> bytes:
    out = bytearray(raw)
    for position, bit in flips:
        out[position % len(out)] ^= 1 << bit
    return bytes(out)


def swap_members(raw: bytes, i: int, j: int) -> bytes:
    """The zip with the contents of two members exchanged (names and order kept)."""
    with zipfile.ZipFile(io.BytesIO(raw)) as z:
        infos = z.infolist()
        data = [z.read(info) for info in infos]
    i, j = i % len(infos), j % len(infos)
    data[i], data[j] = data[j], data[i]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as out:
        for info, blob in zip(infos, data, strict=True):
            out.writestr(info, blob)
    return buf.getvalue()


def odd_values() -> st.SearchStrategy:
    """Values of the wrong kind for any field: numbers out of range, text, containers, None."""
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=12),
    )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
        max_leaves=6,
    )


def odd_tensor(draw, like: torch.Tensor) -> torch.Tensor:
    """A tensor where ``like`` was: another shape, another dtype, empty, non-finite, or a huge shape on one element."""
    kind = draw(st.sampled_from(["shape", "dtype", "empty", "nan", "huge", "scalar"]))
    if kind == "shape":
        dims = draw(st.lists(st.integers(1, 40), min_size=1, max_size=3))
        return torch.zeros(dims)
    if kind == "dtype":
        dtype = draw(st.sampled_from([torch.int64, torch.bool, torch.float16, torch.complex64, torch.uint8]))
        return torch.zeros(like.shape, dtype=dtype)
    if kind == "empty":
        return torch.zeros(0)
    if kind == "nan":
        return torch.full(like.shape, float("nan"))
    if kind == "huge":  # a shape of 10^10 held by one element (stride 0): nothing may try to materialise it
        return torch.zeros(1).expand(10**10)
    return torch.tensor(3.0)


def mutate_structure(draw, data):
    """``data`` (a loaded torch checkpoint) with one leaf replaced by a value of the wrong kind, or a key dropped."""
    paths = []

    def walk(node, trail):
        if isinstance(node, dict):
            for key, value in node.items():
                paths.append((*trail, key))
                walk(value, (*trail, key))

    walk(data, ())
    if not paths:
        return data
    path = draw(st.sampled_from(paths))
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    current = parent[path[-1]]
    action = draw(st.sampled_from(["replace", "drop"]))
    if action == "drop":
        del parent[path[-1]]
    elif isinstance(current, torch.Tensor):
        parent[path[-1]] = odd_tensor(draw, current)
    else:
        parent[path[-1]] = draw(odd_values())
    return data


def plain_json(value) -> bool:
    try:
        json.dumps(value, allow_nan=True)
        return True
    except (TypeError, ValueError):
        return False


# -- dictionaries: inputs that try to run code, and inputs that try to exhaust memory -------------------------------
# A marker file is what running code would leave; MARKER is replaced by its path.
MARKER = "@MARKER@"
_TOUCH = f"open({MARKER!r}, 'w').close()"

# policy_factory and policy_kwargs a simeval checkpoint may carry: stdlib functions that run what they are given,
# old simeval names, modules beside the file, registered factories given callables' names.
GADGETS = {
    "timeit-setup": ("timeit:timeit", {"setup": _TOUCH, "number": 0}),
    "timeit-stmt": ("timeit:repeat", {"stmt": _TOUCH, "repeat": 1, "number": 1}),
    "os-system": ("os:system", {"command": f"touch {MARKER}"}),
    "subprocess": ("subprocess:getoutput", {"cmd": f"touch {MARKER}"}),
    "runpy": ("runpy:run_path", {"path_name": "@EVIL_PY@"}),
    "import-module": ("importlib:import_module", {"name": "evilmod"}),
    "builtins-exec": ("builtins:exec", {"source": _TOUCH}),
    "pickle-loads": ("pickle:loads", {"data": "cos\nsystem\n(S'true'\ntR."}),
    "code-interact": ("code:interact", {"banner": "x", "local": {}}),
    "module-in-cwd": ("evilmod:actor", {}),
    "dotted-attribute": ("os.path:exists", {"path": "/"}),
    "old-simeval-name": ("simeval.launch.policies:os", {}),
    "simeval-not-a-factory": ("simeval.hooks:worker_init", {"user_init": "evilmod:actor"}),
    "registered-callable-kwarg": ("simeval.policies:gaussian_actor", {"hidden": "os:system"}),
    "registered-extra-kwarg": ("simeval.policies:gaussian_actor", {"hidden": [16], "setup": _TOUCH}),
}
EVIL_MODULE = f"{_TOUCH}\ndef actor(env, **kwargs):\n    {_TOUCH}\n"


def gadget_checkpoint(shipped: bytes, factory: str, kwargs: dict, marker: str, evil_py: str) -> bytes:
    """The shipped checkpoint (``shipped``: its bytes) naming ``factory`` with ``kwargs``, markers filled in."""
    data = torch.load(io.BytesIO(shipped), weights_only=True)
    text = json.dumps(kwargs).replace(MARKER, marker).replace("@EVIL_PY@", evil_py)
    data["policy_factory"], data["policy_kwargs"] = factory, json.loads(text)
    return _save(data)


def _recompressed(raw: bytes) -> bytes:
    """A zip's members re-deflated (torch writes them stored; SB3 deflates)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(raw)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    return out.getvalue()


def _bomb_expanded(root: str, seeds: dict) -> str:
    data = torch.load(io.BytesIO(seeds["simeval"]["step_000125000.pt"]), weights_only=True)
    data["policy"]["bomb"] = torch.zeros(1).expand(50000, 50000)
    return _write_file(root, "step_1.pt", _save(data))


def _bomb_overlapping(root: str, seeds: dict) -> str:
    data = torch.load(io.BytesIO(seeds["simeval"]["step_000125000.pt"]), weights_only=True)
    data["policy"]["bomb"] = torch.zeros(1 << 17).as_strided((1 << 16, 1 << 16), (1, 1))
    return _write_file(root, "step_1.pt", _save(data))


def _bomb_deflated_torch(root: str, seeds: dict) -> str:
    data = torch.load(io.BytesIO(seeds["simeval"]["step_000125000.pt"]), weights_only=True)
    data["policy"]["padding"] = torch.zeros(64 << 20)  # 256 MiB of zeros, 256 KiB deflated
    return _write_file(root, "step_1.pt", _recompressed(_save(data)))


def _bomb_sb3_member(root: str, seeds: dict) -> str:
    with zipfile.ZipFile(io.BytesIO(seeds["sb3"]["model.zip"])) as z:
        members = {info.filename: z.read(info) for info in z.infolist()}
    members["data"] = members["data"] + b" " * (256 << 20)  # JSON with 256 MiB of trailing blanks
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, blob in members.items():
            z.writestr(name, blob)
    return _write_file(root, "model.zip", out.getvalue())


def _bomb_sparse(header: bytes, name: str) -> callable:
    def make(root: str, seeds: dict) -> str:
        path = _write_file(root, name, header)
        with open(path, "r+b") as f:
            f.truncate(4 << 30)  # 4 GiB that take no disk
        old = os.path.getmtime(path) - 60
        os.utime(path, (old, old))
        return path

    return make


def _bomb_yaml(root: str, seeds: dict) -> str:
    levels = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(8)
    )
    for name, raw in seeds["rsl_rl"].items():
        _write_file(root, name, raw)
    _write_file(root, "params/agent.yaml", levels.encode())
    return os.path.join(root, "model_7.pt")


def _bomb_skrl_output(root: str, seeds: dict) -> str:
    for name, raw in seeds["skrl"].items():
        _write_file(root, name, raw)
    agent = (
        "models:\n  policy:\n    network:\n      - name: net\n        input: OBSERVATIONS\n        layers: [32]\n"
        "        activations: elu\n    output: ACTIONS + 0 * (10 ** 10 ** 8)\n"
    )
    _write_file(root, "params/agent.yaml", agent.encode())
    return os.path.join(root, "checkpoints", "agent_400.pt")


def _bomb_onnx(root: str, seeds: dict) -> str:
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    shape = numpy_helper.from_array(np.array([100000, 100000], dtype=np.int64), "shape")
    graph = helper.make_graph(
        [helper.make_node("ConstantOfShape", ["shape"], ["big"]), helper.make_node("Identity", ["obs"], ["a"])],
        "policy",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", OBS])],
        [helper.make_tensor_value_info("big", TensorProto.FLOAT, None)],
        initializer=[shape],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return _write_file(root, "policy.onnx", model.SerializeToString())


def _onnx_external(root: str, seeds: dict) -> str:
    """An ONNX policy whose weights live in another file (here /dev/zero: read, it would never end)."""
    from onnx import TensorProto, helper

    weights = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[OBS], data_location=TensorProto.EXTERNAL)
    weights.external_data.add(key="location", value="/dev/zero")
    graph = helper.make_graph(
        [helper.make_node("Add", ["obs", "w"], ["actions"])],
        "policy",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", OBS])],
        [helper.make_tensor_value_info("actions", TensorProto.FLOAT, ["batch", OBS])],
        initializer=[weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return _write_file(root, "policy.onnx", model.SerializeToString())


def _bomb_kwargs(root: str, seeds: dict) -> str:
    data = torch.load(io.BytesIO(seeds["simeval"]["step_000125000.pt"]), weights_only=True)
    data["policy_kwargs"] = {"hidden": [60000, 60000]}  # 14 GB of float32 once built
    return _write_file(root, "step_1.pt", _save(data))


# Files whose reading, or the policy they describe, would take gigabytes. Each makes its files under a directory.
BOMBS = {
    "expanded-tensor": _bomb_expanded,
    "overlapping-strides": _bomb_overlapping,
    "deflated-torch-zip": _bomb_deflated_torch,
    "sb3-member": _bomb_sb3_member,
    "4gib-junk": _bomb_sparse(b"", "step_2.pt"),
    "4gib-zip-header": _bomb_sparse(b"PK\x03\x04", "step_3.pt"),
    "4gib-legacy-pickle": _bomb_sparse(b"\x80\x02", "step_4.pt"),
    "4gib-onnx-header": _bomb_sparse(b"\x08\x07", "huge.onnx"),
    "yaml-aliases": _bomb_yaml,
    "skrl-output": _bomb_skrl_output,
    "onnx-constant-of-shape": _bomb_onnx,
    "onnx-external-data": _onnx_external,
    "policy-kwargs": _bomb_kwargs,
}


def _write_file(root: str, name: str, raw: bytes) -> str:
    path = os.path.join(root, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(raw)
    return path


# A suite condition's cfg overrides that name code (Isaac Lab imports and calls a module:function set into a term's
# func): each must be refused when the suite is loaded, whatever the task.
CFG_GADGETS = {
    "event-func": {"events.add_pole_mass.func": "os:system"},
    "module-in-cwd": {"events.reset.func": "evilmod:actor"},
    "lambda": {"rewards.alive.func": "lambda env: __import__('os').system('true')"},
    "class-type": {"actions.joint_effort.class_type": "subprocess:Popen"},
    "nested-mapping": {"events": {"push": {"func": "os:system"}}},
    "callable-string-value": {"scene.robot.spawn.usd_path": "builtins:exec"},
}
