"""``--replay DIR --replay-episode LINE:INDEX``: one recorded episode re-run in the round it was recorded in.

An episode's seed alone cannot give its return back: ``episode_seeds`` are one-way hashes, and a batched
policy's forward pass on one row may round differently from the same row in a batch of another size, which a
chaotic simulator amplifies. So a replay rebuilds what the results line names, from the run directory read as
data: its checkpoint (the file it evaluated, checked by its sha256), its env and condition, and its round
(``round``: the sub-envs and their quotas, the seed, the worker's range of sub-envs, its devices). It
re-runs that round (the shard of a round split over Ray workers: the range that held the episode) on one
worker (:class:`~simeval.worker.eval_worker.EvalWorker`, what every backend runs), keeps the episode at
``(episode_sub_envs[INDEX], episode_ordinals[INDEX])`` and drops the others. It prints the recorded return
beside the replayed one and whether they are equal to the bit, with what the env's simulator promises
(:meth:`~simeval.envs.simulators.Simulator.replay_promise`); appends a line to ``DIR/replays.jsonl``
(:data:`REPLAYS`); with ``--video`` records the episode into ``DIR/videos/``. A difference on a simulator that
promises the same return is an error (exit code 2), once its line is written.
"""

from __future__ import annotations

import math
import os
import socket
import struct
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from simeval.checkpoints import load_checkpoint
from simeval.checkpoints.formats import names as format_names
from simeval.conditions import Condition
from simeval.envs import check_env
from simeval.envs.simulators import check_condition, env_backends, simulator_for
from simeval.factories import is_registered
from simeval.launch.build import env_factory, policy_factory
from simeval.launch.cli import Parsed
from simeval.launch.config import ConfigError, LaunchConfig, from_mapping
from simeval.launch.plan import plan_for
from simeval.launch.session import plan_record
from simeval.records import append_record, numbered_records

if TYPE_CHECKING:
    from simeval.checkpoints import Checkpoint

REPLAYS = "replays.jsonl"
"""The file in the run directory that every replay appends its line to."""

# What a replay may be given besides what it replays: the rest comes from the line.
_OWN_FLAGS = frozenset({"replay", "replay_episode", "video", "verbose", "init_fn", "max_checkpoint_size", "policy"})
# The per-episode lists a line must hold, of one length each, for any of its episodes to be replayed.
_EPISODE_LISTS = ("episode_returns", "episode_lengths", "episode_sub_envs", "episode_ordinals")


class ReplayError(ValueError):
    """A replay that cannot run, or whose return differs where its simulator promises the same: one line."""


@dataclass(frozen=True)
class Recorded:
    """The episode a results line recorded, and the round it ran in."""

    line: int
    index: int
    record: dict[str, Any]
    sub_env: int
    ordinal: int
    round_seed: int
    quotas: tuple[int, ...]
    shard: tuple[int, int, int]
    """(index, first sub-env, sub-envs) of the worker's range that ran the episode."""
    device: str | None
    """The device the round was asked to run on (None: the policy's own, the env's default)."""
    ran_on: str
    """Where it ran: ``"cpu"``, or the accelerator its env or its policy ran on."""

    @property
    def episode_return(self) -> float:
        """The return the line recorded."""
        return float(self.record["episode_returns"][self.index])

    @property
    def length(self) -> int:
        """The length the line recorded."""
        return int(self.record["episode_lengths"][self.index])

    @property
    def episode_seed(self) -> int | None:
        """The episode's seed (:func:`simeval.conditions.episode_seed`), where the line records it."""
        seeds = self.record.get("episode_seeds")
        return None if seeds is None else int(seeds[self.index])

    @property
    def conditions(self) -> dict[str, float]:
        """Each ranged condition setting's value drawn for the episode."""
        drawn = self.record.get("episode_conditions") or {}
        return {name: float(values[self.index]) for name, values in drawn.items()}


def replay(parsed: Parsed) -> int:
    """Re-run ``--replay``'s episode ``--replay-episode``; 0 when it ran (equal or not, as promised).

    Raises:
        ConfigError: a flag a replay takes from the line; the run directory, its line or its checkpoint cannot
            give the episode back (one line: what, and what to do).
        ReplayError: the return differs where the simulator promises the same (after the replay's line).
    """
    cfg = parsed.cfg
    given = sorted(parsed.explicit - _OWN_FLAGS)
    if given:
        flag = "--" + given[0].replace("_", "-")
        raise ConfigError(f"--replay takes every setting from the results line: leave {flag} out.")
    trusted = cfg.policy if "policy" in parsed.explicit else None
    replay_episode(cfg, cfg.replay, cfg.replay_line, cfg.replay_index, bool(cfg.video), trusted)
    return 0


def replay_command(run_dir: str, line: int, index: int, video: bool = True) -> str:
    """The command line that replays episode ``index`` of line ``line`` of ``run_dir``."""
    return f"python -m simeval.launch --replay {run_dir} --replay-episode {line}:{index}" + (" --video" * video)


def replay_episode(
    cfg: LaunchConfig, run_dir: str, line_number: int, index: int, video: bool, trusted: str | None = None
) -> dict[str, Any]:
    """Re-run episode ``index`` of line ``line_number`` of ``run_dir`` in its recorded round, print what it gave and
    append its line to ``run_dir``/replays.jsonl (with ``video``: the episode's MP4 under ``run_dir``/videos);
    returns that line. ``cfg`` gives the reading limits; ``trusted``: a ``--policy`` the user typed.

    Raises:
        ConfigError: the run directory, its line or its checkpoint cannot give the episode back (one line).
        ReplayError: the return differs where the simulator promises the same (after the replay's line).
    """
    results = os.path.join(run_dir, "results.jsonl")
    recorded = read_episode(run_dir, line_number, index)
    record = recorded.record
    ck = _checkpoint(record, results, recorded.line, cfg.max_checkpoint_bytes)
    run_cfg, explicit = _run_config(record, recorded, cfg, results, trusted, video)
    plan = plan_for(run_cfg, explicit, ck)
    if isinstance(record.get("plan"), dict) and plan_record(plan) != record["plan"]:
        raise ConfigError(
            f"{results}: line {recorded.line} evaluated {record['plan']}, but its checkpoint now gives "
            f"{plan_record(plan)}: replay it with the simeval that wrote it."
        )
    try:
        env_backend = check_env(plan.env, run_cfg.env_backend)
        condition = None
        if "condition_settings" in record:  # a suite cell's (its nominal one too), as the run built its env
            condition = Condition.parse(record["condition_settings"], f"{results}: line {recorded.line}: condition")
            check_condition(plan.env, condition, run_cfg.env_backend)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    device = recorded.device
    _check_device(recorded, results)
    promise = simulator_for(plan.env, run_cfg.env_backend).replay_promise(plan.env, recorded.ran_on)
    video_name = f"replay_line{recorded.line}_episode{recorded.index}.mp4" if video else None
    print(_heading(recorded, ck, results), flush=True)
    print(f"promise: {promise.text}", flush=True)
    raw, video_path = _run_round(recorded, ck, run_cfg, plan, condition, device, video_name, run_dir, record)
    replayed = _find(raw, recorded, results)
    equal = _same_bits(replayed[0], recorded.episode_return) and replayed[1] == recorded.length
    line = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": socket.gethostname(),
        "line": recorded.line,
        "index": recorded.index,
        "checkpoint": record["checkpoint"],
        "checkpoint_sha256": ck.sha256,
        "step": ck.step,
        "env": plan.env,
        "env_backend": env_backend,
        **{key: record[key] for key in ("suite", "task", "condition", "look") if key in record},
        "episode_seed": recorded.episode_seed,
        "round_seed": recorded.round_seed,
        "sub_env": recorded.sub_env,
        "ordinal": recorded.ordinal,
        "conditions": recorded.conditions,
        "recorded_return": recorded.episode_return,
        "replayed_return": replayed[0],
        "recorded_length": recorded.length,
        "replayed_length": replayed[1],
        "equal": equal,
        "promise": {"exact": promise.exact, "text": promise.text},
        "video": video_path,
        "command": replay_command(run_dir, recorded.line, recorded.index, video),
    }
    append_record(os.path.join(run_dir, REPLAYS), line)
    print(f"recorded return {recorded.episode_return!r} ({recorded.length} steps)", flush=True)
    print(f"replayed return {replayed[0]!r} ({replayed[1]} steps)", flush=True)
    print(f"equal to the bit: {'yes' if equal else 'no'}", flush=True)
    if video_path is not None:
        print(f"video: {video_path}", flush=True)
    print(f"replay: {os.path.join(run_dir, REPLAYS)}", flush=True)
    if not equal and promise.exact:
        raise ReplayError(
            f"{results}: line {recorded.line}, episode {recorded.index} replayed {replayed[0]!r} in "
            f"{replayed[1]} steps where the line recorded {recorded.episode_return!r} in {recorded.length}, on "
            f"a simulator that promises the same return to the bit: this machine, or its simeval, simulator or torch, "
            f"does not repeat the recorded round (see {os.path.join(run_dir, REPLAYS)})."
        )
    return line


def read_episode(run_dir: str, line: int, index: int) -> Recorded:
    """Episode ``index`` of line ``line`` of ``run_dir``'s results.jsonl, read as data; a one-line ConfigError
    where the directory, the line or the episode cannot be replayed (no such line or episode, a failed line, a
    line written before lines recorded their round, an unseeded round)."""
    results = os.path.join(run_dir, "results.jsonl")
    if not os.path.lexists(results):
        halves = [h for h in ("a", "b") if os.path.lexists(os.path.join(run_dir, h, "results.jsonl"))]
        where = f" (an --until-decided run: give --replay {os.path.join(run_dir, halves[0])})" if halves else ""
        raise ConfigError(f"--replay {run_dir}: no results.jsonl there{where}; give the --out of a launcher run.")
    record, last = None, 0
    for number, found in numbered_records(results, fix="give --replay the run directory itself"):
        last = number
        if number == line:
            record = found
            break
    if record is None:
        raise ConfigError(
            f"{results} has no line {line} (its last complete line is {last}): give --replay-episode a line of it."
        )
    where = f"{results}: line {line}"
    status = record.get("status")
    if status == "failed":
        raise ConfigError(
            f"{where} is a failed line ({record.get('error_kind', 'failed')}: {str(record.get('error'))[:80]}): it "
            "has no episodes; replay an ok line."
        )
    if status != "ok":
        raise ConfigError(f"{where} is no evaluation (status {status!r}): replay an ok line.")
    return _episode(record, where, line, index)


def _episode(record: dict[str, Any], where: str, line: int, index: int) -> Recorded:
    """The recorded episode and its round, checked: a ConfigError naming ``where`` for what a line lacks."""
    missing = [key for key in (*_EPISODE_LISTS, "round", "settings") if key not in record]
    if missing:
        raise ConfigError(
            f"{where} was written before results lines recorded how to re-run their episodes (it has no "
            f"{missing[0]}): evaluate its checkpoint again with this simeval, then replay the new line."
        )
    lists = [record[key] for key in _EPISODE_LISTS]
    count = len(lists[0]) if isinstance(lists[0], list) else -1
    if not all(isinstance(values, list) and len(values) == count for values in lists):
        raise ConfigError(f"{where} is damaged: its episode lists differ in length; replay another line.")
    if not 0 <= index < count:
        raise ConfigError(
            f"{where} has {count} episodes (indices 0 to {count - 1}), not {index}: give --replay-episode one of them."
        )
    shape = record["round"]
    try:
        seed, quotas, shards = shape["seed"], [int(q) for q in shape["quotas"]], shape["shards"]
        sub_env, ordinal = int(record["episode_sub_envs"][index]), int(record["episode_ordinals"][index])
        ranges = [(int(first), int(size)) for first, size in shards]
        device = shape["device"]
        ran = [str(d) for d in (shape["policy_device"], shape["env_device"]) if d is not None]
        if device is not None and not isinstance(device, str):
            raise TypeError(device)
    except (KeyError, TypeError, ValueError):
        raise ConfigError(f"{where} is damaged: its round is not one simeval writes; replay another line.") from None
    if seed is None:
        raise ConfigError(
            f"{where} is of an unseeded round (--seed null): its episodes started from fresh entropy, which no "
            "replay repeats; evaluate with a seed to replay."
        )
    found = [(k, first, size) for k, (first, size) in enumerate(ranges) if first <= sub_env < first + size]
    consistent = sum(size for _, size in ranges) == len(quotas) and 0 <= sub_env < len(quotas)
    if not found or not consistent or not 0 <= ordinal < quotas[sub_env]:
        raise ConfigError(f"{where} is damaged: episode {index} lies outside its round; replay another line.")
    if not isinstance(record.get("checkpoint"), str) or not record["checkpoint"]:
        raise ConfigError(
            f"{where} names no checkpoint (a served evaluator's line: training sent its weights): nothing "
            "to rebuild its policy from."
        )
    if record.get("checkpoint_format") == "remote":
        raise ConfigError(
            f"{where} evaluated a served policy ({record['checkpoint']}): a replay rebuilds a checkpoint's policy "
            "only; replay it against the server by hand."
        )
    ran_on = next((d for d in ran if d != "cpu"), "cpu")
    return Recorded(line, index, record, sub_env, ordinal, int(seed), tuple(quotas), found[0], device, ran_on)


def _checkpoint(record: dict[str, Any], results: str, line: int, max_bytes: int) -> Checkpoint:
    """The line's checkpoint, read as any checkpoint is, and the same bytes it evaluated (its sha256)."""
    path, recorded = record["checkpoint"], record.get("checkpoint_sha256")
    if not os.path.lexists(path):
        raise ConfigError(
            f"{path} (the checkpoint of {results}: line {line}) is not there: run the replay from the directory "
            "the run started in (the path is relative to it), or put the file back."
        )
    kind = record.get("checkpoint_format")
    ck = load_checkpoint(path, kind if kind in format_names() else None, max_bytes=max_bytes)
    if recorded and ck.sha256 != recorded:
        raise ConfigError(
            f"{path} changed since {results}: line {line} evaluated it (sha256 {str(recorded)[:12]}... then, "
            f"{ck.sha256[:12]}... now): put back the file it evaluated, or evaluate this one and replay its line."
        )
    return ck


def _run_config(
    record: dict[str, Any], recorded: Recorded, cfg: LaunchConfig, results: str, trusted: str | None, video: bool
) -> tuple[LaunchConfig, set[str]]:
    """The settings the line was evaluated with, as a config (checked as a profile's are), and those it gives.

    A ``--policy`` factory the line names is imported only when it is registered, or ``trusted`` (the
    ``--policy`` given to the replay) names it.
    """
    settings = record["settings"]
    where = f"{results}: line {recorded.line}: settings"
    if not isinstance(settings, dict):
        raise ConfigError(f"{where} is not a mapping: the line is damaged; replay another line.")
    policy = settings.get("policy")
    if trusted is not None and trusted != policy:
        named = policy or "the checkpoint's own factory"
        raise ConfigError(f"--policy {trusted}: {where} names {named}, another: leave --policy out.")
    if policy and not is_registered(str(policy)) and trusted != policy:
        raise ConfigError(
            f"{where}: the line was evaluated with --policy {policy}, which a replay does not import on a results "
            f"file's word (data never names code to run): give --policy {policy} yourself to trust it."
        )
    fields = {
        "env": record.get("env"),
        "num_envs": len(recorded.quotas),
        "max_steps": settings.get("max_steps"),
        "seed": recorded.round_seed,
        "episodes": sum(recorded.quotas),
        "obs_norm": settings.get("obs_norm", True),
        "policy": policy,
        "policy_kwargs": settings.get("policy_kwargs") or {},
        "cameras": settings.get("cameras") or [],
        "image_size": settings.get("image_size", 64),
        "frame_stack": settings.get("frame_stack", 1),
        "video": video,
        "init_fn": cfg.init_fn,
    }
    if record.get("env_backend") in env_backends():
        fields["env_backend"] = record["env_backend"]
    given = from_mapping(fields, where)
    run_cfg = LaunchConfig(**given)
    try:
        run_cfg.validate()
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    explicit = {"env"} | {key for key in ("policy", "policy_kwargs") if given.get(key)}
    return run_cfg, explicit


def _check_device(recorded: Recorded, results: str) -> None:
    """A round whose env or policy ran on a GPU replays only where that GPU is."""
    cuda = [d for d in (recorded.device, recorded.ran_on) if d is not None and d.startswith("cuda")]
    if not cuda:
        return
    import torch

    index = max(int(d.partition(":")[2] or 0) for d in cuda)
    if not torch.cuda.is_available() or index >= torch.cuda.device_count():
        raise ConfigError(
            f"{results}: line {recorded.line} ran on {cuda[0]}, which this machine does not have: replay it on a "
            "machine with that GPU."
        )


def _run_round(
    recorded: Recorded,
    ck: Checkpoint,
    run_cfg: LaunchConfig,
    plan: Any,
    condition: Condition | None,
    device: str | None,
    video_name: str | None,
    run_dir: str,
    record: dict[str, Any],
) -> tuple[dict[str, Any], str | None]:
    """The recorded round (the episode's worker's share of it) run once on one worker: its raw metrics, and the
    episode's video (None without ``--video``)."""
    from simeval.launch.video import EpisodeVideo
    from simeval.settings import EvalSettings
    from simeval.shards import Shard
    from simeval.weights import as_weights
    from simeval.worker.eval_worker import EvalWorker
    from simeval.worker.vecnorm import iter_transforms

    index, first, size = recorded.shard
    quotas = recorded.quotas[first : first + size]
    video_dir = os.path.abspath(os.path.join(run_dir, "videos")) if video_name else None
    video = {"video_episode": (recorded.sub_env - first, recorded.ordinal), "video_name": video_name}
    shard_cfg = _with(run_cfg, num_envs=size)
    settings = EvalSettings(
        num_trajectories=sum(quotas),
        max_steps=run_cfg.max_steps,
        device=device,
        seed=recorded.round_seed,
        dump_video=False,
    )
    worker = EvalWorker(
        settings,
        env_factory=env_factory(shard_cfg, plan, device, video_dir, condition, **video),
        policy_factory=policy_factory(plan),
    )
    # As the backend that ran it: a worker process (process, Ray) seeds torch with the round, a thread does not.
    if record.get("backend") in ("process", "ray"):
        worker.owns_process = True
    else:
        worker.owns_thread = True
    weights = dict(ck.weights_dict) if plan.obs_norm else {"policy": ck.policy}
    try:
        raw = worker.run({k: as_weights(v) for k, v in weights.items()}, ck.step, None, Shard(index, first, quotas))
        recorders = [t for t in iter_transforms(worker.env) if isinstance(t, EpisodeVideo)] if video_name else []
        return raw, (recorders[0].dump(ck.step) if recorders else None)
    finally:
        worker.close()


def _with(cfg: LaunchConfig, **changes: Any) -> LaunchConfig:
    """A copy of ``cfg`` with ``changes``."""
    import dataclasses

    return dataclasses.replace(cfg, **changes)


def _find(raw: dict[str, Any], recorded: Recorded, results: str) -> tuple[float, int]:
    """The replayed (return, length) of the recorded episode; ReplayError where the round gave other episodes."""
    where = list(zip(raw["episode_sub_envs"], raw["episode_ordinals"], strict=True))
    try:
        j = where.index((recorded.sub_env, recorded.ordinal))
    except ValueError:
        raise ReplayError(
            f"{results}: line {recorded.line}: the replayed round has no episode {recorded.ordinal} of sub-env "
            f"{recorded.sub_env}: it did not run the recorded round."
        ) from None
    seeds = raw.get("episode_seeds")
    if recorded.episode_seed is not None and seeds is not None and int(seeds[j]) != recorded.episode_seed:
        raise ReplayError(
            f"{results}: line {recorded.line}: the replayed episode's seed is {seeds[j]}, the line's "
            f"{recorded.episode_seed}: it did not run the recorded round."
        )
    return float(raw["episode_returns"][j]), int(raw["episode_lengths"][j])


def _same_bits(a: float, b: float) -> bool:
    """Whether two returns are the same float64, bit for bit (NaN included)."""
    return struct.pack("<d", a) == struct.pack("<d", b) or (math.isnan(a) and math.isnan(b))


def _heading(recorded: Recorded, ck: Checkpoint, results: str) -> str:
    """What is replayed, in two lines."""
    record = recorded.record
    cell = f" / {record['condition']}" if "condition" in record else ""
    cell += f", look {record['look']}" if "look" in record else ""
    drawn = "".join(f"; {name} {value:.6g}" for name, value in recorded.conditions.items())
    shard = recorded.shard
    split = f", its worker's sub-envs {shard[1]}-{shard[1] + shard[2] - 1}" if shard[2] != len(recorded.quotas) else ""
    return (
        f"replaying {results} line {recorded.line}, episode {recorded.index}: {os.path.basename(ck.path)} "
        f"(step {ck.step}) on {record.get('task', record.get('env'))}{cell}\n"
        f"  episode {recorded.ordinal} of sub-env {recorded.sub_env}, in a round of {sum(recorded.quotas)} episodes "
        f"on {len(recorded.quotas)} sub-envs{split}, seed {recorded.round_seed}{drawn}"
    )
