#!/bin/sh
# cpukern image entrypoint: check the runtime tuning the image sets, then run the command.
#
# LD_PRELOAD names tcmalloc. A missing file would make the loader print an error for
# every process started later, and older images made a missing allocator fatal; here
# it is dropped with one clear warning and the command runs with glibc's malloc.
if [ -n "${LD_PRELOAD:-}" ]; then
  kept=""
  for lib in $(printf '%s' "$LD_PRELOAD" | tr ':' ' '); do
    if [ -e "$lib" ]; then
      kept="${kept:+$kept:}$lib"
    else
      echo "cpukern: warning: LD_PRELOAD names $lib, which is missing; running without it" \
        "(glibc malloc is much slower for large tensors; install libtcmalloc-minimal4)" >&2
    fi
  done
  if [ -n "$kept" ]; then export LD_PRELOAD="$kept"; else unset LD_PRELOAD; fi
fi
exec "$@"
