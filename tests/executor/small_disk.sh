#!/bin/sh
# small_disk.sh: runs a command with directories on small file systems that
# really fill up, for tests of what llmplan does when a disk is full
# (tests/executor/disk_full_test.cc).
#
#   small_disk.sh DIR=KIB [DIR=KIB ...] -- COMMAND [ARG...]
#   small_disk.sh --mode          prints the mode this machine allows
#
# tmpfs mode: in a private mount namespace (unshare -rm, which needs no
# privilege where user namespaces are allowed), each DIR becomes a tmpfs of
# KIB KiB for the command alone; a write past it fails with ENOSPC, as on a
# full disk. The tmpfs goes when the command ends, so each DIR's contents
# are first copied to DIR.after.
#
# rlimit mode, where mount namespaces are not permitted (or when
# LLMPLAN_SMALL_DISK=rlimit): the command runs with RLIMIT_FSIZE at the
# smallest KIB and SIGXFSZ ignored, so a write that would make any file
# larger than that fails with EFBIG instead. DIR.after is a copy of DIR.
#
# The first line on stderr names the mode ("small_disk: tmpfs" or
# "small_disk: rlimit"); the exit status is the command's (125: the script
# itself failed).
set -u

mode() {
  if [ "${LLMPLAN_SMALL_DISK:-}" = rlimit ]; then echo rlimit; return; fi
  probe=$(mktemp -d) || { echo rlimit; return; }
  if unshare -rm sh -c 'mount -t tmpfs -o size=4k tmpfs "$1"' sh "$probe" 2>/dev/null; then
    echo tmpfs
  else
    echo rlimit
  fi
  rmdir "$probe"
}

# The DIR=KIB arguments, up to "--", are kept in $specs (newline-separated).
parse() {
  specs=""
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    case "$1" in
      *=*) specs="$specs$1
" ;;
      *) echo "small_disk: expected DIR=KIB, got '$1'" >&2; exit 125 ;;
    esac
    shift
  done
  [ $# -gt 1 ] || { echo "small_disk: usage: small_disk.sh DIR=KIB... -- COMMAND..." >&2; exit 125; }
}

copy_out() {
  printf '%s' "$specs" | while IFS= read -r spec; do
    dir=${spec%=*}
    rm -rf "$dir.after" && mkdir -p "$dir.after" && cp -a "$dir/." "$dir.after/" || exit 125
  done
}

if [ "${1:-}" = "--mode" ]; then mode; exit 0; fi

if [ "${SMALL_DISK_INSIDE:-}" = 1 ]; then
  # In the namespace: mount, run, copy out.
  parse "$@"
  while [ "$1" != "--" ]; do shift; done
  shift
  printf '%s' "$specs" | while IFS= read -r spec; do
    dir=${spec%=*}
    kib=${spec##*=}
    mkdir -p "$dir" && mount -t tmpfs -o "size=${kib}k" tmpfs "$dir" || exit 125
  done || exit 125
  unset SMALL_DISK_INSIDE
  "$@"
  status=$?
  copy_out || exit 125
  exit $status
fi

parse "$@"
case $(mode) in
  tmpfs)
    echo "small_disk: tmpfs" >&2
    SMALL_DISK_INSIDE=1 exec unshare -rm sh "$0" "$@"
    ;;
  *)
    echo "small_disk: rlimit" >&2
    smallest=""
    for spec in $specs; do
      kib=${spec##*=}
      mkdir -p "${spec%=*}" || exit 125
      if [ -z "$smallest" ] || [ "$kib" -lt "$smallest" ]; then smallest=$kib; fi
    done
    while [ "$1" != "--" ]; do shift; done
    shift
    # Ignored here, ignored in the command (exec keeps an ignored signal
    # ignored): the write fails with EFBIG instead of killing the process.
    trap '' XFSZ
    ( prlimit --fsize=$((smallest * 1024)) -- "$@" )
    status=$?
    copy_out || exit 125
    exit $status
    ;;
esac
