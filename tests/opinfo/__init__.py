"""The OpInfo sweep: PyTorch's `op_db` samples, transpiled and compared with eager.

`cases.py` turns OpInfo samples into small source functions, `sweep.py` builds them in
batches and classifies each; `test_opinfo.py` runs a fast subset in CI, and
`python -m tests.opinfo.sweep --all` the full sweep.
"""
