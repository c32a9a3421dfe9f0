# ab-common.sh — what ab_steps.sh and ab_kernels.sh share, sourced after each has set $usage and
# $script: the builds ($variants: NAME:BENCH:MODULE ...), the cases ($cases: WORKLOAD:MODE ...)
# and --stats ($stats) from the arguments 2 to 4, and a temporary directory ($tmp) removed at
# exit. ab_build NAME:BENCH:MODULE sets $name, $bench and $module.
variants=${2:?missing the builds (NAME:BENCH:MODULE ...); usage: $usage}
cases=${3:?missing the cases (WORKLOAD:MODE ...); usage: $usage}
stats=${4:-}
[ -z "$stats" ] || [ "$stats" = --stats ] || { echo "$script: unknown option '$stats'" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ab_build() {
    name=${1%%:*}
    bench=${1#*:}
    module=${bench#*:}
    bench=${bench%%:*}
}
