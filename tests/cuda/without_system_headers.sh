#!/usr/bin/env bash
# Runs a command with the system's copies of the header-only libraries hidden (a private mount
# namespace: empty folders bound over them), as on the GPU machine and on a machine where the
# user cannot install Debian's packages: a build there must use what the sdist bundled.
#
#   bash tests/cuda/without_system_headers.sh COMMAND [ARGS...]
#
# Needs root (CI and the development machines run as root); elsewhere it says so and runs the
# command as it is.
set -euo pipefail
HIDDEN=(/usr/include/nlohmann /usr/include/xtensor /usr/include/xtl
        /usr/share/cmake/nlohmann_json /usr/lib/x86_64-linux-gnu/cmake/nlohmann_json
        /usr/lib/x86_64-linux-gnu/cmake/xtensor /usr/lib/x86_64-linux-gnu/cmake/xtl
        /usr/share/cmake/xtensor /usr/share/cmake/xtl)
if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null; then
    echo "without_system_headers: not root or no unshare: running with the system's headers visible" >&2
    exec "$@"
fi
EMPTY=$(mktemp -d /tmp/torchleak-hidden.XXXXXX)
exec unshare -m bash -c '
    empty=$1; shift
    mount --make-rprivate /
    for path in '"${HIDDEN[*]}"'; do
        if [ -d "$path" ]; then mount --bind "$empty" "$path"; echo "hidden: $path"; fi
    done
    exec "$@"
' hide "$EMPTY" "$@"
