"""LaunchConfig: every setting of ``python -m simeval.launch``, from YAML and flags.

A YAML profile (``--config launchers/....yaml``) sets any field; a flag given
on the command line overrides it. Field names use underscores; YAML may use
dashes too. Unknown YAML keys are an error, never silently ignored. Each
field's default and help text live here only: ``cli.py`` makes the flags from them.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from typing import Any

from simeval.backends import NAMES as BACKENDS  # where rounds run: thread, process, ray
from simeval.checkpoints.bounds import parse_size
from simeval.checkpoints.formats import names as _format_names
from simeval.envs.simulators import env_backends, env_id_forms, registered
from simeval.policy_kinds.remote import REMOTE_FACTORY, check_keys, check_url
from simeval.sequential import DESIGNS
from simeval.yaml_files import YamlError, read_yaml

LOGGERS = ("csv", "tensorboard", "wandb", "mlflow")
LAUNCHERS = ("local", "docker")
SOURCES = ("checkpoint", "watch", "serve", "policy_server")
CHECKPOINT_FORMATS = tuple(_format_names())
# A site's default device (slurm/eval.sh sets cuda:0 when the job has a GPU), used
# only when neither a flag nor the profile names one.
DEVICE_ENV = "SIMEVAL_DEFAULT_DEVICE"


class ConfigError(ValueError):
    """Bad launcher input; the message says what is wrong and what to do."""


def _opt(default: Any, help: str, **meta: Any) -> Any:
    factory = {"default_factory": default} if callable(default) else {"default": default}
    return field(metadata={"help": help, **meta}, **factory)


@dataclass
class LaunchConfig:
    """The launcher's settings: one field per flag (``--num-envs`` sets ``num_envs``) and YAML profile key."""

    backend: str = _opt("thread", f"where evaluation runs: {', '.join(BACKENDS)}")
    num_gpus: float = _opt(0, "GPUs each Ray worker asks for")
    num_cpus: float = _opt(1, "CPUs each Ray worker asks for")
    workers: int = _opt(
        1,
        "Ray workers: --watch evaluates up to this many checkpoints at once; --checkpoint splits its episodes "
        "over them (same numbers as one worker)",
    )
    max_restarts: int = _opt(3, "Ray: times a worker's share of a round is re-run after the worker died")
    device: str | None = _opt(None, "eval device, e.g. cuda:1 (process backend: only that GPU is visible)")
    env: str = _opt(
        "HalfCheetah-v5",
        f"{env_id_forms()} (default: the checkpoint's, else HalfCheetah-v5)",
        show_default=False,
    )
    env_backend: str | None = _opt(
        None,
        f"the simulator of a gymnasium id: {', '.join(env_backends())} "
        "(default: native for the tasks it has, else gymnasium)",
    )
    num_envs: int = _opt(8, "batched sub-envs")
    cameras: list = _opt(
        list,
        f"cameras each sub-env observes ({', '.join(s.title for s in registered() if s.cameras)} envs; e.g. track): "
        "the policy then reads observation.state and observation.images.<camera>, float (3, H, W) in [0, 1]",
        nargs="+",
        metavar="CAMERA",
    )
    image_size: int = _opt(64, "--cameras: the images' side in pixels")
    frame_stack: int = _opt(1, "--cameras: each camera's last N images, stacked along the channels")
    episodes: int = _opt(16, "complete episodes per evaluation")
    time_budget: float | None = _opt(
        None,
        "seconds an evaluation round may take, instead of --episodes: each round runs the most whole waves of "
        "--num-envs complete episodes that fit, measured on the round before (the first runs one wave)",
    )
    max_steps: int | None = _opt(1000, "episode cap")
    seed: int | None = _opt(0, "env seed, the same every round")
    init_fn: str | None = _opt(
        None,
        "module:function run first, before torch"
        + "".join(f"; {sim.title}: {sim.init_fn}" for sim in registered() if sim.init_fn),
    )
    policy: str | None = _opt(None, "module:factory building the policy from the env (default: the checkpoint's)")
    policy_kwargs: dict = _opt(dict, "JSON keyword arguments for --policy", json=True)
    policy_server: str | None = _opt(
        None,
        "evaluate the policy served at ws://HOST:PORT (openpi's WebSocket + msgpack protocol, e.g. python -m "
        "simeval.serve_policy) instead of a checkpoint's; its token, if it asks for one, from "
        "$SIMEVAL_POLICY_SERVER_TOKEN",
        metavar="URL",
    )
    policy_server_timeout: float = _opt(
        30.0, "--policy-server: seconds to connect, or to get one step's replies, before the round fails"
    )
    policy_server_chunk: int | None = _opt(
        None, "--policy-server: actions per reply (default: the server's metadata action_chunk, else 1)"
    )
    policy_server_keys: dict = _opt(
        dict, '--policy-server: JSON {"state": KEY, "actions": KEY}: the request and reply keys', json=True
    )
    policy_server_max_message: str = _opt("16M", "--policy-server: the largest message read from the server")
    info_keys: list = _opt(
        list,
        "keys under the step's 'next' entry (e.g. success) whose value at each episode's end is averaged "
        "(eval/<key>; eval/success_rate for success, is_success, success_rate)",
        nargs="+",
        metavar="KEY",
    )
    checkpoint: str | None = _opt(None, "evaluate this checkpoint once")
    watch: str | None = _opt(None, "evaluate every checkpoint written to this directory, once, in step order")
    format: str | None = _opt(
        None, f"checkpoint format, when recognising it by content is not wanted: {', '.join(CHECKPOINT_FORMATS)}"
    )
    max_checkpoint_size: str = _opt(
        "32G",
        "largest checkpoint file read, and the most its zip members may expand to (e.g. 64G, 500M); a bigger "
        "file is refused unread (docs/security.md)",
    )
    serve: str | None = _opt(None, "serve a named Ray evaluator that training reaches with simeval.connect(NAME)")
    suite: str | None = _opt(
        None,
        "a suite file (tasks x conditions, see suites/): evaluate each --checkpoint or --watch checkpoint on every "
        "cell, one results.jsonl line per cell",
    )
    until_decided: bool = _opt(
        False,
        "--suite: compare --checkpoint (B) with --baseline (A) look by look on common seeds, each cell until its "
        "verdict is reached (better, worse; equivalent with --margin) or its budget is spent; writes OUT/a and OUT/b",
    )
    select_best: bool = _opt(
        False,
        "choose the best of the --watch checkpoints (or of two or more --checkpoint) look by look on common seeds: "
        "checkpoints shown worse than the leader are eliminated, until one is left, all left are within --margin, "
        "or --max-episodes is spent",
    )
    baseline: str | None = _opt(
        None, "--until-decided: the baseline checkpoint A that --checkpoint (B) is compared with"
    )
    until_precise: str | float | None = _opt(
        None,
        "--suite: evaluate --checkpoint look by look, each cell until its mean's anytime-valid interval is this "
        "narrow: a half-width in the task's units (e.g. 5) or a percentage of |mean| (e.g. 5%)",
        metavar="W",
    )
    look_every: int | None = _opt(
        None,
        "--until-decided, --until-precise: episodes per look, per cell and per checkpoint (default: the task's "
        "num_envs, one episode per sub-env; exactly that where sub-envs share one reset generator)",
    )
    max_episodes: int | None = _opt(
        None,
        "--until-decided, --until-precise: the most episodes per cell and per checkpoint, a multiple of the look "
        "(default: the suite task's episodes)",
    )
    margin: float = _opt(
        0.0, "--until-decided: equivalence margin in the task's units: a cell whose interval lies inside it stops"
    )
    alpha: float = _opt(
        0.05, "--until-decided, --until-precise: the error over all cells and every look (each cell gets alpha/cells)"
    )
    design: str = _opt(
        "anytime",
        "--until-decided, --until-precise: anytime (confidence sequences, valid at any look: a resume may raise "
        "--max-episodes) or planned (a group-sequential design over exactly these looks and budget: fewer "
        "episodes on average at equal power; cells with declared bounds keep their anytime sequence)",
    )
    out: str | None = _opt(None, "results directory (default: runs/<timestamp>)")
    append: bool = _opt(
        False,
        "add this run's lines to an --out whose results.jsonl holds lines of other settings (episodes, seed, "
        "num_envs, max_steps, env, suite, conditions, ...); without it such a run is refused",
    )
    logger: str = _opt("csv", f"metrics logger besides results.jsonl: {', '.join(LOGGERS)}")
    video: bool = _opt(
        False,
        "record an MP4 of each round's first episode (sub-env 0) into OUT/videos/, named in the summary; "
        "one frame a step: about 6 ms each with software OpenGL (a 1000-step episode: +9 s on 2 vCPUs)",
    )
    verbose: bool = _opt(False, "show known third-party warnings and Ray's start-up and INFO logs (hidden by default)")
    until_step: int | None = _opt(None, "--watch: stop after a checkpoint at or past this step")
    retry_failed: bool = _opt(
        False,
        "on a resume, evaluate again the checkpoints (--suite: cells) whose newest line in results.jsonl "
        "failed; without it a resume retries only failures marked retry: resume (a plan mismatch, a lost worker)",
    )
    poll_interval: float = _opt(2.0, "--watch: seconds between directory scans")
    start_timeout: float = _opt(120.0, "seconds a worker may take to start")
    round_timeout: float | None = _opt(
        None,
        "seconds an evaluation round may run before it fails and its worker is replaced (a hung policy or env); "
        "a round that starts its worker also gets --start-timeout (default: 1 hour before any round was measured, "
        "then max(10 min, 20x the round time the measured env step time predicts))",
    )
    obs_norm: bool = _opt(True, "evaluate without the checkpoint's VecNorm statistics", flag="--no-obs-norm")
    launcher: str = _opt("local", f"where the launcher runs: {', '.join(LAUNCHERS)}")
    image: str | None = _opt(None, "--launcher docker: the eval image (containers/Dockerfile)")
    gpus: str | None = _opt(None, "--launcher docker: host GPUs for the container, e.g. 1 or 0,2 or all")
    network: str | None = _opt(
        None,
        "--launcher docker: container network, e.g. host or a network's name (default: none; the engine's "
        "default network for --logger wandb or mlflow)",
    )
    policy_image: str | None = _opt(
        None,
        "--launcher docker: serve --checkpoint's policy (python -m simeval.serve_policy) from a container of its "
        "own, of this image; the simulators' container reaches it on their shared loopback (--policy-server)",
    )
    policy_gpus: str | None = _opt(None, "--policy-image: host GPUs for the policy's container, e.g. 0")
    pass_env: list = _opt(
        list,
        "--launcher docker: host environment variables to pass into the container (none by default besides "
        "WANDB_* for --logger wandb, MLFLOW_* for --logger mlflow)",
        nargs="+",
        metavar="NAME",
        action="extend",
    )

    def _check_cameras(self) -> None:
        if not self.cameras:
            for name, default in (("image_size", 64), ("frame_stack", 1)):
                if getattr(self, name) != default:
                    raise ConfigError(f"--{name.replace('_', '-')} sets the camera images: add --cameras CAMERA.")
            return
        if not 1 <= self.image_size <= 1024:
            raise ConfigError(f"--image-size must be 1..1024 pixels, got {self.image_size}.")
        if self.frame_stack < 1:
            raise ConfigError(f"--frame-stack must be >= 1, got {self.frame_stack}.")
        if self.policy_server and self.frame_stack > 1:
            raise ConfigError(
                "--frame-stack: a policy server is sent each camera's current image and keeps its own history."
            )

    def validate(self) -> LaunchConfig:
        """Check the settings together and normalise ``info_keys``; returns ``self``, or raises :class:`ConfigError`."""
        for name, choices in (("backend", BACKENDS), ("logger", LOGGERS), ("launcher", LAUNCHERS), ("design", DESIGNS)):
            if getattr(self, name) not in choices:
                raise ConfigError(f"unknown {name} {getattr(self, name)!r}: choose one of {', '.join(choices)}.")
        if self.format is not None and self.format not in CHECKPOINT_FORMATS:
            raise ConfigError(
                f"unknown checkpoint format {self.format!r}: choose one of {', '.join(CHECKPOINT_FORMATS)}."
            )
        if self.env_backend is not None and self.env_backend not in env_backends():
            choices = ", ".join(env_backends())
            raise ConfigError(f"unknown env backend {self.env_backend!r}: choose one of {choices}.")
        if self.launcher != "docker":
            for name in ("image", "gpus", "network", "pass_env", "policy_image", "policy_gpus"):
                if getattr(self, name) not in (None, []):
                    raise ConfigError(f"--{name.replace('_', '-')} is a container setting: it needs --launcher docker.")
        elif not self.image:
            raise ConfigError(
                "--launcher docker needs --image IMAGE (build one: docker build -f containers/Dockerfile -t IMAGE .)."
            )
        sources = [k for k in SOURCES if getattr(self, k)]
        if len(sources) > 1:
            raise ConfigError("give one source of weights, not " + " and ".join(f"--{s}" for s in sources) + ".")
        if self.suite and self.serve:
            raise ConfigError("--suite evaluates checkpoints (--checkpoint or --watch), not --serve.")
        if self.serve and self.backend != "ray":
            raise ConfigError("--serve needs --backend ray (a named Ray actor is what training connects to).")
        if self.workers < 1:
            raise ConfigError(f"--workers must be >= 1, got {self.workers}.")
        if self.max_restarts < 0:
            raise ConfigError(f"--max-restarts must be >= 0, got {self.max_restarts}.")
        if self.workers > 1 and self.backend != "ray":
            raise ConfigError(
                f"--workers {self.workers} needs --backend ray (the thread and process backends run one worker)."
            )
        if self.workers > 1 and self.serve:
            raise ConfigError("--serve runs one named worker: --workers is for --checkpoint and --watch.")
        if not (0 <= self.num_cpus < math.inf and 0 <= self.num_gpus < math.inf):
            raise ConfigError("--num-cpus and --num-gpus must be numbers >= 0.")
        for name in ("poll_interval", "start_timeout"):
            if not 0 < getattr(self, name) < math.inf:
                raise ConfigError(
                    f"--{name.replace('_', '-')} must be a number of seconds > 0, got {getattr(self, name)}."
                )
        if not isinstance(self.policy_kwargs, dict):
            raise ConfigError(
                f"--policy-kwargs must be a JSON object of keyword arguments, got {self.policy_kwargs!r:.60}."
            )
        for name in ("num_envs", "episodes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}.")
        self._check_cameras()
        if self.max_steps is not None and self.max_steps < 1:
            raise ConfigError(f"--max-steps must be >= 1, got {self.max_steps}.")
        if self.time_budget is not None:
            number = isinstance(self.time_budget, (int, float)) and not isinstance(self.time_budget, bool)
            if not number or not 0 < self.time_budget < float("inf"):
                raise ConfigError(f"--time-budget must be a number of seconds > 0, got {self.time_budget!r}.")
            if self.serve:
                raise ConfigError("--time-budget sizes the rounds this launcher runs: --serve's rounds are training's.")
        self.max_checkpoint_bytes  # noqa: B018 - a size the flag's words cannot give fails here, in one line
        if self.round_timeout is not None:
            number = isinstance(self.round_timeout, (int, float)) and not isinstance(self.round_timeout, bool)
            if not number or not 0 < self.round_timeout < float("inf"):
                raise ConfigError(
                    f"--round-timeout must be a finite number of seconds > 0 (leave it out for the default rule), "
                    f"got {self.round_timeout!r}."
                )
            if self.serve:
                raise ConfigError("--round-timeout bounds the rounds this launcher runs; --serve's are training's.")
        self._validate_adaptive()
        self._validate_policy_server()
        self.info_keys = _info_keys(self.info_keys)
        for name in ("init_fn", "policy"):
            value = getattr(self, name)
            if value is not None and value.count(":") != 1:
                raise ConfigError(
                    f"--{name.replace('_', '-')} must look like 'package.module:function', got {value!r}."
                )
        return self

    def _validate_policy_server(self) -> None:
        """``--policy-server``: its address and settings checked; the policy it names is the remote client's."""
        if self.policy_server is None:
            return
        if self.policy not in (None, REMOTE_FACTORY) or (self.policy is None and self.policy_kwargs):
            raise ConfigError("--policy-server is the policy: leave --policy and --policy-kwargs out.")
        number = isinstance(self.policy_server_timeout, (int, float)) and not isinstance(
            self.policy_server_timeout, bool
        )
        if not number or not 0 < self.policy_server_timeout < math.inf:
            raise ConfigError(f"--policy-server-timeout must be seconds > 0, got {self.policy_server_timeout!r}.")
        if self.policy_server_chunk is not None and self.policy_server_chunk < 1:
            raise ConfigError(f"--policy-server-chunk must be >= 1, got {self.policy_server_chunk}.")
        try:
            url, keys = check_url(self.policy_server), check_keys(self.policy_server_keys or None)
            max_bytes = parse_size(self.policy_server_max_message)
        except ValueError as exc:
            raise ConfigError(f"--policy-server: {exc}") from None
        self.policy = REMOTE_FACTORY  # recorded in each line's settings (the token never is)
        self.policy_kwargs = {
            "url": url,
            "chunk": self.policy_server_chunk,
            "keys": keys,
            "timeout_s": float(self.policy_server_timeout),
            "max_message_bytes": max_bytes,
        }

    def _validate_adaptive(self) -> None:
        """The adaptive flags (``--until-decided``, ``--until-precise`` and theirs), each error one line."""
        rule = self.adaptive
        if self.until_decided and self.until_precise is not None:
            raise ConfigError("give --until-decided (B against A) or --until-precise (one checkpoint), not both.")
        if self.until_decided and not (self.baseline and self.suite):
            raise ConfigError("--until-decided needs --baseline A and --suite FILE (beside --checkpoint B).")
        if self.baseline and not self.until_decided:
            raise ConfigError(
                "--until-precise evaluates one checkpoint: --baseline is --until-decided's A."
                if self.until_precise is not None
                else "--baseline is the checkpoint A of --until-decided: add --until-decided."
            )
        if self.until_precise is not None:
            self.precision  # noqa: B018 - a width the flag's words cannot give fails here, in one line
            if not self.suite:
                raise ConfigError("--until-precise needs --suite FILE (beside --checkpoint).")
        if rule is None:
            given = [f"--{n.replace('_', '-')}" for n in ("look_every", "max_episodes") if getattr(self, n) is not None]
            given += ["--margin"] * (self.margin != 0.0) + ["--alpha"] * (self.alpha != 0.05)
            given += ["--design"] * (self.design != "anytime")
            if given:
                raise ConfigError(f"{', '.join(given)} set the looks of --until-decided or --until-precise: add one.")
            return
        if self.source is None:
            raise ConfigError(f"--{rule} needs --checkpoint FILE: the checkpoint it evaluates.")
        if self.source != "checkpoint":
            raise ConfigError(f"--{rule} evaluates the checkpoint --checkpoint names, not --{self.source}.")
        if self.until_decided and self.launcher == "docker":
            raise ConfigError(
                "--until-decided runs with --launcher local: the Docker launcher does not mount --baseline."
            )
        if self.time_budget is not None:
            raise ConfigError(f"--{rule} sizes its rounds in looks (--look-every): leave --time-budget out.")
        if self.logger != "csv":
            raise ConfigError(f"--{rule} writes its looks to results.jsonl only: leave --logger {self.logger} out.")
        for name in ("look_every", "max_episodes"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {value}.")
        if self.look_every is not None and self.max_episodes is not None and self.max_episodes < self.look_every:
            raise ConfigError(
                f"--max-episodes {self.max_episodes} < --look-every {self.look_every}: the budget must hold one look."
            )
        if not 0 < self.alpha < 1:
            raise ConfigError(f"--alpha must be in (0, 1), got {self.alpha}.")
        if not (math.isfinite(self.margin) and self.margin >= 0):
            raise ConfigError(f"--margin must be a finite number >= 0, got {self.margin}.")
        if self.margin and not self.until_decided:
            raise ConfigError("--margin is --until-decided's equivalence margin; --until-precise has none.")

    @property
    def mode(self) -> str:
        """The one name of what the run does, for the launcher's table of modes.

        ``"serve"``, ``"select-best"``, ``"until-decided"``, ``"until-precise"``, ``"suite"``, or the source of a
        plain run: ``"checkpoint"``, ``"policy-server"``, ``"watch"`` (also without a source: the launcher then
        watches the shipped training run).
        """
        if self.serve:
            return "serve"
        if self.select_best:
            return "select-best"
        if self.adaptive:
            return self.adaptive
        if self.suite:
            return "suite"
        return (self.source or "watch").replace("_", "-")

    @property
    def adaptive(self) -> str | None:
        """The adaptive rule asked for: ``"until-decided"``, ``"until-precise"``, or None (a fixed-n run)."""
        if self.until_decided:
            return "until-decided"
        return "until-precise" if self.until_precise is not None else None

    @property
    def precision(self) -> tuple[float, bool]:
        """``--until-precise W`` as (half-width, relative): ``5`` -> (5.0, False), ``5%`` -> (0.05, True)."""
        value = self.until_precise
        text = str(value).strip()
        relative = text.endswith("%")
        try:
            width = float(text[:-1] if relative else text)
        except ValueError:
            width = math.nan
        if isinstance(value, bool) or not (math.isfinite(width) and width > 0):
            raise ConfigError(
                f"--until-precise: a half-width > 0 in the task's units (e.g. 5) or a percentage of |mean| "
                f"(e.g. 5%), got {value!r}."
            )
        return (width / 100 if relative else width), relative

    @property
    def max_checkpoint_bytes(self) -> int:
        """``--max-checkpoint-size`` in bytes; ConfigError for a size it cannot read."""
        try:
            return parse_size(self.max_checkpoint_size)
        except ValueError as exc:
            raise ConfigError(f"--max-checkpoint-size: {exc}.") from None

    @property
    def source(self) -> str | None:
        """Which source of weights was given (``checkpoint``, ``watch``, ``serve``, ``policy_server``), or None."""
        return next((k for k in SOURCES if getattr(self, k)), None)


def _info_keys(value: Any) -> list:
    """``info_keys`` as a list of keys: strings, or lists of strings for nested keys (YAML)."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    ok = isinstance(value, (list, tuple)) and all(
        isinstance(k, str) or (isinstance(k, (list, tuple)) and k and all(isinstance(p, str) for p in k)) for k in value
    )
    if not ok:
        raise ConfigError(
            f"info_keys must be a list of keys (strings, or lists of strings for nested keys), got {value!r}."
        )
    return [k if isinstance(k, str) else list(k) for k in value]


FIELDS = {f.name: f for f in dataclasses.fields(LaunchConfig)}


def from_mapping(data: dict[str, Any], where: str, typed: bool = False) -> dict[str, Any]:
    """Validate a mapping's keys (and, unless ``typed`` as argparse's are, its values' kinds); field -> value."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of settings, got {type(data).__name__}.")
    out = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in FIELDS:
            raise ConfigError(f"{where}: unknown setting {key!r}; known: {', '.join(sorted(FIELDS))}.")
        if not typed:
            _check_kind(name, value, where)
        out[name] = value
    return out


def _kinds(name: str) -> tuple[tuple[type, ...], bool]:
    """The Python types field ``name`` takes, and whether it may be None."""
    import typing

    hint = typing.get_type_hints(LaunchConfig)[name]
    args = typing.get_args(hint) or (hint,)
    return tuple(a for a in args if a is not type(None)), type(None) in args


def _check_kind(name: str, value: Any, where: str) -> None:
    """A ConfigError naming ``where`` and the setting when ``value`` is not of the kind the field takes."""
    kinds, optional = _kinds(name)
    if value is None:
        if optional or name == "info_keys":
            return
    elif bool in kinds or not isinstance(value, bool):
        if float in kinds and isinstance(value, (int, float)):
            return
        if isinstance(value, kinds) or (name == "info_keys" and isinstance(value, str)):
            return
    words = {bool: "true or false", int: "a whole number", float: "a number", str: "text", dict: "a mapping",
             list: "a list"}  # fmt: skip
    wanted = " or ".join(words[k] for k in kinds) + (" or null" if optional else "")
    raise ConfigError(f"{where}: {name} must be {wanted}, got {value!r:.60}.")


def load_yaml(path: str) -> dict[str, Any]:
    """The settings in the YAML profile at ``path`` (field -> value); ConfigError if unreadable or unknown."""
    try:
        data = read_yaml(path) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}.") from None
    except YamlError as exc:
        raise ConfigError(str(exc)) from None
    return from_mapping(data, path)


def resolve(settings: dict[str, Any]) -> LaunchConfig:
    """The validated config for the merged YAML and flag ``settings``, with the site's default device."""
    if settings.get("time_budget") is not None and "episodes" in settings:
        raise ConfigError("give --episodes or --time-budget, not both (a profile's episodes count too).")
    cfg = LaunchConfig(**settings)
    if cfg.device is None and os.environ.get(DEVICE_ENV):
        cfg.device = os.environ[DEVICE_ENV]
    return cfg.validate()
