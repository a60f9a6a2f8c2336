#!/usr/bin/env bash
# Fetches the default training corpus, Jane Austen's six novels from the R package janeaustenr (public domain
# text, MIT-licensed package), without needing R: downloads Debian's r-cran-janeaustenr package, unpacks it and
# copies its lazy-load data (Rdata.rdx/.rdb, read by src/data/rdata.cpp) and copyright file to data/janeaustenr/.
# Idempotent: does nothing when the data is already there. Needs apt's package lists (apt-get update) to be current.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=data/janeaustenr
if [ -s "$dest/Rdata.rdx" ] && [ -s "$dest/Rdata.rdb" ]; then
  echo "fetch-corpus: $dest already present"
  exit 0
fi
tmp=$(mktemp -d /tmp/agoq-corpus.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# apt-get download drops privileges to _apt, which cannot write to most folders; as root, keep root instead.
sandbox=()
[ "$(id -u)" -eq 0 ] && sandbox=(-o APT::Sandbox::User=root)
download() { (cd "$tmp" && apt-get download -q "${sandbox[@]}" r-cran-janeaustenr); }
# A machine whose package lists are missing or stale gets them refreshed once.
download || { apt-get update -qq && download; } || {
  echo "fetch-corpus: 'apt-get download r-cran-janeaustenr' failed" >&2
  exit 1
}
dpkg -x "$tmp"/r-cran-janeaustenr_*.deb "$tmp/x"
src="$tmp/x/usr/lib/R/site-library/janeaustenr"
for f in "$src/data/Rdata.rdx" "$src/data/Rdata.rdb"; do
  [ -s "$f" ] || { echo "fetch-corpus: $f missing from the package" >&2; exit 1; }
done
mkdir -p "$dest"
cp "$src/data/Rdata.rdx" "$src/data/Rdata.rdb" "$tmp/x/usr/share/doc/r-cran-janeaustenr/copyright" "$tmp/"
# Copy under temporary names then rename, so an interrupted run never leaves a half-written corpus behind.
for f in Rdata.rdb copyright Rdata.rdx; do
  cp "$tmp/$f" "$dest/.$f.tmp" && mv "$dest/.$f.tmp" "$dest/$f"
done
echo "fetch-corpus: wrote $dest ($(du -sh "$dest" | cut -f1))"
