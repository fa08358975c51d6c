#!/usr/bin/env bash
# checkov (static analysis of the terraform modules) over terraform/.
#
# checkov pins an old boto3 and other libraries that conflict with spotfleet's,
# so it gets a virtualenv of its own under build/checkov-venv, created once and
# reused (a stamp file names the installed version; bump CHECKOV_VERSION to
# upgrade). Exit status: checkov's (non-zero on any failed check). Every
# skipped check is written next to its resource as
# `#checkov:skip=CKV_...:reason`.
#
# Usage: scripts/checkov.sh [extra checkov arguments]
set -euo pipefail

CHECKOV_VERSION="${CHECKOV_VERSION:-3.3.30}"
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/build/checkov-venv"
stamp="$venv/.checkov-$CHECKOV_VERSION"
python="${PYTHON:-python3}"

if [ ! -f "$stamp" ]; then
  echo "checkov: installing checkov==$CHECKOV_VERSION into build/checkov-venv (once)" >&2
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "checkov==$CHECKOV_VERSION"
  touch "$stamp"
fi

start=$(date +%s)
# --skip-download: no calls to the Prisma/Bridgecrew platform (no network here);
# --framework terraform: only the .tf files (the tfvars examples are not plans).
status=0
"$venv/bin/checkov" \
  --directory "$root/terraform" \
  --framework terraform \
  --skip-download \
  --compact \
  --quiet \
  "$@" || status=$?
echo "checkov: exit $status in $(( $(date +%s) - start ))s" >&2
exit "$status"
