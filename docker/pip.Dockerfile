# multinode in a Python image, the pip way: the wheel (packaging/build-wheel.sh)
# installed by the image's own pip, then /multinode/generic-helper. No Rust,
# sshd or ssh in the image. From a checkout:
#
#   packaging/build-wheel.sh --out wheels
#   docker build -f docker/pip.Dockerfile --build-arg BASE=YOUR_PYTORCH_IMAGE wheels
#
# The context is the folder that holds the wheel file. pip puts `multinode`,
# `mn-ssh` and `mn-exec-all` into the image's bin directory (beside each
# other, as the job environment expects). Once the wheel is on PyPI, the RUN
# line can read `pip install --no-cache-dir multinode==VERSION` instead.
# A base whose Python is the distribution's own (Debian's, Ubuntu's python3)
# refuses pip installs outside a venv (PEP 668): there, build with
# --build-arg PIP_BREAK_SYSTEM_PACKAGES=1 (python:* images need not).
# The repository's own Dockerfile (the cluster tests' image, built by
# docker/build-image.sh on a base with no pip) copies the binary instead.
ARG BASE=python:3.12-slim
FROM ${BASE}
ARG PIP_BREAK_SYSTEM_PACKAGES=0

COPY multinode-*.whl /tmp/
RUN python3 -m pip install --no-cache-dir --no-deps /tmp/multinode-*.whl \
 && rm /tmp/multinode-*.whl \
 && multinode install-helper
