"""Stand-in for isaaclab.app.AppLauncher with the behaviour simeval relies on.

Like the real one it adds its flags to a caller's parser and refuses a parser
that already defines one of them; constructing it records whether torch was
already imported and the arguments it got (to $ISAACLAB_STANDIN_RECORD).
"""

import json
import os
import sys

_FLAGS = ("--headless", "--livestream", "--enable_cameras", "--device", "--experience")


class AppLauncher:
    @staticmethod
    def add_app_launcher_args(parser):
        existing = {opt for action in parser._actions for opt in action.option_strings}
        clash = [f for f in _FLAGS if f in existing]
        if clash:
            raise ValueError(f"The parser already defines AppLauncher arguments: {clash}")
        parser.add_argument("--headless", action="store_true", default=False)
        parser.add_argument("--livestream", type=int, default=-1)
        parser.add_argument("--enable_cameras", action="store_true", default=False)
        parser.add_argument("--device", default="cuda:0")
        parser.add_argument("--experience", default="")

    def __init__(self, args):
        record = {
            "torch_loaded": "torch" in sys.modules,
            "headless": args.headless,
            "livestream": args.livestream,
            "enable_cameras": args.enable_cameras,
            "device": args.device,
            "pid": os.getpid(),
        }
        with open(os.environ["ISAACLAB_STANDIN_RECORD"], "a") as f:
            f.write(json.dumps(record) + "\n")
        self.app = object()
