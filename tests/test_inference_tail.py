"""``inference_delay``'s chunk-tail mode on the native MuJoCo env: a chunked policy's previous chunk plays while
the next answer is on its way.

Oracle: the chunk's entries encode their index (entry j is j / 10, whatever the observation), so
every step of every episode says which entry of which answer it played; the schedule is written
out by hand from the rule (an answer asked at step t arrives at t + d and plays from its entry d;
the previous chunk plays on until then; zeros before an episode's first answer).
"""

from __future__ import annotations

import pytest
import torch
from tensordict.nn import TensorDictModule
from torch import nn

from simeval import Evaluator
from simeval.conditions import Condition
from simeval.envs import make_env
from simeval.policy_kinds import declare

ENV = "InvertedPendulum-v5"  # episodes end early: sub-envs restart mid-round, and a restart clears the chunk
CHUNK, EXECUTE = 4, 2


class Chunks(nn.Module):
    """Answers [n, CHUNK, 1]: entry j is j / 10, whatever the observation."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        entries = torch.arange(CHUNK, dtype=torch.float32) / 10 * self.scale
        return entries.reshape(1, CHUNK, 1).expand(obs.shape[0], -1, -1).clone()


def chunked(env=None) -> TensorDictModule:
    return declare(
        TensorDictModule(Chunks(), in_keys=["observation"], out_keys=["action"]), chunk=CHUNK, execute=EXECUTE
    )


def pendulums(condition: dict | None = None, num_envs: int = 3):
    return make_env(ENV, num_envs=num_envs, max_steps=25, obs_norm=False, condition=condition)


def expected(steps: int, d: int) -> torch.Tensor:
    """The entries played at an episode's steps 0 .. steps - 1 under the tail rule, written out step by step."""
    out, playing, base, asked, waiting, next_ask = [], False, 0, 0, False, 0
    for t in range(steps):
        for _ in range(2):  # an arrival before a query (the answer in flight lands first), and after one (d = 0)
            if waiting and t >= asked + d:
                playing, base, waiting = True, asked, False
            if _ == 0 and t >= next_ask:
                asked, waiting, next_ask = t, True, t + max(EXECUTE, d)
        out.append(min(t - base, CHUNK - 1) / 10 if playing else 0.0)
    return torch.tensor(out)


def played(condition: dict | None, seed: int = 1) -> tuple[list[torch.Tensor], dict]:
    """Each episode's actions as the env received them (before any noise), and the round's result."""
    episodes = []

    def keep(trajectories):
        mask = trajectories.get(("collector", "mask"))
        actions = trajectories.get("action")[..., 0]
        episodes.extend(actions[row, : int(mask[row].sum())].clone() for row in range(mask.shape[0]))
        return {}

    with Evaluator(
        lambda: pendulums(condition), policy_factory=chunked, num_trajectories=6, max_steps=25, seed=seed,
        metrics_fn=keep, keep_episodes=True,
    ) as ev:  # fmt: skip
        result = ev.evaluate()
    return episodes, result


@pytest.mark.parametrize("d", [1, 3, 5])
def test_the_previous_chunks_tail_plays_while_the_next_answer_is_on_its_way(d):
    episodes, result = played({"inference_delay": {"steps": d, "while_waiting": "tail"}})
    assert min(len(e) for e in episodes) < 25  # episodes ended and restarted mid-round: each started afresh
    for actions in episodes:
        assert torch.allclose(actions, expected(len(actions), d), atol=1e-6), (d, actions)


def by_schedule(d: int):
    """A plain policy that plays ``expected(., d)`` at each episode step (StepCounter's step_count): the oracle."""
    schedule = expected(64, d)

    def act(step_count: torch.Tensor) -> torch.Tensor:
        return schedule[step_count.reshape(-1).long()].reshape(*step_count.shape[:-1], 1)

    return TensorDictModule(act, in_keys=["step_count"], out_keys=["action"])


def returns(condition: dict | None, policy=None) -> list[float]:
    with Evaluator(
        lambda: pendulums(condition),
        policy_factory=policy or chunked,
        num_trajectories=6,
        max_steps=25,
        seed=1,
        keep_episodes=True,
    ) as ev:
        return list(map(float, ev.evaluate()["eval/episode_returns"]))


def test_the_env_gets_the_tail_unheld_which_differs_from_hold_and_a_delay_of_zero_is_no_condition():
    tail = returns({"inference_delay": {"steps": 3, "while_waiting": "tail"}})
    assert tail == returns(None, lambda env: by_schedule(3))  # the schedule by hand, on the nominal env
    assert tail != returns({"inference_delay": 3})  # hold: the env holds the player's output every 3 steps
    assert returns({"inference_delay": {"steps": 0, "while_waiting": "tail"}}) == returns(None)


def test_a_drawn_tail_delay_is_the_same_for_the_same_seed_and_recorded_per_episode():
    condition = {"inference_delay": {"steps": [0, 4], "while_waiting": "tail"}, "action_noise": 0.1}
    first, again = played(condition, seed=5), played(condition, seed=5)
    assert [e.tolist() for e in first[0]] == [e.tolist() for e in again[0]]
    assert first[1]["eval/episode_returns"].tolist() == again[1]["eval/episode_returns"].tolist()
    drawn = first[1]["eval/episode_conditions/inference_delay"]
    assert set(drawn) <= {0.0, 1.0, 2.0, 3.0, 4.0} and len(set(drawn)) > 1
    for actions in first[0]:  # each episode played the schedule of a delay that was drawn
        assert any(torch.allclose(actions, expected(len(actions), int(d)), atol=1e-6) for d in set(drawn)), actions


def test_the_mode_is_written_as_given_and_the_scalar_form_still_holds():
    tail = Condition.parse({"inference_delay": {"steps": [1, 3], "while_waiting": "tail"}})
    assert tail.while_waiting == "tail" and tail.values["inference_delay"] == (1.0, 3.0)
    assert tail.as_data() == {"inference_delay": {"steps": [1.0, 3.0], "while_waiting": "tail"}}
    assert Condition.parse({"inference_delay": 2}).while_waiting == "hold"
    assert Condition.parse({"inference_delay": {"steps": 2}}).as_data() == {"inference_delay": 2.0}


@pytest.mark.parametrize(
    "value, words",
    [
        ({"steps": 2, "while_waiting": "replay"}, "inference_delay.while_waiting: expected one of hold, tail"),
        ({"while_waiting": "tail"}, "inference_delay: steps is missing"),
        ({"steps": 2, "mode": "tail"}, "inference_delay: unknown key 'mode'"),
        ({"steps": -1, "while_waiting": "tail"}, "inference_delay.steps: inference_delay must be >= 0"),
        ({"steps": 1.5}, "inference_delay.steps: inference_delay is a whole number of steps"),
    ],
)
def test_a_bad_inference_delay_is_one_line_naming_the_key(value, words):
    with pytest.raises(ValueError) as err:
        Condition.parse({"inference_delay": value}, "tasks[0].conditions.slow")
    assert str(err.value).startswith(f"tasks[0].conditions.slow.{words}") and "\n" not in str(err.value)
