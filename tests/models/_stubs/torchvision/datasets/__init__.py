"""Placeholders for the dataset classes timm.data imports (see ../transforms)."""


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)

    def __init__(self, *args, **kwargs):
        raise RuntimeError(f"torchvision stub: datasets.{name} is not available")

    cls = type(name, (), {"__init__": __init__})
    globals()[name] = cls
    return cls
