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

# base_build NAME COMMIT: builds wqrun at COMMIT (Release, as build-bench/) in a git worktree
# under ${TMPDIR:-/tmp} kept between runs, and prints the binary's path; on failure says so
# as NAME and exits 1. For the benchmarks that compare with the build before (BASE=COMMIT).
base_build() {
  local name=$1 commit dir
  commit=$(git rev-parse --verify --quiet "$2^{commit}") || {
    echo "$name: BASE=$2 is not a commit of this repository" >&2
    exit 1
  }
  dir=${TMPDIR:-/tmp}/wqrun-base-${commit:0:12}
  if [[ ! -x $dir/build-bench/wqrun ]]; then
    git worktree remove --force "$dir" >/dev/null 2>&1 || rm -rf "$dir"
    git worktree prune
    if ! { git worktree add --detach "$dir" "$commit" &&
      cmake -S "$dir" -B "$dir/build-bench" --log-level=WARNING -DCMAKE_BUILD_TYPE=Release -DWQ_TESTS=OFF &&
      cmake --build "$dir/build-bench" -j "$(nproc)" --target wqrun; } >/dev/null 2>&1; then
      echo "$name: cannot build wqrun at $commit in $dir" >&2
      exit 1
    fi
  fi
  echo "$dir/build-bench/wqrun"
}
