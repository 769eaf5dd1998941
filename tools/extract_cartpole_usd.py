"""Write simeval/data/isaaclab/cartpole.usda: Isaac Lab's cartpole robot, offline.

Isaac Lab's cartpole config loads ``cartpole.usd`` from NVIDIA's asset server.
The ``isaaclab`` 3.0 wheel carries a flattened stage of that task (a test
"golden stage"), which holds the same robot: bodies, masses, joints, limits and
collision boxes. This copies env_0's robot out of it into a stand-alone layer
(default prim ``/Robot``) with the PhysX-only schemas removed, so a kit-less
Isaac Lab can spawn it with ``UsdFileCfg``. Run with the Isaac Lab venv:

    .venv-isaaclab/bin/python tools/extract_cartpole_usd.py
"""

from __future__ import annotations

import os
import sys

GOLDEN = "isaaclab/source/isaaclab_tasks/test/golden_stages/cartpole/newton-isaacsim_rtx_renderer-rgb.usda"
SOURCE_ROBOT = "/World/envs/env_0/Robot"
OUT = os.path.join(os.path.dirname(__file__), "..", "simeval", "data", "isaaclab", "cartpole.usda")


def main() -> None:
    import sysconfig

    from pxr import Sdf

    src_path = os.path.join(sysconfig.get_paths()["purelib"], GOLDEN)
    if not os.path.exists(src_path):
        sys.exit(f"{src_path} not found: run this with the Isaac Lab 3.0 venv (make isaaclab).")
    src = Sdf.Layer.FindOrOpen(src_path)
    dst = Sdf.Layer.CreateAnonymous(".usda")
    dst.ImportFromString('#usda 1.0\n(\n    kilogramsPerUnit = 1\n    metersPerUnit = 1\n    upAxis = "Z"\n)\n')
    for prim in src.rootPrims:
        if prim.name.startswith("Flattened_Prototype_"):
            Sdf.CopySpec(src, prim.path, dst, prim.path)
    Sdf.CreatePrimInLayer(dst, "/Robot")
    Sdf.CopySpec(src, SOURCE_ROBOT, dst, "/Robot")
    dst.defaultPrim = "Robot"
    _clean(dst)
    text = dst.ExportToString().replace(SOURCE_ROBOT, "/Robot")
    out = os.path.abspath(OUT)
    with open(out, "w") as f:
        f.write(f"#usda 1.0\n# Extracted by tools/extract_cartpole_usd.py from the isaaclab 3.0.0 wheel's {GOLDEN}\n")
        f.write(text.split("\n", 1)[1])
    print(f"wrote {out}")


def _clean(layer) -> None:
    """Drop PhysX-only schemas and attributes, materials, and the robot's placement."""
    from pxr import Sdf

    def visit(path):
        spec = layer.GetPrimAtPath(path)
        if spec is None:
            return
        schemas = spec.GetInfo("apiSchemas") if spec.HasInfo("apiSchemas") else None
        if schemas is not None:
            items = [s for s in schemas.GetAddedOrExplicitItems() if not s.startswith("Physx")]
            spec.SetInfo("apiSchemas", Sdf.TokenListOp.CreateExplicit(items))
        for name in [a.name for a in spec.attributes]:
            if name.startswith("physx"):
                spec.RemoveProperty(spec.attributes[name])
        for name in [r.name for r in spec.relationships]:
            if name == "material:binding":
                spec.RemoveProperty(spec.relationships[name])
        for child in list(spec.nameChildren):
            if child.name == "Looks":
                del spec.nameChildren[child.name]
    layer.Traverse(Sdf.Path.absoluteRootPath, visit)
    robot = layer.GetPrimAtPath("/Robot")
    robot.attributes["xformOp:translate"].default = (0.0, 0.0, 0.0)


if __name__ == "__main__":
    main()
