#!/usr/bin/env bash
# Builds quantgate's pinned container image with buildah (chroot isolation; docs/image.md).
#
# 1. Base: a Debian 12 (bookworm) root filesystem made by debootstrap (--variant=minbase plus
#    RUNTIME_PACKAGES, what `ldd` of the binary and of the ggml CPU modules needs beyond
#    minbase), cleaned of what differs between two builds (logs, caches, machine-id, hostname,
#    password ages), every mtime clamped to SOURCE_DATE_EPOCH and packed as a sorted tar with
#    numeric owners. Its sha256 and the package list (dpkg-query) go to a manifest. Both are
#    cached outside the clone in ${QUANTGATE_CACHE:-~/.cache/quantgate}/image/KEY, KEY being the
#    sha256 of this script and of the mirror, so a second run reuses them (no network).
# 2. The tar is imported as image localhost/quantgate-base:bookworm-KEY, also tagged
#    localhost/quantgate-base:bookworm (`buildah from scratch`, `buildah add`,
#    `buildah commit --timestamp`); its image ID is the base's digest (out/image/base-digest).
# 3. The quantgate image is built from ./Containerfile with `buildah bud --isolation chroot`,
#    FROM the base by that digest, in a network namespace of its own (`unshare --net`: the
#    build reads only local storage and the context out/image/context, which this script
#    fills with the binary, its ggml CPU modules and the llama.cpp libraries it links).
# 4. A smoke run in the image (`quantgate --version` as the image's user, no network), then the
#    image ID (`sha256:` + 64 hex, stable across a registry push, unlike a manifest digest of
#    compressed layers) is written to out/image/digest and printed as the last line of stdout.
#
# Progress and figures go to stderr. Needs root (debootstrap, buildah's storage).
#
# Usage: scripts/build-image.sh
#   QUANTGATE_BIN             the binary to package (default: a release build of this clone,
#                             built with cargo when absent)
#   QUANTGATE_DEBIAN_MIRROR   the Debian mirror (default http://deb.debian.org/debian; a
#                             snapshot.debian.org URL pins the package versions too)
#   QUANTGATE_IMAGE_NAME      the image's name (default localhost/quantgate)
set -euo pipefail
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$0")/.."

# Pinned inputs. Changing any line of this script changes the base's cache key.
SOURCE_DATE_EPOCH=1764547200 # 2025-12-01T00:00:00Z: mtimes clamped to it, images created at it
SUITE=bookworm
VARIANT=minbase
RUNTIME_PACKAGES=(libgomp1) # ggml's OpenMP runtime; libstdc++6 and libgcc-s1 come with minbase
MIRROR=${QUANTGATE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
BASE_NAME=localhost/quantgate-base
IMAGE_NAME=${QUANTGATE_IMAGE_NAME:-localhost/quantgate}
export SOURCE_DATE_EPOCH LC_ALL=C TZ=UTC

log() { echo "build-image: $*" >&2; }
die() {
  echo "build-image: $*" >&2
  exit 1
}
t0=$(date +%s)
elapsed() { echo "$(($(date +%s) - t0)) s"; }

[ "$(id -u)" = 0 ] || die "run as root (debootstrap and buildah's image storage need it)"
for t in buildah debootstrap dpkg-query tar sha256sum unshare flock ldd; do
  command -v "$t" >/dev/null || die "$t is missing: run scripts/setup.sh (it installs buildah and debootstrap)"
done

key=$({ cat "$self"; echo "$MIRROR"; } | sha256sum | cut -c1-16)
cache_root=${QUANTGATE_CACHE:-$HOME/.cache/quantgate}/image
cache=$cache_root/$key
out=out/image
mkdir -p "$cache_root" "$out"
# One build at a time on this machine (the cache, buildah's tags and out/image are shared).
exec 9>"$cache_root/.lock"
flock 9
[ ! -d "$cache" ] || touch "$cache"
# Entries of other keys (earlier versions of this script) unused for 7 days are removed.
find "$cache_root" -mindepth 1 -maxdepth 1 -type d ! -name "$key" ! -name '.*' -mtime +7 \
  -exec rm -rf --one-file-system {} +

tmp=""
ctrs=()
cleanup() {
  local c m
  for c in "${ctrs[@]}"; do buildah rm "$c" >/dev/null 2>&1 || true; done
  if [ -n "$tmp" ] && [ -d "$tmp" ]; then
    # debootstrap mounts proc and sys in the target; never delete through a mount.
    for m in $(awk -v p="$tmp/" 'index($2, p) == 1 { print $2 }' /proc/mounts | sort -r); do
      umount -l "$m" || true
    done
    rm -rf --one-file-system "$tmp"
  fi
}
trap cleanup EXIT

# --- 1. The base root filesystem (cached) -------------------------------------------------------
manifest_sha() { awk '$1 == "tar_sha256" { print $2 }' "$cache/manifest.txt"; }
if [ -f "$cache/manifest.txt" ] && [ -f "$cache/base.tar" ] &&
  [ "$(sha256sum "$cache/base.tar" | cut -d' ' -f1)" = "$(manifest_sha)" ]; then
  log "base: cached $cache/base.tar ($(elapsed))"
else
  log "base: debootstrap --variant=$VARIANT $SUITE from $MIRROR (+ ${RUNTIME_PACKAGES[*]})"
  tmp=$(mktemp -d "$cache_root/.build.XXXXXX")
  root=$tmp/root
  includes=$(IFS=,; echo "${RUNTIME_PACKAGES[*]}")
  if ! debootstrap --variant="$VARIANT" --include="$includes" --components=main \
    "$SUITE" "$root" "$MIRROR" >"$tmp/debootstrap.log" 2>&1; then
    tail -n 30 "$tmp/debootstrap.log" >&2
    die "debootstrap failed (log above)"
  fi
  # What differs between two debootstraps of the same packages, or belongs to the host.
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin \
    "$root"/var/lib/apt/lists/* "$root"/var/cache/ldconfig/aux-cache \
    "$root"/var/lib/dpkg/*-old "$root"/var/cache/debconf/*-old "$root"/etc/*- \
    "$root"/etc/machine-id "$root"/var/lib/dbus/machine-id "$root"/etc/hostname \
    "$root"/tmp/* "$root"/var/tmp/* "$root"/debootstrap
  find "$root/var/log" -type f ! -size 0 -delete # dpkg, apt, alternatives, bootstrap logs
  : >"$root/etc/resolv.conf"                     # debootstrap copies the host's
  # Last password change (days since 1970) is the day of the build: pin it to the epoch's day.
  for f in "$root/etc/shadow"; do
    sed -i -E "s/^([^:]*:[^:]*:)[0-9]+:/\1$((SOURCE_DATE_EPOCH / 86400)):/" "$f"
  done
  for d in proc sys; do
    [ -z "$(ls -A "$root/$d")" ] || die "$root/$d is not empty after debootstrap"
  done
  dpkg-query --admindir="$root/var/lib/dpkg" -W \
    -f='${Package}\t${Version}\t${Architecture}\n' | sort >"$tmp/packages.tsv"
  # The libraries the base provides (file names), to tell what the payload must carry.
  find "$root/usr/lib" \( -type f -o -type l \) -name 'lib*.so*' -printf '%f\n' | sort -u \
    >"$tmp/base-libs.txt"
  # /dev is left empty: every runtime mounts its own. Owners stay as the packages set them
  # (numeric; /etc/shadow is group shadow), so no --owner/--group override.
  tar -C "$root" --sort=name --format=gnu --numeric-owner \
    --mtime="@$SOURCE_DATE_EPOCH" --clamp-mtime \
    --exclude='./dev/*' -cf "$tmp/base.tar" .
  sha=$(sha256sum "$tmp/base.tar" | cut -d' ' -f1)
  {
    echo "# quantgate base root filesystem: scripts/build-image.sh (docs/image.md)"
    echo "key $key"
    echo "suite $SUITE"
    echo "variant $VARIANT"
    echo "include ${RUNTIME_PACKAGES[*]}"
    echo "mirror $MIRROR"
    echo "debootstrap $(dpkg-query -W -f='${Version}' debootstrap 2>/dev/null || echo unknown)"
    echo "source_date_epoch $SOURCE_DATE_EPOCH"
    echo "tar_sha256 $sha"
    echo "tar_bytes $(stat -c %s "$tmp/base.tar")"
    echo "packages $(wc -l <"$tmp/packages.tsv")"
    sed 's/^/package /' "$tmp/packages.tsv"
  } >"$tmp/manifest.txt"
  mkdir -p "$cache"
  mv "$tmp/base.tar" "$tmp/base-libs.txt" "$cache/"
  mv "$tmp/manifest.txt" "$cache/" # last: its presence marks a complete cache entry
  cleanup
  tmp=""
  log "base: built $cache/base.tar sha256 $sha ($(elapsed))"
fi
base_sha=$(manifest_sha)
cp "$cache/manifest.txt" "$out/base-manifest.txt"

# --- 2. The base image ----------------------------------------------------------------------------
image_id() { # the image ID (sha256:…) of a name, or nothing
  { buildah images --no-trunc --format '{{.ID}}' "$1" 2>/dev/null || true; } |
    head -n 1 | sed 's/^\([0-9a-f]\)/sha256:\1/'
}
base_ref=$BASE_NAME:$SUITE-$key
base_id=$(image_id "$base_ref")
if [ -n "$base_id" ] && [ "$base_id" = "$(cat "$cache/base-image-id" 2>/dev/null)" ]; then
  log "base image: present $base_ref $base_id ($(elapsed))"
else
  ctr=$(buildah from --pull=never scratch)
  ctrs+=("$ctr")
  buildah add --quiet "$ctr" "$cache/base.tar" / >/dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --label io.quantgate.base.tar-sha256="$base_sha" \
    --label io.quantgate.base.suite="$SUITE" "$ctr"
  id=$(buildah commit --quiet --rm --timestamp "$SOURCE_DATE_EPOCH" --identity-label=false \
    "$ctr" "$base_ref")
  ctrs=()
  base_id=sha256:${id#sha256:}
  echo "$base_id" >"$cache/base-image-id"
  log "base image: imported $base_ref $base_id ($(elapsed))"
  # Bases of earlier versions of this script.
  for ref in $(buildah images --format '{{.Name}}:{{.Tag}}' 2>/dev/null | grep "^$BASE_NAME:" || true); do
    [ "$ref" = "$base_ref" ] || [ "$ref" = "$BASE_NAME:$SUITE" ] || buildah rmi "$ref" >/dev/null 2>&1 || true
  done
fi
# The name the image's label gives (the key-free name keeps the final image's ID a function of
# the base's content, not of this script's text).
buildah tag "$base_id" "$BASE_NAME:$SUITE"
echo "$base_id" >"$out/base-digest"

# --- 3. The build context: binary, ggml CPU modules, llama.cpp libraries ----------------------------
if [ -n "${QUANTGATE_BIN:-}" ]; then
  bin=$QUANTGATE_BIN
else
  target=$(scripts/cargo-target.sh)
  bin=$target/release/quantgate
  if [ ! -x "$bin" ]; then
    log "building the release binary"
    CARGO_TARGET_DIR=$target cargo build --release -p quantgate >&2
  fi
fi
[ -x "$bin" ] || die "$bin: no quantgate binary"
# The modules live in the sys crate's out/backends, beside out/lib where libllama.so.0 is
# found through the binary's run path; a binary copied elsewhere has them beside it.
libllama=$(ldd "$bin" | awk '$1 == "libllama.so.0" && $3 ~ /^\// { print $3 }')
modules_dir=$(dirname "$bin")
if [ -n "$libllama" ] && compgen -G "$(dirname "$(dirname "$libllama")")/backends/libggml-cpu-*.so" >/dev/null; then
  modules_dir=$(dirname "$(dirname "$libllama")")/backends
fi
modules=("$modules_dir"/libggml-cpu-*.so)
[ -e "${modules[0]}" ] || die "no libggml-cpu-*.so beside $bin or in the sys crate's out/backends"

ctx=$out/context
rm -rf "$ctx"
mkdir -p "$ctx/bin" "$ctx/lib"
cp "$bin" "$ctx/bin/quantgate"
cp "${modules[@]}" "$ctx/bin/"
# Every library the binary and the modules load: from the base, or carried in lib/. The
# modules find libggml-base.so.0 in the process that loads them (ldd says "not found" for it),
# so they may only need what the binary's own libraries provide.
bin_libs=$(ldd "$bin" | awk '$2 == "=>" { print $1, $3 }')
mod_libs=$(ldd "${modules[@]}" | awk '$2 == "=>" { print $1, $3 }')
printf '%s\n%s\n' "$bin_libs" "$mod_libs" | sort -u | while read -r name path; do
  if [ "$path" = not ]; then
    echo "$bin_libs" | awk -v n="$name" '$1 == n && $2 != "not" { f = 1 } END { exit !f }' ||
      die "$name: not found (ldd of $bin and its modules)"
    continue
  fi
  if grep -qxF "$name" "$cache/base-libs.txt"; then
    continue
  fi
  case "$path" in
    /lib/* | /usr/lib/*) die "$name ($path) is not in the base: add its package to RUNTIME_PACKAGES" ;;
  esac
  cp -L "$path" "$ctx/lib/$name"
done
cp "$out/base-manifest.txt" "$ctx/base-manifest.txt"
(cd "$ctx" && find . -type f ! -name SHA256SUMS | sort | sed 's|^\./||' | xargs sha256sum >SHA256SUMS)
version=$("$bin" --version | head -n 1)
log "context: $ctx ($(du -sh "$ctx" | cut -f1): quantgate, ${#modules[@]} CPU modules, $(ls "$ctx/lib" | tr '\n' ' '))"

# --- 4. The quantgate image ----------------------------------------------------------------------
old=$(cat "$out/digest" 2>/dev/null || true)
rm -f "$out/digest" "$out/iid"
unshare --net -- buildah bud --quiet --isolation chroot --pull=never --layers=false \
  --timestamp "$SOURCE_DATE_EPOCH" --identity-label=false \
  --build-arg BASE="$base_id" --build-arg BASE_REF="$BASE_NAME:$SUITE" \
  --build-arg BASE_TAR_SHA256="$base_sha" --build-arg VERSION="$version" \
  --iidfile "$out/iid" -f Containerfile -t "$IMAGE_NAME:latest" "$ctx" >/dev/null
digest=$(cat "$out/iid")
digest=sha256:${digest#sha256:}
rm -f "$out/iid"
if [ -n "$old" ] && [ "$old" != "$digest" ]; then
  buildah rmi "$old" >/dev/null 2>&1 || true # the previous build, unless a container uses it
fi
log "image: $IMAGE_NAME:latest $digest ($(elapsed))"

# Smoke run: the image's user, no network, the binary and its libraries resolve.
ctr=$(buildah from --pull=never "$digest")
ctrs+=("$ctr")
smoke=$(unshare --net -- buildah run --isolation chroot "$ctr" -- \
  sh -c 'echo "uid $(id -u)"; quantgate --version')
buildah rm "$ctr" >/dev/null
ctrs=()
echo "$smoke" | grep -qx 'uid 10001' || die "the image does not run as uid 10001: $smoke"
size=$(buildah images --format '{{.Size}}' "$digest" | head -n 1)
{
  echo "image $IMAGE_NAME:latest"
  echo "digest $digest"
  echo "manifest_digest $(buildah inspect --type image --format '{{.FromImageDigest}}' "$digest") (local storage; a push compresses the layers and changes it)"
  echo "size $size"
  echo "version $version"
  echo "base $BASE_NAME:$SUITE ($base_ref)"
  echo "base_digest $base_id"
  echo "base_tar_sha256 $base_sha"
} >"$out/image.txt"
echo "$digest" >"$out/digest"
log "smoke run: $(echo "$smoke" | tr '\n' ' ')"
log "done: $IMAGE_NAME:latest, $size, in $(elapsed)"
echo "$digest"
