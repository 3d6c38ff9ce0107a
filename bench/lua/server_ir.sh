#!/bin/bash
# Instructions per FCALL of redis-server itself, under callgrind: two servers side by side,
# each given a first pass over every key (10 000 calls) then N1 or N2 more; the difference
# over N2 - N1. From the repository root:
#
#   bench/lua/server_ir.sh WORKLOAD [N1 N2]      # WORKLOAD: gcra1, tiers3 or float
#
# tiers3 waits for the start of a minute, so that its fixed window tier (60 s) stays in one
# window for both runs (under callgrind a run takes well under a minute; a window crossed
# mid-run makes every key's next write a full one and the figure several thousand higher).
w=$1; n1=${2:-2000}; n2=${3:-12000}
dir=$(dirname "$0")
tmp=$(mktemp -d)
run() {
  local port=$((17000 + RANDOM % 1000))
  valgrind --tool=callgrind --callgrind-out-file=/dev/null redis-server --port $port \
    --save '' --appendonly no --hz 1 > $tmp/vg.$1 2>&1 &
  local pid=$!
  for _ in $(seq 100); do redis-cli -p $port ping > /dev/null 2>&1 && break; sleep 0.2; done
  python3 $dir/server_fcall.py $port $w 10000
  python3 $dir/server_fcall.py $port $w $1
  redis-cli -p $port shutdown nosave > /dev/null 2>&1
  wait $pid
  sed -n 's/.*Collected : //p' $tmp/vg.$1 > $tmp/ir.$1
}
if [ "$w" = tiers3 ]; then
  while [ $(date +%S | sed 's/^0//') -gt 1 ]; do sleep 0.3; done
fi
run $n1 & run $n2 & wait
echo "$w $(( ($(cat $tmp/ir.$n2) - $(cat $tmp/ir.$n1)) / (n2 - n1) ))"
rm -rf $tmp
