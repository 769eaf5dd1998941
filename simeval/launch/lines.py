"""The one record builder: every results.jsonl line the launcher writes about a job or a checkpoint.

An evaluated job (checkpoint x cell) gets :func:`ok_line`: the result
(:func:`simeval.records.make_record`), the checkpoint's fields (the same in every
kind of run), the attempts, the run's plan (a plain run), where and how it ran,
and the cell's fields (a suite's). A job that could not be evaluated gets
:func:`failed_line`, with the same cell fields; a checkpoint file that could not be
read, with the run's (``suite``); a watched file still being written when the run
ended gets :func:`unsettled_line`, a failed line the next run retries by itself. An
adaptive run's look adds its :class:`Look` fields.

Every job's ok line, and a plain run's failed lines, carry ``settings``
(:func:`simeval.launch.build.run_settings`): what the run was asked to evaluate
with, so a later run into the same ``--out`` with other settings is refused
rather than mixed in (:func:`simeval.launch.results.other_settings`).

Every line says its ``schema`` (:data:`simeval.records.SCHEMA_VERSION`) and every ok line the method
of its interval (``ci_method``): :func:`simeval.records.make_record` and
:func:`~simeval.records.failed_record` write them, so a served evaluator's lines carry them too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from simeval.launch.build import checkpoint_fields, record_context, run_settings
from simeval.launch.session import plan_record
from simeval.launch.sources import UNSETTLED, checkpoint_name
from simeval.records import failed_record, make_record

if TYPE_CHECKING:
    from simeval.checkpoints import Checkpoint
    from simeval.launch.cells import JobCell
    from simeval.launch.config import LaunchConfig
    from simeval.launch.session import Slot


@dataclass(frozen=True)
class Look:
    """What an adaptive run's line adds about its look (:mod:`simeval.launch.adaptive`)."""

    index: int
    """The look, from 0."""
    sequential: dict[str, Any]
    """The look plan (:meth:`simeval.sequential.LookPlan.as_data`)."""
    stop: str | None = None
    """Why the cell stopped after this look (one of :data:`simeval.sequential.STOPS`), on its last look only."""


def ok_line(
    cfg: LaunchConfig,
    ck: Checkpoint,
    cell: JobCell,
    result: dict,
    *,
    seconds: float,
    attempts: int,
    slot: Slot,
    with_plan: bool,
    look: Look | None = None,
) -> dict[str, Any]:
    """The line of ``ck``'s evaluation on ``cell`` in ``slot``, which took ``seconds`` (``with_plan``: a plain run;
    ``look``: an adaptive run's look)."""
    return make_record(
        result,
        **checkpoint_fields(ck, cfg.watch),
        wall_time=round(seconds, 3),
        attempts=attempts,
        settings=run_settings(cell.config(cfg)),
        **({"plan": plan_record(slot.plan)} if with_plan else {}),
        **record_context(cell.config(cfg), slot.plan, slot.env_backend),
        **cell.context(),
        **({"look": look.index, "sequential": look.sequential} if look is not None else {}),
        **({"stop": look.stop} if look is not None and look.stop is not None else {}),
    )


def failed_line(
    cfg: LaunchConfig, path: str, message: str, step: int | None, kind: str, context: dict[str, Any]
) -> dict[str, Any]:
    """The failed line of checkpoint ``path`` (``kind``: see :data:`simeval.records.ERROR_KINDS`), plus ``context``.

    A plain run's (``context`` names no suite) also carries the run's ``settings``.
    """
    record = failed_record(path, message, step, checkpoint_name(path, cfg.watch), kind)
    if "suite" not in context:
        record["settings"] = run_settings(cfg)
    record.update(context)
    return record


def unsettled_line(cfg: LaunchConfig, path: str, step: int | None, context: dict[str, Any]) -> dict[str, Any]:
    """The line of watched file ``path``, still being written when the run ended: failed (``error``
    :data:`~simeval.launch.sources.UNSETTLED`), and read again by the next run (``retry: "resume"``)."""
    return failed_line(cfg, path, UNSETTLED, step, "unsettled", context)
