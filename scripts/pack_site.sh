#!/usr/bin/env bash
# The report's Python packages for a machine without network access that already has Python 3.12, numpy, pandas
# and torch (a lent GPU node, docs/capture.md): pyproject.toml's dependencies (Dask's distributed among them) and
# nvtx, so that the one file serves the report, a capture and a sharded capture; downloaded for CPython 3.12
# on manylinux x86_64, unpacked as pip --target would lay them out (site-packages plus share/jupyter), and
# xz-compressed into one file, about 25 MB, so that it travels beside the tree within a 64 MiB copy.
# scripts/gpu_node.sh unpacks it into /tmp/site.
#   bash scripts/pack_site.sh [OUT]        # OUT: .carry/site-report.txz
set -euo pipefail
out=${1:-.carry/site-report.txz}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
deps=$(python3 - <<'PY'
import re, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
# the report's dependencies and, of the gpu extra, nvtx (a capture's ranges); the node's own: numpy and pandas
# (with torch), ninja
deps = project["dependencies"] + [d for d in project["optional-dependencies"]["gpu"] if d.startswith("nvtx")]
print(" ".join(d for d in deps if re.split(r"[<>=! ]", d)[0] not in ("numpy", "pandas")))
PY
)
# shellcheck disable=SC2086  # one word per requirement
python3 -m pip download -q -d "$work/whl" --python-version 3.12 --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_25_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --only-binary=:all: $deps
# what the node has: numpy, pandas and their dependencies, pulled in again by the resolver; and what a headless
# kernel does without (ipykernel's debugger, IPython's completion: both imported only if present), 60 MB unpacked
rm -f "$work"/whl/{numpy,pandas,python_dateutil,pytz,six,tzdata,debugpy,jedi,parso}-*.whl
mkdir "$work/site"
for w in "$work"/whl/*.whl; do (cd "$work/site" && python3 -m zipfile -e "$w" .); done
cd "$work/site"
for d in *.data; do
  [ -d "$d" ] || continue
  for sub in purelib platlib data; do [ -d "$d/$sub" ] && cp -r "$d/$sub"/. .; done
  rm -rf "$d"
done
find . -name __pycache__ -prune -exec rm -rf {} +
rm -rf share/jupyter/labextensions  # JupyterLab's front-end extensions: 5 MB a headless render never loads
cd - >/dev/null
mkdir -p "$(dirname "$out")"
tar cJf "$out.tmp" -C "$work/site" . && mv "$out.tmp" "$out"
echo "wrote $out ($(du -h "$out" | cut -f1)) from $(ls "$work"/whl | wc -l) wheels"
