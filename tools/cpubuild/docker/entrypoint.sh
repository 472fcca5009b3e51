#!/bin/sh
# cpubuild image entrypoint: check the runtime tuning the image sets, then run the command.
#
# LD_PRELOAD names tcmalloc. A missing file would make the loader print an error for
# every process started later, and older images made a missing allocator fatal; here
# it is dropped with one clear warning and the command runs with glibc's malloc.
# Shell built-ins only: every program started while LD_PRELOAD is broken repeats the
# loader's error line.
if [ -n "${LD_PRELOAD:-}" ]; then
  kept=""
  old_ifs=$IFS
  IFS=': '
  set -f
  for lib in $LD_PRELOAD; do
    if [ -e "$lib" ]; then
      kept="${kept:+$kept:}$lib"
    else
      why=""
      case "$lib" in *tcmalloc*) why=" (glibc malloc instead of tcmalloc: slower for large tensors; apt-get install libtcmalloc-minimal4)" ;; esac
      echo "entrypoint: warning: LD_PRELOAD names $lib, which is missing; running without it$why" >&2
    fi
  done
  set +f
  IFS=$old_ifs
  if [ -n "$kept" ]; then export LD_PRELOAD="$kept"; else unset LD_PRELOAD; fi
fi
exec "$@"
