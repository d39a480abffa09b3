#!/bin/bash
# The reference solution (`harbor run -a oracle`).
echo hello > /work/greeting.txt
