#!/bin/sh
# The example killed (SIGKILL) once a checkpoint is written, then run with --resume: the resumed
# run goes on from the last cut the first run wrote (its version and model hash, or a later
# cut's when the kill fell between a write and its line), and ends at its horizon with a report.
set -eu
exe=$1
dir=$2
rm -rf "$dir" && mkdir -p "$dir"
"$exe" --seconds 30 --dir "$dir" >"$dir/first.log" 2>&1 &
pid=$!
i=0
until grep -q "^checkpoint at version" "$dir/first.log" 2>/dev/null && [ "$(grep -c '^checkpoint at' "$dir/first.log")" -ge 2 ]; do
  i=$((i + 1))
  if [ $i -gt 600 ] || ! kill -0 $pid 2>/dev/null; then
    echo "no checkpoint within 60 s:"; cat "$dir/first.log"; exit 1
  fi
  sleep 0.1
done
kill -9 $pid
wait $pid 2>/dev/null || true
last=$(grep "^checkpoint at version" "$dir/first.log" | tail -1)
saved_version=$(echo "$last" | sed 's/checkpoint at version \([0-9]*\) (hash \([0-9a-f]*\))/\1/')
saved_hash=$(echo "$last" | sed 's/checkpoint at version \([0-9]*\) (hash \([0-9a-f]*\))/\2/')
"$exe" --seconds 4 --dir "$dir" --resume >"$dir/second.log" 2>&1 || { cat "$dir/second.log"; exit 1; }
resumed=$(grep "^resumed from version" "$dir/second.log") || { echo "not resumed:"; cat "$dir/second.log"; exit 1; }
version=$(echo "$resumed" | sed 's/resumed from version \([0-9]*\) (hash \([0-9a-f]*\))/\1/')
hash=$(echo "$resumed" | sed 's/resumed from version \([0-9]*\) (hash \([0-9a-f]*\))/\2/')
echo "first run's last checkpoint: version $saved_version hash $saved_hash; resumed: version $version hash $hash"
[ "$saved_version" -gt 0 ] || { echo "the first checkpoints were at version 0"; exit 1; }
if [ "$version" -eq "$saved_version" ]; then
  [ "$hash" = "$saved_hash" ] || { echo "same version, another model"; exit 1; }
else
  [ "$version" -gt "$saved_version" ] || { echo "resumed from an earlier cut than the last written"; exit 1; }
fi
grep -q "final test accuracy" "$dir/second.log" || { cat "$dir/second.log"; exit 1; }
cat "$dir/second.log"
