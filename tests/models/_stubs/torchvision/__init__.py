"""A stand-in for torchvision, only so that `import timm` works on this machine.

timm 1.0.x imports `torchvision.ops.misc.FrozenBatchNorm2d` at import time
(timm/layers/create_norm.py, norm_act.py); PyPI's torchvision wheel is a CUDA build
that does not import with torch 2.13+cpu (`operator torchvision::nms does not exist`).
tests/models/factories.py puts this directory on sys.path only when the real
torchvision cannot be imported. The models built here never use FrozenBatchNorm2d.
"""

__version__ = "0.0.0+stub"
