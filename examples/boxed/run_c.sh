#!/bin/sh
# Runs the C example worker: $BOXED_C_WORKER if it names one already built,
# else built here first with the system compiler (cc).
set -e
bin=${BOXED_C_WORKER:-${TMPDIR:-/tmp}/actorctl-boxed-worker-c}
source=$(dirname "$0")/worker.c
if [ ! -x "$bin" ] || [ "$source" -nt "$bin" ]; then
    cc -O2 -o "$bin.$$" "$source"
    mv "$bin.$$" "$bin"
fi
exec "$bin"
