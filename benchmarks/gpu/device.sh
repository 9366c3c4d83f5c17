#!/usr/bin/env bash
# On the GPU machine (the device tool's), from the repository root: part K of N made by
# benchmarks/gpu/prepare.py, carried as .gpu/partK. Each part is checked and installed into
# .gpu/venv, a virtual environment over the image's own Python (its torch with CUDA stays);
# the last part puts the model's wheel together, installs situate, and runs
# benchmarks/bench_gpu.py into $OUT. The machine keeps .gpu/ between calls only while it is warm
# (30 s after a call): a part whose predecessor is missing stops at once with exit 3.
#
#   bash benchmarks/gpu/device.sh K N        (PYTHON: the image's python, default python3;
#                                            BENCH_ARGS: more arguments for bench_gpu.py)
set -euo pipefail
K=$1 N=$2
PY=${PYTHON:-python3}
V=.gpu/venv
PART=.gpu/part$K
OUT=${OUT:-.gpu/out}
mkdir -p "$OUT"
started=$(date +%s)

[ -d "$PART" ] || { echo "device.sh: $PART is not here: carry it (carry=[\"$PART\"])"; exit 2; }
(cd "$PART" && sha256sum --quiet -c SHA256SUMS) || { echo "device.sh: $PART is damaged"; exit 2; }

if [ "$K" = 1 ]; then
    rm -rf "$V" .gpu/model
    "$PY" -m venv --without-pip "$V"
    SITE=$("$V/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    # The image's packages after the environment's own: situate's pins come first, torch (with
    # CUDA) and the rest come from the image. addsitedir also reads the image's .pth files.
    "$PY" -c 'import site; print("import site; " + "; ".join(
              f"site.addsitedir({p!r})" for p in site.getsitepackages()))' > "$SITE/_image_site.pth"
    mkdir -p .gpu/model
    "$PY" -c 'import sys, torch; print("image:", sys.version.split()[0], "torch", torch.__version__,
              "cuda", torch.version.cuda, "sees a GPU:", torch.cuda.is_available())'
elif ! grep -qx "$((K - 1))" "$V/parts" 2>/dev/null; then
    echo "device.sh: part $((K - 1)) is not installed on this machine (a fresh one: the last went"
    echo "back when idle). Start again from part 1."
    exit 3
fi

shopt -s nullglob
wheels=("$PART"/*.whl)
if [ ${#wheels[@]} -gt 0 ]; then
    "$V/bin/python" -m pip install --quiet --no-index --no-deps --no-warn-script-location \
        --disable-pip-version-check "${wheels[@]}" 2>&1 | grep -v "outside environment" || true
fi
for piece in "$PART"/*.whl.[0-9]*; do cp -f "$piece" .gpu/model/; done
echo "$K" >> "$V/parts"
echo "part $K of $N installed in $(( $(date +%s) - started )) s"

if [ "$K" = "$N" ]; then
    name=$(awk '{print $2}' "$PART/MODEL.sha256")
    cat $(ls .gpu/model/"$name".* | sort) > ".gpu/model/$name"
    (cd .gpu/model && sha256sum --quiet -c "../../$PART/MODEL.sha256") \
        || { echo "device.sh: the model's wheel did not come together"; exit 2; }
    "$V/bin/python" -m pip install --quiet --no-index --no-deps --disable-pip-version-check \
        ".gpu/model/$name"
    "$V/bin/python" -m pip install --quiet --no-index --no-deps --no-build-isolation \
        --disable-pip-version-check -e .
    "$V/bin/python" -m pip check > "$OUT/pip-check.txt" 2>&1 || true
    "$V/bin/python" -m pip list --format=freeze > "$OUT/pip-freeze.txt" 2>&1 || true
    nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
    echo "ready in $(( $(date +%s) - started )) s; benchmarks/bench_gpu.py:"
    PYTHONUNBUFFERED=1 "$V/bin/python" benchmarks/bench_gpu.py --out "$OUT/gpu.json" \
        --cache .gpu/cache ${BENCH_ARGS:-} 2>&1 | tee "$OUT/gpu.log"
fi
