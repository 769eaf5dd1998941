"""Stands in for Isaac Sim being installed (the Kit app, which cannot run on these machines).

With it on the path, ``simeval.envs.simulators.isaaclab.app.app_launcher`` takes the
Kit route (``AppLauncher``) instead of Isaac Lab 3's kit-less one.
"""
