"""multinode, installed by pip: the `multinode` binary and its two names,
`mn-ssh` and `mn-exec-all`, in the environment's bin directory.

There is no Python API: `python -m multinode ARGS` runs the binary with ARGS
(multinode/__main__.py).
"""
