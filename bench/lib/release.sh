# Sourced by the bench/*.sh scripts (not a benchmark itself).
# release_build NAME TARGET...: builds TARGETs in build-bench/ as Release
# (no tests); on failure says so as NAME and exits 1.
release_build() {
  local name=$1
  shift
  if ! { cmake -S . -B build-bench --log-level=WARNING -DCMAKE_BUILD_TYPE=Release -DWQ_TESTS=OFF &&
    cmake --build build-bench -j "$(nproc)" --target "$@"; } >/dev/null 2>&1; then
    echo "$name: cannot build $* in build-bench/ (or set the binaries' variables)" >&2
    exit 1
  fi
}
