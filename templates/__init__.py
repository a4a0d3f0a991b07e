"""Source skeletons for generated code, loaded with importlib.resources."""
