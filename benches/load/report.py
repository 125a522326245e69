#!/usr/bin/env python3
"""Turns benches/load/run's raw output (runs.jsonl, memory.jsonl, checks.json, scale.json) into markdown."""

import json
import os
import platform
import statistics
import sys

out = sys.argv[1]


def lines(name):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def load(name):
    path = os.path.join(out, name)
    return json.load(open(path)) if os.path.exists(path) else None


runs = lines("runs.jsonl")
memory = {m["what"]: m for m in lines("memory.jsonl")}
checks = load("checks.json") or {}
scale = load("scale.json")


def med(scenario, server, mode, key):
    vals = [r[key] for r in runs if r["scenario"] == scenario and r["server"] == server and r["mode"] == mode]
    return statistics.median(vals) if vals else float("nan")


def cpu_us(scenario, server):
    """Server CPU time per request over the closed-loop runs (warm-up included on both sides)."""
    rs = [r for r in runs if r["scenario"] == scenario and r["server"] == server and r["mode"] == "max"]
    cpu = sum(r["cpu_ticks"] / r["clk_tck"] for r in rs)
    n = sum(r["achieved_rate"] * (r["duration_s"] + 2.0) for r in rs)
    return cpu / n * 1e6 if n else float("nan")


def mib(kib):
    return kib / 1024.0


cpu = "unknown"
try:
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
except OSError:
    pass
loads = [r["load"] for r in runs]
rounds = len([r for r in runs if r["scenario"] == "small" and r["server"] == "floor" and r["mode"] == "max"])

p = print
p(f"Machine: {os.cpu_count()} cores ({cpu}), Linux {platform.release()}; load generator on the same cores.")
if loads:
    p(f"Load average (1/5/15 min) at the first and last run: {loads[0]} / {loads[-1]}. Medians over {rounds} round(s).")
p()
p("| scenario | server | highest rate (req/s) | server CPU per request | at half the floor's highest rate: p50 / p99 / p99.9 | peak RSS |")
p("| --- | --- | ---: | ---: | --- | ---: |")
names = {"small": "(a) small Deployment, steady state", "big": "(b) 1 MiB ConfigMap UPDATE"}
for scenario in ("small", "big"):
    for server in ("floor", "confighistory"):
        rate = med(scenario, server, "max", "achieved_rate")
        half = med(scenario, server, "fixed", "target_rate")
        lat = " / ".join(f"{med(scenario, server, 'fixed', k):.2f}" for k in ("p50_ms", "p99_ms", "p999_ms"))
        peak = memory.get(f"{server if server == 'floor' else 'server'} under {scenario} load", {}).get("hwm_kib", 0)
        p(f"| {names[scenario]} | {server} | {rate:,.0f} | {cpu_us(scenario, server):,.0f} µs | {lat} ms at {half:,.0f}/s | {mib(peak):.1f} MiB |")
p()

s_ratio = med("small", "confighistory", "max", "achieved_rate") / med("small", "floor", "max", "achieved_rate")
p99_ratio = med("small", "confighistory", "fixed", "p99_ms") / med("small", "floor", "fixed", "p99_ms")
big_p50 = med("big", "confighistory", "fixed", "p50_ms")
idle = memory.get("server idle", {})
loaded = memory.get("server under small load", {})


def row(target, value, ok):
    p(f"| {target} | {value} | {'met' if ok else '**missed**'} |")


p("| target | measured | |")
p("| --- | --- | --- |")
row("(a) highest rate >= 70% of the floor's", f"{s_ratio:.0%}", s_ratio >= 0.7)
row("(a) p99 at half the floor's highest rate <= 2x the floor's", f"{p99_ratio:.2f}x", p99_ratio <= 2.0)
row("(b) 1 MiB ConfigMap UPDATE p50 <= 10 ms", f"{big_p50:.2f} ms", big_p50 <= 10.0)
if "api_calls" in checks:
    row("zero API calls on the steady-state path (/metrics)", f"{checks['api_calls']} calls for {checks['admissions']:,} admissions",
        checks["api_calls"] == 0)
if idle:
    row("idle RSS <= 20 MiB", f"{mib(idle['rss_kib']):.1f} MiB (peak {mib(idle['hwm_kib']):.1f} MiB)", idle["hwm_kib"] <= 20 * 1024)
if loaded:
    row("RSS under the small-review load <= 64 MiB", f"peak {mib(loaded['hwm_kib']):.1f} MiB", loaded["hwm_kib"] <= 64 * 1024)
for what in ("server at scale (watched the objects arrive)", "server at scale (started after, initial list)"):
    m = memory.get(what)
    if m and scale:
        row(f"RSS with {scale['configmaps']:,} ConfigMaps, {scale['deployments']:,} Deployments, {scale['replicasets']:,} ReplicaSets <= 64 MiB: "
            + what.split("(")[1].rstrip(")"), f"{mib(m['rss_kib']):.1f} MiB (peak {mib(m['hwm_kib']):.1f} MiB)", m["hwm_kib"] <= 64 * 1024)
if scale:
    p()
    p(f"Caches synced {scale['sync_s']:.1f} s after start with the scale objects present ({checks.get('ready_s', 0):.1f} s without).")
