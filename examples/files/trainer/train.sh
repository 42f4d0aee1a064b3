#!/bin/sh
# train.sh DATA.csv [SHARD] [SHARDS]
#
# A stand-in for real training code: fits a nearest-centroid classifier to one shard of a
# CSV of `label,x,y` rows (row i belongs to shard i mod SHARDS) and prints how well it does
# on that shard. Shipped as the marketplace's `trainer` script item, a git repository.
set -eu
data=$1
shard=${2:-0}
shards=${3:-1}
awk -F, -v shard="$shard" -v shards="$shards" '
  NR == 1 { next }
  (NR - 2) % shards != shard { next }
  {
    n++; label[n] = $1; x[n] = $2; y[n] = $3
    if (!($1 in count)) classes++
    count[$1]++; sx[$1] += $2; sy[$1] += $3
  }
  END {
    if (n == 0) { print "train.sh: no samples in shard " shard; exit 1 }
    for (c in count) { cx[c] = sx[c] / count[c]; cy[c] = sy[c] / count[c] }
    for (i = 1; i <= n; i++) {
      best = ""
      for (c in count) {
        dx = x[i] - cx[c]; dy = y[i] - cy[c]; d = dx * dx + dy * dy
        if (best == "" || d < nearest) { best = c; nearest = d }
      }
      if (best == label[i]) right++
    }
    printf "shard %d of %d: %d samples, %d classes, training accuracy %.2f\n",
      shard, shards, n, classes, right / n
  }
' "$data"
