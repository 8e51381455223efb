#!/usr/bin/env bash
# The preconditions of a step of the Makefile, checked before it starts (issue 19 item 5): each failure is one line on
# stderr, "<step>: <what> -> <what to do>", and the exit code vramkit/errors.py declares for it (the README's
# table and `vramkit --help` list them; `make` prints it as "Error N"). Needs only bash and coreutils: it runs
# before any virtualenv exists.
#
#   scripts/precheck.sh STEP CHECK ARGS... [-- CHECK ARGS...]...
#     python PY MAJOR.MINOR     PY runs and is at least that version          (25, NO_PYTHON)
#     imports PY MODULE...      PY imports each module                          (25, NO_PYTHON)
#     disk DIR GIB              DIR's file system has GIB free                  (14, HOST_MEMORY)
#     ram GIB                   MemAvailable is at least GIB                    (14, HOST_MEMORY)
#     isa FLAG|FLAG...          /proc/cpuinfo has one of the flags              (22, HOST_CPU)
#     dir DIR FILE              DIR is given and holds FILE                     (64, BAD_INPUT)
#     lib NAME                  ldconfig knows the shared library               (25, NO_PYTHON: a set-up step's need)
set -u
step=${1:?usage: precheck.sh STEP CHECK ARGS... [-- CHECK ARGS...]}; shift
NO_PYTHON=25 HOST_MEMORY=14 HOST_CPU=22 BAD_INPUT=64

refuse() { echo "$step: $2 -> $3" >&2; exit "$1"; }

check() {
  local what=$1; shift
  case $what in
    python)
      local py=$1 want=$2 have
      command -v "$py" > /dev/null || refuse $NO_PYTHON "no $py" "install Python >= $want, or point the Makefile variable at one"
      have=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2> /dev/null) \
        || refuse $NO_PYTHON "$py does not run" "point the Makefile variable at a working Python >= $want"
      [ "$(printf '%s\n%s\n' "$want" "$have" | sort -V | head -1)" = "$want" ] \
        || refuse $NO_PYTHON "$py is Python $have, older than $want" "install Python >= $want (e.g. python3.11), then PYTHON=python3.11" ;;
    imports)
      local py=$1 mod; shift
      command -v "$py" > /dev/null || [ -x "$py" ] || refuse $NO_PYTHON "no $py" "make setup-gpu builds .venv-gpu, or SERVER_PYTHON=/path/to/python"
      for mod in "$@"; do
        "$py" -c "import $mod" > /dev/null 2>&1 || refuse $NO_PYTHON "$py cannot import $mod" \
          "make setup-gpu (and make setup-kt-native for kt_kernel), or SERVER_PYTHON=a Python that has it"
      done ;;
    disk)
      local dir=$1 gib=$2 free
      mkdir -p "$dir" 2> /dev/null
      free=$(df -Pk "$dir" 2> /dev/null | awk 'NR == 2 {print int($4 / 1048576)}')
      [ -n "$free" ] || refuse $HOST_MEMORY "cannot read the free disk space of $dir" "check that $dir is writable"
      [ "$free" -ge "$gib" ] || refuse $HOST_MEMORY "$dir has $free GiB free, this step needs about $gib GiB" "free disk space, or point it elsewhere" ;;
    ram)
      local gib=$1 avail
      avail=$(awk '/^MemAvailable:/ {print int($2 / 1048576)}' /proc/meminfo 2> /dev/null)
      [ -n "$avail" ] || refuse $HOST_MEMORY "cannot read MemAvailable from /proc/meminfo" "run it on Linux"
      [ "$avail" -ge "$gib" ] || refuse $HOST_MEMORY "$avail GiB of RAM available, this step needs about $gib GiB" "close programs, or run it on a machine with more RAM" ;;
    isa)
      local flag found=
      for flag in ${1//|/ }; do grep -qw "$flag" /proc/cpuinfo 2> /dev/null && found=$flag && break; done
      [ -n "$found" ] || refuse $HOST_CPU "this CPU has none of: ${1//|/, }" "run this step on a CPU that has one (see README: MoE on 16 GB)" ;;
    dir)
      local dir=$1 file=$2
      [ -n "$dir" ] || refuse $BAD_INPUT "no folder given" "pass the folder that holds $file (e.g. MODEL_DIR=/models/...)"
      [ -d "$dir" ] || refuse $BAD_INPUT "folder $dir does not exist" "pass the folder that holds $file"
      [ -e "$dir/$file" ] || refuse $BAD_INPUT "$dir holds no $file" "pass the folder that holds $file" ;;
    lib)
      ldconfig -p 2> /dev/null | grep -q "$1" || refuse $NO_PYTHON "the shared library $1 is missing" \
        "apt-get install ${2:-the package that ships it}" ;;
    *) refuse $BAD_INPUT "unknown check '$what'" "see scripts/precheck.sh" ;;
  esac
}

args=()
for a in "$@" --; do
  if [ "$a" = "--" ]; then
    [ ${#args[@]} -gt 0 ] && check "${args[@]}"
    args=()
  else
    args+=("$a")
  fi
done
exit 0
