#!/bin/sh
# The image's install steps, in one place: deploy/docker/Dockerfile runs this script in its build
# stage, and tests/deploy/test_image.py runs the same script without Docker (then the demo).
#
#   install.sh SOURCE PREFIX WHEELHOUSE
#
# SOURCE is a copy of the repository holding what the Dockerfile copies (pyproject.toml,
# README.md, src/, batch/, streaming/, deploy/docker/). The wheel is built into WHEELHOUSE (left
# out of the final image), then installed with its dependencies into a fresh virtual environment
# PREFIX/venv; the spark-submit entry points (batch/*.py, streaming/serve.py) and the container
# entrypoint land beside it. Everything the image runs is under PREFIX.
set -eu

if [ "$#" -ne 3 ]; then
  echo "usage: install.sh SOURCE PREFIX WHEELHOUSE" >&2
  exit 2
fi
src=$1
prefix=$2
wheels=$3
python=${PYTHON:-python3}

"$python" -m pip wheel --no-deps --wheel-dir "$wheels" "$src"
"$python" -m venv "$prefix/venv"
"$prefix/venv/bin/python" -m pip install "$wheels"/lakefs_gc-*.whl
"$prefix/venv/bin/python" -m pip check

mkdir -p "$prefix/batch" "$prefix/streaming"
cp "$src"/batch/*.py "$prefix/batch/"
cp "$src"/streaming/*.py "$prefix/streaming/"
cp "$src/deploy/docker/entrypoint.sh" "$prefix/entrypoint.sh"
chmod 0755 "$prefix/entrypoint.sh"
"$prefix/venv/bin/lakefs-gc" --version
