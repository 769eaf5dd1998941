"""How workers build what a plan names: env and policy factories, placement, the Evaluator.

The factories are module-level functions bound with ``functools.partial``, so
they pickle by reference for process and Ray workers.
"""

from __future__ import annotations

import functools
import json
import os
from typing import TYPE_CHECKING, Any

from simeval.envs import make_env
from simeval.envs.simulators import simulator_for
from simeval.factories import build_policy
from simeval.hooks import worker_init
from simeval.launch.config import LaunchConfig
from simeval.launch.plan import EvalPlan
from simeval.launch.sources import checkpoint_name

if TYPE_CHECKING:
    from torchrl.envs import EnvBase

    from simeval.caller.evaluator import Evaluator
    from simeval.checkpoints import Checkpoint
    from simeval.conditions import Condition


def placement(device: str | None, backend: str) -> tuple[str | None, str | None]:
    """(CUDA_VISIBLE_DEVICES for the worker, device inside it).

    A process worker sees only the GPU it was given and calls it cuda:0, so
    evaluation never touches the training GPU. Ray sets the variable itself.
    """
    if backend == "process" and device and device.startswith("cuda:"):
        return device.split(":", 1)[1], "cuda:0"
    return None, device


def build_env(
    name: str,
    max_steps: int | None,
    device: str | None,
    obs_norm: bool,
    video_dir: str | None,
    backend: str | None = None,
    *,
    num_envs: int,
    condition: Condition | None = None,
    cameras: tuple[str, ...] = (),
    image_size: int = 64,
    frame_stack: int = 1,
    video_episode: tuple[int, int] = (0, 0),
    video_name: str | None = None,
) -> EnvBase:
    """The env a worker evaluates on: ``make_env``'s (with a suite cell's ``condition``), and the ``--video`` recorder.

    The recorder is added when ``video_dir`` is set: it records each round's episode ``video_episode``
    (sub-env, ordinal; a replay's, the first of sub-env 0 otherwise) into ``video_dir``, named ``video_name``
    when given (else by the round's step).
    """
    views = {"cameras": cameras, "image_size": image_size, "frame_stack": frame_stack} if cameras else {}
    if simulator_for(name).prefix is not None:  # a "<prefix>:<task>" id: no env backend, no frames
        return make_env(
            name, num_envs=num_envs, max_steps=max_steps, device=device, obs_norm=obs_norm, condition=condition, **views
        )
    if video_dir:
        for key, value in simulator_for(name, backend).render_env.items():  # set before the simulator loads
            os.environ.setdefault(key, value)
    env = make_env(
        name,
        num_envs=num_envs,
        max_steps=max_steps,
        device=device,
        obs_norm=obs_norm,
        render=bool(video_dir),
        backend=backend,
        condition=condition,
        **views,
    )
    if video_dir:
        from simeval.launch.video import EpisodeVideo

        sub_env, ordinal = video_episode
        env.append_transform(EpisodeVideo(video_dir, sub_env=sub_env, ordinal=ordinal, name=video_name))
    return env


def make_evaluator(
    cfg: LaunchConfig,
    plan: EvalPlan,
    extra: list[str],
    out: str,
    env_backend: str,
    num_workers: int = 1,
    condition: Condition | None = None,
) -> Evaluator:
    """The Evaluator for ``plan``: placement, init hook in the worker, and (--serve) durable results.

    ``num_workers`` Ray workers split each round (the env factory takes ``num_envs=``: its share);
    ``condition`` is a suite cell's (``--suite``).
    """
    cuda_visible, device = placement(cfg.device, cfg.backend)
    init_fn = None
    if cfg.backend != "thread" and (cfg.init_fn or cuda_visible):
        init_fn = functools.partial(
            worker_init, user_init=cfg.init_fn, cuda_visible=cuda_visible, argv=extra, video=cfg.video, device=device
        )
    video_dir = os.path.abspath(os.path.join(out, "videos")) if cfg.video else None
    if cfg.backend == "thread" and device in (None, "cpu"):
        import torch

        # This process only evaluates: as in the process/Ray workers, a CPU policy gets one
        # intra-op thread, leaving the cores to the batched simulator's own threads.
        torch.set_num_threads(1)
    from simeval import Evaluator  # a lazy export: simeval.caller.evaluator loads NumPy

    return Evaluator(
        env_factory(cfg, plan, device, video_dir, condition),
        policy_factory=policy_factory(plan),
        **({"time_budget_s": cfg.time_budget} if cfg.time_budget is not None else {"num_trajectories": cfg.episodes}),
        max_steps=cfg.max_steps,
        seed=cfg.seed,
        device=device,
        backend=cfg.backend,
        init_fn=init_fn,
        num_gpus=cfg.num_gpus,
        ray_kwargs=_ray_kwargs(cfg),
        num_workers=num_workers,
        max_restarts=cfg.max_restarts,
        start_timeout=cfg.start_timeout,
        round_timeout_s=cfg.round_timeout,
        keep_episodes=True,
        results_path=os.path.join(out, "results.jsonl") if cfg.serve else None,
        results_context=_results_context(cfg, plan, env_backend),
        info_keys=cfg.info_keys,
        # The run's progress board sets its own callback when a job starts; asking for progress from the
        # start makes every backend report the first round too (Ray starts its progress sink with it).
        on_progress=None if cfg.serve else _until_a_job_starts,
    )


def env_factory(
    cfg: LaunchConfig,
    plan: EvalPlan,
    device: str | None,
    video_dir: str | None,
    condition: Condition | None = None,
    **video: Any,
) -> functools.partial:
    """The env factory of ``plan`` under ``cfg`` (its env backend, sub-envs, cameras): :func:`build_env`, bound.

    ``video`` goes to :func:`build_env` (``video_episode``, ``video_name``: a replay's recorder).
    """
    return functools.partial(
        build_env,
        plan.env,
        cfg.max_steps,
        device,
        plan.obs_norm,
        video_dir,
        cfg.env_backend,
        num_envs=cfg.num_envs,
        condition=condition,
        cameras=tuple(cfg.cameras),
        image_size=cfg.image_size,
        frame_stack=cfg.frame_stack,
        **video,
    )


def policy_factory(plan: EvalPlan) -> functools.partial:
    """The policy factory of ``plan``: :func:`simeval.factories.build_policy`, bound (its trust and its bound)."""
    return functools.partial(
        build_policy,
        plan.policy_factory,
        dict(plan.policy_kwargs),
        trusted=plan.trusted,
        max_bytes=plan.max_policy_bytes,
    )


def _results_context(cfg: LaunchConfig, plan: EvalPlan, env_backend: str) -> dict:
    """What a served evaluator's worker adds to each line it writes: :func:`record_context` and the ``settings``."""
    context = record_context(cfg, plan, env_backend)
    return {**context, "settings": run_settings(cfg)} if cfg.serve else context


def _until_a_job_starts(progress: object) -> None:
    """The evaluator's progress callback until the pipeline gives it the job's (it has nothing to show)."""


def _ray_kwargs(cfg: LaunchConfig) -> dict | None:
    if cfg.backend != "ray":
        return None
    return {"num_cpus": cfg.num_cpus, **({"name": cfg.serve} if cfg.serve else {})}


def checkpoint_fields(ck: Checkpoint, watch: str | None) -> dict[str, Any]:
    """A results line's fields that say which checkpoint it evaluated (every kind of run writes the same ones)."""
    fields = {
        "checkpoint": ck.path,
        "checkpoint_name": checkpoint_name(ck.path, watch),
        "checkpoint_sha256": ck.sha256,
        "checkpoint_format": ck.meta.get("format", "simeval"),
    }
    if "architecture" in ck.meta:
        fields["architecture"] = ck.meta["architecture"]
    return fields


def record_context(cfg: LaunchConfig, plan: EvalPlan, env_backend: str) -> dict:
    """What every results.jsonl line of this run says about where and how it was evaluated."""
    return {"backend": cfg.backend, "env": plan.env, "env_backend": env_backend}


def run_settings(cfg: LaunchConfig) -> dict[str, Any]:
    """A line's ``settings``: what its numbers depend on that the run was asked for (``cfg``: the cell's config).

    ``episodes`` (None under ``--time-budget``), ``time_budget``, ``num_envs``, ``max_steps``, ``seed``,
    ``obs_norm``, ``policy`` / ``policy_kwargs`` as given (None / {}: the checkpoint's), and with ``--cameras``
    ``cameras``, ``image_size`` and ``frame_stack``. The env evaluated,
    its env backend and a suite cell's fields are the line's own keys (``env``, ``env_backend``, ``suite``, ...).
    """
    settings = {
        "episodes": None if cfg.time_budget is not None else cfg.episodes,
        "time_budget": cfg.time_budget,
        "num_envs": cfg.num_envs,
        "max_steps": cfg.max_steps,
        "seed": cfg.seed,
        "obs_norm": cfg.obs_norm,
        "policy": cfg.policy,
        "policy_kwargs": cfg.policy_kwargs,
    }
    if cfg.cameras:
        settings |= {"cameras": list(cfg.cameras), "image_size": cfg.image_size, "frame_stack": cfg.frame_stack}
    return json.loads(json.dumps(settings, default=str))  # plain JSON data: the same as it reads back
