"""Placeholders for the names timm.data reads from torchvision.transforms at import
time (base classes such as ToTensor); the models built here never call them."""


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)

    def __init__(self, *args, **kwargs):
        raise RuntimeError(f"torchvision stub: transforms.{name} is not available")

    cls = type(name, (), {"__init__": __init__})
    globals()[name] = cls
    return cls
