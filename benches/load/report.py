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
sha = lines("sha.jsonl")


def vals(scenario, server, mode, key, generator="chbench"):
    """One value a round, in round order."""
    return [r[key] for r in runs if r["scenario"] == scenario and r["server"] == server and r["mode"] == mode
            and r.get("generator", "chbench") == generator and r.get(key) is not None]


def med(scenario, server, mode, key, generator="chbench"):
    v = vals(scenario, server, mode, key, generator)
    return statistics.median(v) if v else float("nan")


def ratios(scenario, mode, key, generator="chbench"):
    """confighistory / floor, round by round (each round drives both servers in turn)."""
    f = vals(scenario, "floor", mode, key, generator)
    c = vals(scenario, "confighistory", mode, key, generator)
    return [a / b for a, b in zip(c, f) if b]


def spread(v, fmt):
    """median (min–max) of a list, formatted."""
    if not v:
        return "n/a"
    if len(v) == 1:
        return fmt(v[0])
    return f"{fmt(statistics.median(v))} ({fmt(min(v))}–{fmt(max(v))})"


def noise(v):
    """The spread of the floor's own rates over rounds, as a share of their median: the machine's noise."""
    return (max(v) - min(v)) / statistics.median(v) if len(v) > 1 and statistics.median(v) else 0.0


def cpu_us(scenario, server):
    """Server CPU time per request over the closed-loop runs (warm-up included on both sides)."""
    rs = [r for r in runs if r["scenario"] == scenario and r["server"] == server and r["mode"] == "max" and "cpu_ticks" in r]
    cpu = sum(r["cpu_ticks"] / r["clk_tck"] for r in rs)
    n = sum(r["achieved_rate"] * (r["duration_s"] + 2.0) for r in rs)
    return cpu / n * 1e6 if n else float("nan")


def runs_conns(scenario, generator):
    c = {r.get("connections") for r in runs if r["scenario"] == scenario and r.get("generator", "chbench") == generator}
    return "/".join(str(x) for x in sorted(x for x in c if x)) or "?"


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
loads = [r["load"] for r in runs if "load" in r]
rounds = len(vals("small", "floor", "max", "achieved_rate"))

p = print
pinning = open(os.path.join(out, "pinning.txt")).read().strip() if os.path.exists(os.path.join(out, "pinning.txt")) else "not pinned"
p(f"Machine: {os.cpu_count()} cores ({cpu}), Linux {platform.release()}; {pinning}.")
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

pct = lambda x: f"{x:.0%}"
times = lambda x: f"{x:.2f}x"
p("Ratios to the floor, round by round: median (min–max). The floor's own spread over the same rounds is the")
p("machine's noise: a ratio's spread narrower than that says nothing about confighistory.")
p()
p("| ratio | generator | median (min–max) over rounds | floor's own spread |")
p("| --- | --- | --- | ---: |")
for scenario in ("small", "big"):
    for gen in ("chbench", "wrk"):
        r = ratios(scenario, "max", "achieved_rate", gen)
        if r:
            p(f"| {names[scenario]}: highest rate | {gen} ({runs_conns(scenario, gen)} connections) | {spread(r, pct)} | "
              f"{noise(vals(scenario, 'floor', 'max', 'achieved_rate', gen)):.0%} |")
    r = ratios(scenario, "fixed", "p99_ms")
    if r:
        p(f"| {names[scenario]}: p99 at half the floor's highest rate | chbench | {spread(r, times)} | "
          f"{noise(vals(scenario, 'floor', 'fixed', 'p99_ms')):.0%} |")
p()
if any(r.get("generator") == "wrk" for r in runs):
    p("Cross-check with wrk (closed loop, one thread on the load core): highest rate, median (min–max), and wrk's own p50 / p99.")
    p()
    p("| scenario | server | highest rate (req/s) | p50 / p99 | errors |")
    p("| --- | --- | ---: | --- | ---: |")
    for scenario in ("small", "big"):
        for server in ("floor", "confighistory"):
            v = vals(scenario, server, "max", "achieved_rate", "wrk")
            errs = sum(r.get("errors", 0) for r in runs if r.get("generator") == "wrk" and r["scenario"] == scenario and r["server"] == server)
            p(f"| {names[scenario]} | {server} | {spread(v, lambda x: f'{x:,.0f}')} | "
              f"{med(scenario, server, 'max', 'p50_ms', 'wrk'):.2f} / {med(scenario, server, 'max', 'p99_ms', 'wrk'):.2f} ms | {errs} |")
    p()

s_ratio = statistics.median(ratios("small", "max", "achieved_rate") or [float("nan")])
big_ratio = statistics.median(ratios("big", "max", "achieved_rate") or [float("nan")])
p99_ratio = statistics.median(ratios("small", "fixed", "p99_ms") or [float("nan")])
idle = memory.get("server idle", {})
loaded = memory.get("server under small load", {})
big_loaded = memory.get("server under big load", {})


def row(target, value, ok):
    p(f"| {target} | {value} | {'met' if ok else '**missed**'} |")


p("| target | measured | |")
p("| --- | --- | --- |")
row("(a) highest rate >= 90% of the floor's (median ratio over rounds)", f"{s_ratio:.0%}", s_ratio >= 0.9)
row("(b) highest rate >= 75% of the floor's (median ratio over rounds)", f"{big_ratio:.0%}", big_ratio >= 0.75)
row("(a) p99 at half the floor's highest rate <= 1.5x the floor's", f"{p99_ratio:.2f}x", p99_ratio <= 1.5)
if sha:
    # The limit of the 1 MiB UPDATE is the floor's CPU per request plus SHA-256 of
    # the content (timed on the servers' core in each round); confighistory's CPU within it.
    sha_us = statistics.median(r["sha_us"] for r in sha)
    floor_us, ch_us = cpu_us("big", "floor"), cpu_us("big", "confighistory")
    limit_us = floor_us + sha_us
    row("(b) server CPU per request within the limit (the floor's + SHA-256 of the content) >= 90%",
        f"{limit_us / ch_us:.0%}: {floor_us:,.0f} + {sha_us:,.0f} = {limit_us:,.0f} µs against {ch_us:,.0f} µs", limit_us / ch_us >= 0.9)
if "api_calls" in checks:
    row("zero API calls on the steady-state path (/metrics)", f"{checks['api_calls']} calls for {checks['admissions']:,} admissions",
        checks["api_calls"] == 0)
if idle:
    row("idle RSS <= 16 MiB", f"{mib(idle['rss_kib']):.1f} MiB (peak {mib(idle['hwm_kib']):.1f} MiB)", idle["hwm_kib"] <= 16 * 1024)
if loaded:
    row("RSS under the small-review load <= 64 MiB", f"peak {mib(loaded['hwm_kib']):.1f} MiB", loaded["hwm_kib"] <= 64 * 1024)
if big_loaded:
    row("peak RSS under the 1 MiB load <= 40 MiB", f"peak {mib(big_loaded['hwm_kib']):.1f} MiB", big_loaded["hwm_kib"] <= 40 * 1024)
for what in ("server at scale (watched the objects arrive)", "server at scale (started after, initial list)"):
    m = memory.get(what)
    if m and scale:
        row(f"RSS with {scale['configmaps']:,} ConfigMaps, {scale['deployments']:,} Deployments, {scale['replicasets']:,} ReplicaSets <= 64 MiB: "
            + what.split("(")[1].rstrip(")"), f"{mib(m['rss_kib']):.1f} MiB (peak {mib(m['hwm_kib']):.1f} MiB)", m["hwm_kib"] <= 64 * 1024)
large = memory.get("server beside 200 ConfigMaps of 900 KiB (started after)")
if large:
    row("peak RSS beside 200 ConfigMaps of 900 KiB (176 MiB of data) <= 64 MiB", f"peak {mib(large['hwm_kib']):.1f} MiB", large["hwm_kib"] <= 64 * 1024)
if scale:
    p()
    p(f"Caches synced {scale['sync_s']:.1f} s after start with the scale objects present ({checks.get('ready_s', 0):.1f} s without).")
