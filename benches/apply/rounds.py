"""Paired, alternated rounds of `kubectl apply` of a release for benches/apply/run.

    python3 benches/apply/rounds.py --rounds N --pause S --out DIR --acted NS --excluded NS

Round 0 creates the release in both namespaces and is not counted. In round i (from 1) the
release carries version i: the ConfigMap's data and the Deployment's image and env change, so in
the acted namespace the apply makes a snapshot of the new content and pins the Deployment to it.
Odd rounds apply in the acted namespace first, even rounds in the excluded one. Each apply is one
`kubectl apply -f -` of both objects, timed with time.monotonic_ns() from the start of kubectl to
its exit. Writes DIR/rounds.jsonl and prints a line per round and the summary.
"""
import argparse
import json
import statistics
import subprocess
import sys
import time

RELEASE = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: shop-config
data:
  version: "{v}"
  settings.yaml: |
    release: {v}
    checkout:
      timeout: {timeout}s
      retries: 3
    feature-flags: [search, "cart-{v}"]
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: shop
spec:
  replicas: 0
  selector:
    matchLabels: {{app: shop}}
  template:
    metadata:
      labels: {{app: shop}}
    spec:
      containers:
      - name: shop
        image: registry.example/shop:1.{v}
        env:
        - {{name: RELEASE, value: "{v}"}}
        volumeMounts:
        - {{name: config, mountPath: /etc/shop}}
      volumes:
      - name: config
        configMap: {{name: shop-config}}
"""


def apply(namespace, version):
    body = RELEASE.format(v=version, timeout=10 + version % 50)
    start = time.monotonic_ns()
    done = subprocess.run(["kubectl", "apply", "-n", namespace, "-f", "-"], input=body, text=True, capture_output=True)
    took = (time.monotonic_ns() - start) / 1e6
    if done.returncode != 0:
        sys.exit(f"apply: kubectl apply in {namespace} failed (round {version}):\n{done.stderr}")
    return took


def pinned(namespace):
    """The ConfigMap name the Deployment's volume names (a snapshot once confighistory pinned it)."""
    out = subprocess.run(
        ["kubectl", "get", "deployment", "shop", "-n", namespace, "-o", "jsonpath={.spec.template.spec.volumes[0].configMap.name}"],
        text=True,
        capture_output=True,
        check=True,
    )
    return out.stdout.strip()


def quantile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--pause", type=float, default=1.0)
    p.add_argument("--out", required=True)
    p.add_argument("--acted", required=True)
    p.add_argument("--excluded", required=True)
    a = p.parse_args()
    for ns in (a.acted, a.excluded):
        apply(ns, 0)
    rows = []
    with open(f"{a.out}/rounds.jsonl", "w") as out:
        for i in range(1, a.rounds + 1):
            time.sleep(a.pause)
            order = [a.acted, a.excluded] if i % 2 else [a.excluded, a.acted]
            took = {}
            for ns in order:
                took[ns] = apply(ns, i)
            row = {
                "round": i,
                "first": "acted" if order[0] == a.acted else "excluded",
                "acted_ms": round(took[a.acted], 2),
                "excluded_ms": round(took[a.excluded], 2),
                "ratio": round(took[a.acted] / took[a.excluded], 4),
            }
            rows.append(row)
            out.write(json.dumps(row) + "\n")
            print(
                f"round {i:3}  {row['first']:8} first  acted {row['acted_ms']:7.1f} ms  excluded {row['excluded_ms']:7.1f} ms  ratio {row['ratio']:.3f}",
                flush=True,
            )
    # The apply did what it is meant to: the acted Deployment names a snapshot, the excluded one
    # the plain name.
    acted_pin, excluded_pin = pinned(a.acted), pinned(a.excluded)
    if acted_pin == "shop-config" or excluded_pin != "shop-config":
        sys.exit(f"apply: the release was not pinned as expected: acted names {acted_pin!r}, excluded {excluded_pin!r}")
    ratios = [r["ratio"] for r in rows]
    acted = [r["acted_ms"] for r in rows]
    excluded = [r["excluded_ms"] for r in rows]
    by_order = {
        first: statistics.median([r["ratio"] for r in rows if r["first"] == first]) for first in ("acted", "excluded") if any(r["first"] == first for r in rows)
    }
    summary = {
        "rounds": len(rows),
        "median_ratio": round(statistics.median(ratios), 4),
        "p90_ratio": round(quantile(ratios, 0.9), 4),
        "median_acted_ms": round(statistics.median(acted), 1),
        "median_excluded_ms": round(statistics.median(excluded), 1),
        "median_difference_ms": round(statistics.median(x - y for x, y in zip(acted, excluded)), 1),
        "median_ratio_by_first": {k: round(v, 4) for k, v in by_order.items()},
        "acted_pinned_to": acted_pin,
    }
    with open(f"{a.out}/summary.json", "w") as f:
        json.dump(summary, f, indent=1)
    print(
        f"\n{len(rows)} rounds: median ratio {summary['median_ratio']:.3f}, p90 ratio {summary['p90_ratio']:.3f}; "
        f"medians acted {summary['median_acted_ms']:.1f} ms, excluded {summary['median_excluded_ms']:.1f} ms "
        f"(median difference {summary['median_difference_ms']:.1f} ms); median ratio when acted went first "
        f"{by_order.get('acted', float('nan')):.3f}, second {by_order.get('excluded', float('nan')):.3f}; acted pinned to {acted_pin}"
    )


if __name__ == "__main__":
    main()
