#!/usr/bin/env bash
# The second half of test_paths.sh (the parameter server onwards: local SGD,
# Hogwild!, balancing, robust aggregation, compression, faults, stopping), a
# test of its own so that ctest runs the two halves side by side.
PATHS_PART=b exec bash "$(dirname "$0")/test_paths.sh" "$@"
