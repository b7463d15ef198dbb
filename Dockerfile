# The multinode image of the cluster tests (tests/cluster/), and the layout a
# platform image uses: the binary, its two aliases, and /multinode/generic-helper.
#
# Build it with docker/build-image.sh: the context is a small staging folder
# that the script makes (the static binary and helpers/generic-helper), not
# the repository root. The base image is built locally, with no registry, by
# docker/build-base-image.sh.
#
# The pip way, for an image with Python (an NGC PyTorch image, say), is
# docker/pip.Dockerfile: the wheel (packaging/build-wheel.sh) installed by
# the image's pip, `pip install multinode` once it is published. This one
# copies the binary, as the cluster tests' base image has no pip.
#
# No ENTRYPOINT: the cluster tests run `multinode agent -- JOB` themselves.
# BASE: the base image's tag (docker/build-image.sh passes MULTINODE_BASE_IMAGE).
ARG BASE=multinode-base:bookworm
FROM ${BASE}

COPY multinode /usr/local/bin/multinode
# The binary dispatches on argv[0].
RUN ln -s multinode /usr/local/bin/mn-ssh \
 && ln -s multinode /usr/local/bin/mn-exec-all
COPY generic-helper /multinode/generic-helper
