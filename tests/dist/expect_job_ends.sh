#!/usr/bin/env bash
# expect_job_ends.sh SECONDS REGEX COMMAND...: passes when COMMAND (an mpirun job) ends within
# SECONDS with a non-zero exit status and its output has a line matching the extended REGEX.
limit=$1
regex=$2
shift 2
start=$(date +%s%N)
out=$(timeout --kill-after=5 "$limit" "$@" 2>&1)
rc=$?
took=$(( ($(date +%s%N) - start) / 1000000 ))
echo "$out"
echo "-- exit status $rc after $took ms"
if [ "$took" -ge $((limit * 1000)) ]; then
  echo "FAIL: the job did not end within $limit s"
  exit 1
fi
if [ "$rc" -eq 0 ]; then
  echo "FAIL: the job ended with status 0"
  exit 1
fi
if ! grep -Eq "$regex" <<<"$out"; then
  echo "FAIL: no line matches: $regex"
  exit 1
fi
echo "PASS"
