"""The `hdfs` (and `hadoop`) command a job finds on its PATH when its image has none.

OpenPAI jobs copy data with `hdfs dfs -put/-get/-ls ...`, so this POSIX sh script does the same
on the user's simulated file systems mounted at DFS_DIR; it comes last on the PATH, so an image's
own `hdfs` wins. Paths and limits: docs/cli.md.
"""

from __future__ import annotations

import shlex

from backends.entrypoint import RUNTIME_DIR, TOOLS_DIR

__all__ = ["DFS_DIR", "TOOLS_DIR", "standin_script", "standin_tools"]

DFS_DIR = f"{RUNTIME_DIR}/dfs"  # the user's simulated file systems, one folder per host:port
COMMANDS = ("hdfs", "hadoop")

_SCRIPT = r"""#!/bin/sh
# A stand-in for `hdfs dfs` / `hadoop fs` on the simulator's simulated file systems.
ROOT=@ROOT@
DEFAULT_FS=@DEFAULT@
HOME_PATH=@HOME@
USER_NAME=@USER@
MAX_KB=@MAX_KB@

die() { printf 'hdfs: %s\n' "$*" >&2; exit 1; }
usage() {
  cat >&2 <<'EOF'
Usage: hdfs dfs <command> [args]   (the simulator's stand-in; also hadoop fs)
  -ls [-R] PATH...            -cat PATH...              -mkdir [-p] PATH...
  -put|-copyFromLocal [-f] LOCAL... PATH                -get|-copyToLocal PATH... LOCAL
  -cp [-f] PATH... PATH       -mv PATH... PATH          -rm [-r] [-f] PATH...   -rmr PATH...
  -test -e|-d|-f|-z PATH      -touchz PATH...           -du [-s] PATH...
PATH: hdfs://host:port/path, /path (the default file system) or a path under the home folder.
EOF
  exit 1
}

# the file system and path of a location: sets fs, path
locate() {
  case "$1" in
    hdfs://*)
      _rest=${1#hdfs://}
      fs=${_rest%%/*}
      case "$_rest" in */*) path=/${_rest#*/} ;; *) path=/ ;; esac
      [ -n "$fs" ] || fs=$DEFAULT_FS ;;
    */*:*|*:*) die "$1: only hdfs:// locations are simulated here" ;;
    /*) fs=$DEFAULT_FS; path=$1 ;;
    *) fs=$DEFAULT_FS; path=$HOME_PATH/$1 ;;
  esac
  fs=$(printf '%s' "$fs" | tr 'A-Z' 'a-z')
  case "/$path/" in */../*) die "$1: '..' is not allowed in a path" ;; esac
  case "$fs" in .|..) die "$1: not a file system" ;; esac
  while :; do case "$path" in */) path=${path%/} ;; *) break ;; esac; done
  lp=$ROOT/$fs$path
  [ -n "$path" ] || path=/
}

# every host path a location names (its glob expanded), one a line; none when nothing matches
expand() {
  locate "$1"
  _l=$lp
  case "$_l" in
    *[*?[]*)
      for _m in $_l; do [ -e "$_m" ] && printf '%s\n' "$_m"; done ;;
    *) [ -e "$_l" ] && printf '%s\n' "$_l" ;;
  esac
  return 0
}

# the location as printed: the host path turned back into the form it was asked in
shown() {
  _rest=${1#"$ROOT"/}
  _fs=${_rest%%/*}
  _p=/${_rest#*/}
  [ "$_rest" = "$_fs" ] && _p=/
  case "$2" in hdfs://*) printf 'hdfs://%s%s\n' "$_fs" "$_p" ;; *) printf '%s\n' "$_p" ;; esac
}

room_for() {  # room_for SOURCE TARGET_FS: refuse a write past the bound
  mkdir -p "$ROOT/$2" || die "cannot create $ROOT/$2"
  _used=$(du -sk "$ROOT/$2" | { read -r k _; echo "$k"; })
  _add=$(du -sk "$1" 2>/dev/null | { read -r k _; echo "${k:-0}"; })
  if [ $((_used + _add)) -gt "$MAX_KB" ]; then
    die "hdfs://$2 holds ${_used} KB; ${_add} KB more would pass its bound of" \
      "${MAX_KB} KB (the simulator setting dfs_max_mb)"
  fi
}

ls_line() {  # ls_line HOSTPATH ASKED
  if [ -d "$1" ]; then
    printf 'drwxr-xr-x   - %s supergroup %10s %s %s\n' "$USER_NAME" 0 \
      "$(date -r "$1" '+%Y-%m-%d %H:%M')" "$(shown "$1" "$2")"
  else
    printf -- '-rw-r--r--   1 %s supergroup %10s %s %s\n' "$USER_NAME" "$(wc -c <"$1")" \
      "$(date -r "$1" '+%Y-%m-%d %H:%M')" "$(shown "$1" "$2")"
  fi
}

ls_dir() {  # ls_dir HOSTPATH ASKED RECURSIVE
  _n=0
  for _e in "$1"/* "$1"/.[!.]*; do [ -e "$_e" ] && _n=$((_n + 1)); done
  [ "$3" = yes ] || printf 'Found %s items\n' "$_n"
  for _e in "$1"/* "$1"/.[!.]*; do
    [ -e "$_e" ] || continue
    ls_line "$_e" "$2"
    if [ "$3" = yes ] && [ -d "$_e" ]; then ls_dir "$_e" "$2" yes; fi
  done
}

target_of() {  # where SOURCE goes in TARGET (into it when it is a directory)
  if [ -d "$2" ]; then printf '%s/%s\n' "$2" "$(basename "$1")"; else printf '%s\n' "$2"; fi
}

copy_in() {  # copy_in FORCE SOURCE... TARGETLOCATION  (sources on this container)
  _force=$1; shift
  _count=$#
  eval "_dst=\${$_count}"
  locate "$_dst"
  _dest=$lp
  _dfs=$fs
  mkdir -p "$ROOT/$fs" || die "cannot create $ROOT/$fs"
  [ -d "$(dirname "$_dest")" ] || die "$_dst: no such directory $(dirname "$path")"
  _i=1
  for _src in "$@"; do
    [ "$_i" -lt "$_count" ] || break
    _i=$((_i + 1))
    [ -e "$_src" ] || die "$_src: no such file or directory"
    _to=$(target_of "$_src" "$_dest")
    if [ -e "$_to" ] && [ "$_force" != yes ]; then die "$(shown "$_to" "$_dst"): file exists"; fi
    room_for "$_src" "$_dfs"
    rm -rf "$_to" 2>/dev/null
    cp -R "$_src" "$_to" || die "cannot copy $_src"
  done
}

mkdir -p "$ROOT/$DEFAULT_FS$HOME_PATH" 2>/dev/null  # the user's home, as HDFS has one
cmd=$1
[ -n "$cmd" ] || usage
shift
case "$cmd" in
  dfs|fs) ;;
  version) echo "Hadoop (paigraph's simulated file system stand-in)"; exit 0 ;;
  *) die "only 'dfs' is simulated here (got '$cmd')" ;;
esac
op=$1
[ -n "$op" ] || usage
shift
force=no; recursive=no; parents=no
case "$op" in
  -ls|-lsr)
    [ "$op" = -lsr ] && recursive=yes
    [ "$1" = -R ] && { recursive=yes; shift; }
    [ $# -gt 0 ] || set -- "$HOME_PATH"
    rc=0
    for arg in "$@"; do
      found=$(expand "$arg")
      if [ -z "$found" ]; then
        printf "ls: \`%s': No such file or directory\n" "$arg" >&2; rc=1; continue
      fi
      printf '%s\n' "$found" | while IFS= read -r p; do
        if [ -d "$p" ]; then ls_dir "$p" "$arg" "$recursive"; else ls_line "$p" "$arg"; fi
      done
    done
    exit $rc ;;
  -cat|-text)
    for arg in "$@"; do
      found=$(expand "$arg")
      [ -n "$found" ] || die "$arg: No such file or directory"
      printf '%s\n' "$found" | while IFS= read -r p; do
        [ -f "$p" ] || die "$arg: is a directory"
        cat "$p"
      done || exit 1
    done ;;
  -mkdir)
    [ "$1" = -p ] && { parents=yes; shift; }
    for arg in "$@"; do
      locate "$arg"; p=$lp
      mkdir -p "$ROOT/$fs" || die "cannot create $arg"
      if [ "$parents" = yes ]; then mkdir -p "$p" || die "cannot create $arg"
      else
        [ -e "$p" ] && die "$arg: File exists"
        mkdir "$p" 2>/dev/null || die "$arg: No such file or directory"
      fi
    done ;;
  -put|-copyFromLocal|-moveFromLocal)
    while :; do
      case "$1" in -f) force=yes; shift ;; -p|-l|-d) shift ;; *) break ;; esac
    done
    [ $# -ge 2 ] || usage
    copy_in "$force" "$@"
    if [ "$op" = -moveFromLocal ]; then
      n=$#; i=1
      for src in "$@"; do [ "$i" -lt "$n" ] && rm -rf "$src"; i=$((i + 1)); done
    fi ;;
  -get|-copyToLocal)
    while :; do case "$1" in -f|-p|-crc|-ignoreCrc) shift ;; *) break ;; esac; done
    [ $# -ge 1 ] || usage
    n=$#
    eval "dst=\${$n}"
    [ "$n" -ge 2 ] || dst=.
    i=1
    for arg in "$@"; do
      [ "$i" -lt "$n" ] || [ "$n" -eq 1 ] || break
      i=$((i + 1))
      found=$(expand "$arg")
      [ -n "$found" ] || die "$arg: No such file or directory"
      printf '%s\n' "$found" | while IFS= read -r p; do
        to=$(target_of "$p" "$dst")
        [ -e "$to" ] && die "$to: File exists"
        cp -R "$p" "$to" || die "cannot copy $arg"
      done || exit 1
      [ "$n" -eq 1 ] && break
    done ;;
  -cp|-mv)
    [ "$1" = -f ] && { force=yes; shift; }
    [ $# -ge 2 ] || usage
    n=$#
    eval "dst=\${$n}"
    locate "$dst"
    dest=$lp
    dfs=$fs
    i=1
    for arg in "$@"; do
      [ "$i" -lt "$n" ] || break
      i=$((i + 1))
      found=$(expand "$arg")
      [ -n "$found" ] || die "$arg: No such file or directory"
      printf '%s\n' "$found" | while IFS= read -r p; do
        to=$(target_of "$p" "$dest")
        if [ -e "$to" ] && [ "$force" != yes ]; then die "$(shown "$to" "$dst"): File exists"; fi
        if [ "$op" = -mv ]; then mv "$p" "$to" || die "cannot move $arg"
        else room_for "$p" "$dfs"; rm -rf "$to"; cp -R "$p" "$to" || die "cannot copy $arg"; fi
      done || exit 1
    done ;;
  -rm|-rmr|-rmdir)
    [ "$op" = -rmr ] && recursive=yes
    while :; do
      case "$1" in
        -r|-R) recursive=yes; shift ;;
        -f) force=yes; shift ;;
        -skipTrash|-safely) shift ;;
        *) break ;;
      esac
    done
    for arg in "$@"; do
      locate "$arg"
      [ "$path" = / ] && die "$arg: the root of a file system is not removed"
      found=$(expand "$arg")
      if [ -z "$found" ]; then
        [ "$force" = yes ] && continue
        die "$arg: No such file or directory"
      fi
      printf '%s\n' "$found" | while IFS= read -r p; do
        if [ -d "$p" ] && [ "$recursive" != yes ] && [ "$op" != -rmdir ]; then
          die "$arg: Is a directory"
        fi
        if [ "$op" = -rmdir ]; then rmdir "$p" || exit 1; else rm -rf "$p"; fi
        printf "Deleted %s\n" "$(shown "$p" "$arg")"
      done || exit 1
    done ;;
  -test)
    flag=$1; locate "$2"; p=$lp
    case "$flag" in
      -e) [ -e "$p" ] ;;
      -d) [ -d "$p" ] ;;
      -f) [ -f "$p" ] ;;
      -z) [ -f "$p" ] && [ ! -s "$p" ] ;;
      -s) [ -s "$p" ] ;;
      *) usage ;;
    esac
    exit $? ;;
  -touchz)
    for arg in "$@"; do
      locate "$arg"; p=$lp
      mkdir -p "$ROOT/$fs" || die "cannot create $arg"
      [ -s "$p" ] && die "$arg: Not a zero-length file"
      : >"$p" || die "$arg: cannot create"
    done ;;
  -du|-dus)
    [ "$1" = -s ] && shift
    [ "$1" = -h ] && shift
    for arg in "$@"; do
      found=$(expand "$arg")
      [ -n "$found" ] || die "$arg: No such file or directory"
      printf '%s\n' "$found" | while IFS= read -r p; do
        printf '%s  %s\n' "$(du -sk "$p" | { read -r k _; echo $((k * 1024)); })" \
          "$(shown "$p" "$arg")"
      done
    done ;;
  -help|-usage) usage ;;
  *) die "$op is not simulated here (see hdfs dfs -help)" ;;
esac
exit 0
"""


def standin_script(*, user: str, default_authority: str, max_bytes: int) -> str:
    """The stand-in for one job of `user`: its file systems, default and bound baked in."""
    q = shlex.quote
    return (
        _SCRIPT.replace("@ROOT@", q(DFS_DIR))
        .replace("@DEFAULT@", q(default_authority))
        .replace("@HOME@", q(f"/user/{user}"))
        .replace("@MAX_KB@", str(max(1, max_bytes // 1024)))
        .replace("@USER@", q(user))
    )


def standin_tools(*, user: str, default_authority: str, max_bytes: int) -> dict[str, str]:
    """`hdfs` and `hadoop`, each the same script, by name."""
    script = standin_script(user=user, default_authority=default_authority, max_bytes=max_bytes)
    return dict.fromkeys(COMMANDS, script)
