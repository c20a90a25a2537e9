#!/bin/sh
# meson install script: copies the sample configuration to escrowd.toml unless that file is already
# there, so an operator's edits survive a reinstall (the sample itself is always refreshed).
# Usage: install-config.sh SAMPLE TARGET (absolute installed paths; DESTDIR, if set, goes in front).
set -eu
sample="${DESTDIR:-}$1"
target="${DESTDIR:-}$2"
if [ -e "$target" ]; then
  echo "escrow: keeping the existing $2 (the new sample is $1)"
else
  cp "$sample" "$target"
  chmod 0644 "$target"
  echo "escrow: installed $2"
fi
