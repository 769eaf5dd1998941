"""Evaluation inside the training loops users already run: two lines in a train script.

* :mod:`simeval.integrations.sb3`: ``EvalCallback``, a drop-in for Stable-Baselines3's.
* :mod:`simeval.integrations.rsl_rl`: ``evaluate_during_training`` for rsl_rl's runners
  (Isaac Lab's and mjlab's).

Each module imports its training library; this package imports none of them.
"""
