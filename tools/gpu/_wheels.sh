# Sourced by the commands a lent machine runs (run_chunk.sh, ood_bench.sh): installs the carried
# wheels (.whl/) into a fresh folder for this command only (WHEELS=0: the CPU rehearsal here,
# which has them) and points Python at them and at src/; one torch thread per process.
python=${PYTHON:-python3}
site=$(mktemp -d)
if [ "${WHEELS:-1}" = 1 ]; then
  "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl \
    || exit 2
fi
export PYTHONPATH="$site:$PWD/src" PYTHONUNBUFFERED=1 RLGAUNTLET_THREADS=1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
