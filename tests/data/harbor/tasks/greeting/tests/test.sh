#!/bin/bash
# Reward 1 when /work/greeting.txt holds exactly "hello" and a newline, else 0.
mkdir -p /logs/verifier
if [ "$(cat /work/greeting.txt 2>/dev/null)" = "hello" ] && [ "$(wc -c < /work/greeting.txt)" -eq 6 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
