"""Summarises rounds of `chbench drive` (one JSON line per round) for the cluster benchmarks.

    python3 benches/lib/rounds.py FILE
    -> p50 / p99 (median round), worst round p99 / max, count, errors
"""
import json
import sys

rounds = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
if not rounds:
    print("no round")
    sys.exit()


def median(key):
    return sorted(r[key] for r in rounds)[len(rounds) // 2]


print(
    f"p50 {median('p50_ms'):.2f} / p99 {median('p99_ms'):.2f} ms (median round), "
    f"worst round p99 {max(r['p99_ms'] for r in rounds):.2f} / max {max(r['max_ms'] for r in rounds):.1f} ms, "
    f"{sum(r['requests'] for r in rounds)} admissions at {sum(r['achieved_rate'] for r in rounds) / len(rounds):.0f}/s, "
    f"{sum(r['errors'] for r in rounds)} errors, {len(rounds)} rounds of 20 s"
)
