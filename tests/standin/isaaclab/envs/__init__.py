"""Stand-in env classes: torchrl's GymWrapper checks envs against these when Isaac Lab is present."""


class ManagerBasedEnv:
    pass


class DirectRLEnv:
    pass


class DirectMARLEnv:
    pass
