#!/usr/bin/env bash
# Library rules (docs: STYLE "the library never calls exit()"): no file under
# src/ ends the process or reads its environment behind the program's back.
# Calls of exit, _exit, _Exit, quick_exit, abort, getenv and raise in code
# (comments are blanked first) are listed as file:line: text. The program in
# tools/ decides those things and passes the results in.
# Usage: test_rules.sh [BUILD_DIR] (unused: the check reads the sources)
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
hits=$(cd "$root" && find src -name '*.[ch]' | sort | xargs perl -ne '
  BEGIN { $in = 0 }
  # blank /* ... */ (across lines) and // comments, keep the line numbers
  my $l = $_;
  if ($in) { if ($l =~ s{^.*?\*/}{}) { $in = 0 } else { $l = "" } }
  $l =~ s{/\*.*?\*/}{}g;
  if ($l =~ s{/\*.*$}{}) { $in = 1 }
  $l =~ s{//.*$}{};
  print "$ARGV:$.: " . ($_ =~ s/^\s+//r) if $l =~ /\b(exit|_exit|_Exit|quick_exit|abort|getenv|raise)\s*\(/;
  $in = 0, close ARGV if eof;')
if [ -n "$hits" ]; then
  echo "$hits"
  echo "FAIL $(grep -c . <<<"$hits") call(s) above end the process or read the environment inside the library: return a dt_status (DT_ASSERT for invariants) or take the value as a parameter"
  exit 1
fi
echo "ok   no exit/abort/getenv/raise under src/"
