"""The launcher's config in sections owned by features: each section's refusals, the interface between sections,
YAML profiles across sections, ``LaunchConfig.mode``, and the selection flags (``--select-best``, repeatable
``--checkpoint``)."""

from __future__ import annotations

import dataclasses

import pytest

from simeval.launch import main
from simeval.launch.cli import parse
from simeval.launch.config import (
    FIELDS,
    SECTIONS,
    ConfigError,
    LaunchConfig,
    load_yaml,
    resolve,
)
from simeval.launch.config.backend import BackendSection
from simeval.launch.config.container import LauncherSection
from simeval.launch.config.env import EnvSection
from simeval.launch.config.policy import PolicySection
from simeval.launch.config.replay import ReplaySection
from simeval.launch.config.selection import SelectionSection
from simeval.launch.config.source import SourceSection
from simeval.launch.config.strategy import StrategySection

TWO = {"checkpoint": ["a.pt", "b.pt"]}
SERVER = "ws://127.0.0.1:8000"

# (the section whose check refuses, the settings, words of its one-line message: the flag first)
REFUSALS = [
    (SourceSection, {"checkpoint": "a.pt", "watch": "r"}, "give one source of weights, not --checkpoint and --watch"),
    (SourceSection, {"serve": "ev"}, "--serve needs --backend ray"),
    (SourceSection, {"watch": "runs", "poll_interval": 0}, "--poll-interval must be a number of seconds > 0"),
    (SourceSection, {"checkpoint": "a.pt", "max_checkpoint_size": "lots"}, "--max-checkpoint-size:"),
    (ReplaySection, {"replay": "d"}, "--replay DIR needs --replay-episode LINE:INDEX"),
    (ReplaySection, {"replay_episode": "1:0"}, "--replay-episode needs --replay DIR"),
    (ReplaySection, {"replay": "d", "replay_episode": "3"}, "--replay-episode must look like LINE:INDEX"),
    (ReplaySection, {"replay": "d", "replay_episode": "0:2"}, "--replay-episode must look like LINE:INDEX"),
    (ReplaySection, {"replay": "d", "replay_episode": "1:0", "checkpoint": "a.pt"}, "leave --checkpoint out."),
    (ReplaySection, {"replay": "d", "replay_episode": "1:0", "suite": "s.yaml"}, "leave --suite out."),
    (ReplaySection, {"replay": "d", "replay_episode": "1:0", "out": "o"}, "--replay writes into DIR"),
    (BackendSection, {"workers": 2}, "--workers 2 needs --backend ray"),
    (BackendSection, {"backend": "ray", "serve": "ev", "workers": 2}, "--serve runs one named worker"),
    (BackendSection, {"max_restarts": -1}, "--max-restarts must be >= 0"),
    (BackendSection, {"start_timeout": 0}, "--start-timeout must be a number of seconds > 0"),
    (BackendSection, {"round_timeout": -1.0}, "--round-timeout must be a finite number of seconds > 0"),
    (LauncherSection, {"gpus": "1"}, "--gpus is a container setting: it needs --launcher docker"),
    (LauncherSection, {"launcher": "docker"}, "--launcher docker needs --image IMAGE"),
    (EnvSection, {"num_envs": 0}, "--num-envs must be >= 1"),
    (EnvSection, {"image_size": 32}, "--image-size sets the camera images: add --cameras CAMERA"),
    (EnvSection, {"time_budget": 0}, "--time-budget must be a number of seconds > 0"),
    (EnvSection, {"init_fn": "nocolon"}, "--init-fn must look like 'package.module:function'"),
    (PolicySection, {"policy": "nocolon"}, "--policy must look like 'package.module:function'"),
    (PolicySection, {"policy_server": SERVER, "policy": "m:f"}, "--policy-server is the policy"),
    (PolicySection, {"policy_server": SERVER, "policy_server_chunk": 0}, "--policy-server-chunk must be >= 1"),
    (StrategySection, {"checkpoint": "a.pt", "look_every": 4}, "--look-every set the looks of"),
    (StrategySection, {"checkpoint": "a.pt", "until_decided": True}, "--until-decided needs --baseline A and --suite"),
    (StrategySection, {"watch": "runs", "until_precise": "5", "suite": "s.yaml"}, "--until-precise evaluates the "),
    (StrategySection, {"watch": "runs", "select_best": True, "alpha": 1.5}, "--alpha must be in (0, 1)"),
    (StrategySection, {"watch": "runs", "select_best": True, "margin": -1.0}, "--margin must be a finite number"),
    (SelectionSection, TWO, "--checkpoint is given 2 times: more than one is for --select-best"),
    (SelectionSection, {"checkpoint": "a.pt", "select_best": True}, "--select-best needs --watch DIR or at least two"),
    (
        SelectionSection,
        {**TWO, "select_best": True, "until_decided": True},
        "--select-best is a rule of its own: leave --until-decided out",
    ),
    (SelectionSection, {"watch": "r", "select_best": True, "until_precise": "5"}, "leave --until-precise out"),
    (SelectionSection, {**TWO, "select_best": True, "baseline": "c.pt"}, "leave --baseline out"),
    (SelectionSection, {"backend": "ray", "serve": "ev", "select_best": True}, "leave --serve out"),
    (SelectionSection, {"watch": "r", "select_best": True, "time_budget": 60.0}, "leave --time-budget out"),
    (SelectionSection, {"watch": "r", "select_best": True, "logger": "wandb"}, "leave --logger wandb out"),
    (SelectionSection, {**TWO, "select_best": True, "launcher": "docker", "image": "i"}, "--launcher local"),
]


@pytest.mark.parametrize(("section", "settings", "words"), REFUSALS, ids=[w[:40] for _, _, w in REFUSALS])
def test_each_section_refuses_its_own_flags_in_one_line_naming_the_flag(section, settings, words):
    """The section's own check gives the refusal, and the whole config's validate gives that same line."""
    with pytest.raises(ConfigError) as own:
        section.check(LaunchConfig(**settings))
    with pytest.raises(ConfigError) as whole:
        LaunchConfig(**settings).validate()
    assert words in str(own.value)
    assert str(whole.value) == str(own.value)
    assert "\n" not in str(own.value) and str(own.value).split()[0].strip(":").startswith(("--", "give"))


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"backend": "slurm"}, "unknown backend 'slurm': choose one of thread, process, ray."),
        ({"logger": "print"}, "unknown logger 'print'"),
        ({"launcher": "k8s"}, "unknown launcher 'k8s'"),
        ({"design": "bayes"}, "unknown design 'bayes'"),
        ({"format": "tflite"}, "unknown checkpoint format 'tflite'"),
        ({"env_backend": "bullet"}, "unknown env backend 'bullet'"),
    ],
)
def test_a_value_outside_a_section_s_choices_is_refused_with_the_choices(settings, words):
    with pytest.raises(ConfigError, match="choose one of") as exc:
        LaunchConfig(**settings).validate()
    assert words in str(exc.value)


class _Reads:
    """A config seen through what a section's check reads and writes of it."""

    def __init__(self, cfg: LaunchConfig) -> None:
        object.__setattr__(self, "_cfg", cfg)
        object.__setattr__(self, "read", set())
        object.__setattr__(self, "written", set())

    def __getattr__(self, name: str):
        self.read.add(name)
        return getattr(self._cfg, name)

    def __setattr__(self, name: str, value) -> None:
        self.written.add(name)
        setattr(self._cfg, name, value)


VALID = [
    {},
    {"checkpoint": "a.pt", "cameras": ["track"], "frame_stack": 2, "image_size": 32},
    {"policy_server": SERVER, "cameras": ["track"], "policy_server_chunk": 2},
    {"backend": "ray", "serve": "ev", "round_timeout": 60.0},
    {"launcher": "docker", "image": "i", "gpus": "1", "pass_env": ["X"], "checkpoint": "a.pt"},
    {"checkpoint": "b.pt", "baseline": "a.pt", "until_decided": True, "suite": "s.yaml", "margin": 5.0},
    {"checkpoint": "b.pt", "until_precise": "5%", "suite": "s.yaml", "look_every": 4, "max_episodes": 16},
    {**TWO, "select_best": True, "suite": "s.yaml", "margin": 0.1, "alpha": 0.1, "look_every": 4},
    {"watch": "runs", "select_best": True, "until_step": 1000, "time_budget": None},
    {"replay": "runs/x", "replay_episode": "2:3", "video": True},
]


@pytest.mark.parametrize("settings", VALID + [s for _, s, _ in REFUSALS])
def test_a_section_reads_other_sections_only_through_what_it_declares(settings):
    """The interface between sections is explicit: a check reads its own names and its ``reads``, and writes
    only its own fields."""
    for section in SECTIONS:
        seen = _Reads(LaunchConfig(**settings))
        try:
            section.check(seen)
        except ConfigError:
            pass
        own = set(section.own())
        assert seen.read <= own | set(section.reads), (section.title, seen.read - own - set(section.reads))
        assert seen.written <= {f.name for f in dataclasses.fields(section)}, (section.title, seen.written)
        assert not set(section.reads) & own, section.title  # a section's reads are other sections' names


def test_every_flag_belongs_to_exactly_one_section_and_the_sections_make_the_config():
    owners = [f.name for section in SECTIONS for f in dataclasses.fields(section)]
    assert len(owners) == len(set(owners))
    assert list(FIELDS) == owners  # --help lists the flags section by section, in the table's order
    assert all(section.title and section.__doc__ for section in SECTIONS)


def test_a_yaml_profile_sets_fields_of_several_sections(tmp_path):
    profile = tmp_path / "select.yaml"
    profile.write_text(
        "checkpoint: [runs/a.pt, runs/b.pt, runs/c.pt]\nselect-best: true\nbackend: ray\nworkers: 2\n"
        "num_envs: 4\nmax_steps: 200\nmargin: 50\nlook_every: 4\nmax_episodes: 32\nout: out/sel\nappend: true\n"
    )
    cfg = resolve(load_yaml(str(profile)))
    assert cfg.mode == "select-best"
    assert cfg.checkpoint == "runs/a.pt" and cfg.checkpoints == ["runs/a.pt", "runs/b.pt", "runs/c.pt"]
    assert (cfg.backend, cfg.workers, cfg.num_envs, cfg.max_steps) == ("ray", 2, 4, 200)
    assert (cfg.margin, cfg.look_every, cfg.max_episodes, cfg.out, cfg.append) == (50, 4, 32, "out/sel", True)

    precise = tmp_path / "precise.yaml"
    precise.write_text("checkpoint: a.pt\nsuite: s.yaml\nuntil-precise: 5%\nlook_every: 4\nlauncher: local\n")
    assert resolve(load_yaml(str(precise))).mode == "until-precise"

    clash = tmp_path / "clash.yaml"
    clash.write_text("checkpoint: [a.pt, b.pt]\nbackend: thread\nworkers: 3\n")
    with pytest.raises(ConfigError, match=r"^--workers 3 needs --backend ray"):
        resolve(load_yaml(str(clash)))
    clash.write_text("checkpoint: [a.pt, b.pt]\nnum_envs: 2\n")
    with pytest.raises(ConfigError, match=r"^--checkpoint is given 2 times"):
        resolve(load_yaml(str(clash)))
    clash.write_text("checkpoint: [a.pt, 3]\n")
    with pytest.raises(ConfigError, match=r"^--checkpoint: a path per checkpoint"):
        resolve(load_yaml(str(clash)))


@pytest.mark.parametrize(
    ("settings", "mode"),
    [
        ({}, "watch"),
        ({"watch": "runs"}, "watch"),
        ({"checkpoint": "a.pt"}, "checkpoint"),
        ({"policy_server": SERVER}, "policy-server"),
        ({"backend": "ray", "serve": "ev"}, "serve"),
        ({"checkpoint": "a.pt", "suite": "s.yaml"}, "suite"),
        ({"watch": "runs", "suite": "s.yaml"}, "suite"),
        ({"checkpoint": "b.pt", "baseline": "a.pt", "suite": "s.yaml", "until_decided": True}, "until-decided"),
        ({"checkpoint": "b.pt", "suite": "s.yaml", "until_precise": 5}, "until-precise"),
        ({**TWO, "select_best": True}, "select-best"),
        ({"watch": "runs", "select_best": True, "suite": "s.yaml", "margin": 0.1}, "select-best"),
        ({"replay": "runs/x", "replay_episode": "2:3"}, "replay"),
    ],
)
def test_mode_names_what_each_kind_of_run_does(settings, mode):
    assert resolve(settings).mode == mode


def test_checkpoint_is_repeatable_only_for_select_best_and_keeps_meaning_the_first(capsys):
    with pytest.raises(ConfigError) as exc:
        parse(["--checkpoint", "a.pt", "--checkpoint", "b.pt"])
    assert str(exc.value).startswith("--checkpoint is given 2 times: more than one is for --select-best")
    cfg = parse(["--checkpoint", "a.pt"]).cfg
    assert (cfg.checkpoint, cfg.checkpoints) == ("a.pt", ["a.pt"])
    cfg = LaunchConfig(checkpoint=["a.pt", "b.pt"], select_best=True).validate()
    assert (cfg.checkpoint, cfg.checkpoints) == ("a.pt", ["a.pt", "b.pt"])
    cfg.checkpoint = "c.pt"  # code that sets the one path keeps the list true
    assert cfg.checkpoints == ["c.pt"]


def test_select_best_s_flags_are_checked_in_one_line(capsys):
    assert main(["--select-best", "--checkpoint", "a.pt"]) == 2  # its flags are checked before that
    assert "--select-best needs --watch DIR or at least two --checkpoint" in capsys.readouterr().err


def test_look_flags_name_every_mode_that_plays_looks():
    with pytest.raises(ConfigError) as exc:
        resolve({"checkpoint": "a.pt", "max_episodes": 8})
    assert str(exc.value) == (
        "--max-episodes set the looks of --select-best, --search, --until-decided or --until-precise: add one."
    )
