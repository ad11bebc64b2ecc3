# Sourced by the tests in tests/dist: common set-up and checks. Each test prints what it checks
# and exits non-zero at the first failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/lib/tools.sh
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
dist=$(realpath -m "${MRSHIM_DIST:-target/dist}")   # another directory: to check that the tests catch a bad package
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# unpack_tarball ARCH: unpacks the tarball into an empty directory; prints the package root.
unpack_tarball() {
  local tgz=$dist/mrshim-$version-$1.tar.gz dir=$work/tar-$1
  [ -f "$tgz" ] || fail "$tgz missing: run scripts/package"
  mkdir "$dir"
  tar -C "$dir" -xzf "$tgz"
  echo "$dir/mrshim-$version-$1"
}

# run_arch ARCH CMD...: runs CMD natively (x86_64) or under qemu-user (aarch64).
run_arch() {
  local arch=$1
  shift
  if [ "$arch" = aarch64 ]; then qemu-aarch64-static "$@"; else "$@"; fi
}
