#!/usr/bin/env bash
# Build the native part (libvgpu.so, the fake driver, the tests) and run the
# native test suite.  The last line is "N passed, N failed"; the exit status
# is non-zero if any test failed or none ran.
#   native/run-tests.sh [FILTER]    run only tests whose name contains FILTER
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="$here/build"
cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" >/dev/null
exec "$build/tests/vgpu-tests" "$@"
