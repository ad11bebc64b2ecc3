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

# wheel_devinfo DEVINFO LIBIBVERBS DIR: DIR/bin/ibv_devinfo as an auditwheel-repaired wheel leaves
# a program: Debian's DEVINFO linked instead to LIBIBVERBS renamed libibverbs-abc123.so.1 (file
# and SONAME) in DIR/wheel.libs, found through its RPATH $ORIGIN/../wheel.libs, which the loader
# searches before LD_LIBRARY_PATH. Prints the program's path.
wheel_devinfo() {
  local dir=$3
  mkdir -p "$dir/bin" "$dir/wheel.libs"
  cp "$(realpath "$2")" "$dir/wheel.libs/libibverbs-abc123.so.1"
  patchelf --set-soname libibverbs-abc123.so.1 "$dir/wheel.libs/libibverbs-abc123.so.1"
  cp "$1" "$dir/bin/ibv_devinfo"
  # One change per patchelf run: Debian 12's patchelf mixes up a NEEDED rename and a new RPATH.
  patchelf --replace-needed libibverbs.so.1 libibverbs-abc123.so.1 "$dir/bin/ibv_devinfo"
  patchelf --force-rpath --set-rpath '$ORIGIN/../wheel.libs' "$dir/bin/ibv_devinfo"
  readelf -d "$dir/bin/ibv_devinfo" | grep -qF '[libibverbs-abc123.so.1]' || fail "patchelf did not rename the NEEDED entry"
  readelf -d "$dir/bin/ibv_devinfo" | grep -qF '(RPATH)              Library rpath: [$ORIGIN/../wheel.libs]' ||
    fail "patchelf did not set the RPATH"
  echo "$dir/bin/ibv_devinfo"
}

# The simulated device's firmware version: only the simulator prints it.
sim_fw='fw_ver:[[:space:]]*28.39.1002'
