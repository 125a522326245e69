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
import random
import statistics
import subprocess
import sys
import time

RELEASE = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: bench-shop-config
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
  name: bench-shop
spec:
  replicas: 0
  selector:
    matchLabels: {{app: shop}}
  template:
    metadata:
      labels: {{app: shop}}
    spec:
      containers:
      - name: bench-shop
        image: registry.example/shop:1.{v}
        env:
        - {{name: RELEASE, value: "{v}"}}
        volumeMounts:
        - {{name: config, mountPath: /etc/shop}}
      volumes:
      - name: config
        configMap: {{name: bench-shop-config}}
"""


def apply(namespace, version):
    """Milliseconds the apply took, or None when it failed (said on stderr)."""
    body = RELEASE.format(v=version, timeout=10 + version % 50)
    start = time.monotonic_ns()
    done = subprocess.run(["kubectl", "apply", "-n", namespace, "-f", "-"], input=body, text=True, capture_output=True)
    took = (time.monotonic_ns() - start) / 1e6
    if done.returncode != 0:
        print(f"apply: kubectl apply in {namespace} failed (round {version}):\n{done.stderr.strip()[-600:]}", file=sys.stderr)
        return None
    return took


def selects(selector, labels):
    """Whether a LabelSelector (matchLabels, matchExpressions) selects an object with `labels`."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        if (op == "In" and labels.get(key) not in values) or (op == "NotIn" and key in labels and labels[key] in values):
            return False
        if (op == "Exists" and key not in labels) or (op == "DoesNotExist" and key in labels):
            return False
    return True


def configurations():
    out = subprocess.run(
        ["kubectl", "get", "mutatingwebhookconfigurations,validatingwebhookconfigurations", "-o", "json"], text=True, capture_output=True
    )
    return json.loads(out.stdout)["items"] if out.returncode == 0 else None


def check_measured(ours, acted, excluded):
    """The measured webhooks select the acted namespace, and none of them the excluded one."""
    items = [c for c in configurations() or [] if c["metadata"]["name"] == ours]
    webhooks = [w for c in items for w in c.get("webhooks") or []]
    if not webhooks:
        sys.exit(f"apply: no webhook configuration {ours}")
    if not any(selects(w.get("namespaceSelector"), acted[1]) for w in webhooks):
        sys.exit(f"apply: {ours}'s webhooks do not select {acted[0]}")
    if any(selects(w.get("namespaceSelector"), excluded[1]) for w in webhooks):
        sys.exit(f"apply: {ours}'s webhooks select {excluded[0]}, which should be excluded")


def foreign_webhooks(ours, namespaces):
    """Webhooks of other configurations (another release, another test run on a shared cluster)
    whose namespaceSelector takes in one of `namespaces` (name -> labels): such a round does not
    compare confighistory with nothing, and is left out."""
    items = configurations()
    if items is None:
        return ["(could not list webhook configurations)"]
    found = []
    for c in items:
        if c["metadata"]["name"] == ours:
            continue
        for w in c.get("webhooks") or []:
            hit = [ns for ns, labels in namespaces.items() if selects(w.get("namespaceSelector"), labels)]
            if hit:
                found.append(f"{c['kind']}/{c['metadata']['name']} ({', '.join(hit)})")
    return sorted(set(found))


def namespace_labels(namespace):
    out = subprocess.run(["kubectl", "get", "namespace", namespace, "-o", "json"], text=True, capture_output=True, check=True)
    return json.loads(out.stdout)["metadata"].get("labels") or {}


def pinned(namespace):
    """The ConfigMap name the Deployment's volume names (a snapshot once confighistory pinned it)."""
    out = subprocess.run(
        ["kubectl", "get", "deployment", "bench-shop", "-n", namespace, "-o", "jsonpath={.spec.template.spec.volumes[0].configMap.name}"],
        text=True,
        capture_output=True,
        check=True,
    )
    return out.stdout.strip()


def quantile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def median_interval(values, resamples=2000, seed=1):
    """A 90% bootstrap interval of the median: how far noise alone moves it."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return medians[int(0.05 * resamples)], medians[int(0.95 * resamples)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--pause", type=float, default=1.0)
    p.add_argument("--out", required=True)
    p.add_argument("--acted", required=True)
    p.add_argument("--excluded", required=True)
    p.add_argument("--configuration", required=True, help="the name of the measured webhook configurations")
    p.add_argument("--foreign-wait", type=float, default=600, help="seconds to wait for other webhooks selecting the namespaces to go")
    a = p.parse_args()
    labels = {ns: namespace_labels(ns) for ns in (a.acted, a.excluded)}
    check_measured(a.configuration, (a.acted, labels[a.acted]), (a.excluded, labels[a.excluded]))
    for ns in (a.acted, a.excluded):
        if apply(ns, 0) is None:
            sys.exit("apply: the release could not be created")
    time.sleep(2)
    rows, left_out, waited = [], [], 0.0
    with open(f"{a.out}/rounds.jsonl", "w") as out:
        for i in range(1, a.rounds + 1):
            time.sleep(a.pause)
            order = [a.acted, a.excluded] if i % 2 else [a.excluded, a.acted]
            # One budget of waiting for the whole run: past it, such rounds are left out at once.
            before, said = foreign_webhooks(a.configuration, labels), False
            while before and waited < a.foreign_wait:
                if not said:
                    print(
                        f"apply: waiting (at most {a.foreign_wait - waited:.0f} s more) for other webhooks to stop selecting the namespaces: {'; '.join(before)}",
                        file=sys.stderr,
                        flush=True,
                    )
                    said = True
                time.sleep(5)
                waited += 5
                before = foreign_webhooks(a.configuration, labels)
            took = {}
            for ns in order:
                took[ns] = apply(ns, i)
            foreign = sorted(set(before) | set(foreign_webhooks(a.configuration, labels)))
            if foreign or None in took.values():
                why = "an apply failed" if None in took.values() else "other webhooks select these namespaces: " + "; ".join(foreign)
                left_out.append({"round": i, "why": why})
                out.write(json.dumps({"round": i, "left_out": why}) + "\n")
                print(f"round {i:3}  left out: {why}", flush=True)
                continue
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
    if acted_pin == "bench-shop-config" or excluded_pin != "bench-shop-config":
        print(f"apply: warning: the release was not pinned as expected: acted names {acted_pin!r}, excluded {excluded_pin!r}", file=sys.stderr)
    if len(rows) < max(3, a.rounds // 2):
        sys.exit(f"apply: only {len(rows)} of {a.rounds} rounds were clean; nothing to compare (see above)")
    ratios = [r["ratio"] for r in rows]
    acted = [r["acted_ms"] for r in rows]
    excluded = [r["excluded_ms"] for r in rows]
    by_order = {
        first: statistics.median([r["ratio"] for r in rows if r["first"] == first]) for first in ("acted", "excluded") if any(r["first"] == first for r in rows)
    }
    summary = {
        "rounds": len(rows),
        "left_out": left_out,
        "median_ratio": round(statistics.median(ratios), 4),
        "median_ratio_90pct_interval": [round(x, 4) for x in median_interval(ratios)],
        "p90_ratio": round(quantile(ratios, 0.9), 4),
        "median_acted_ms": round(statistics.median(acted), 1),
        "median_excluded_ms": round(statistics.median(excluded), 1),
        "median_difference_ms": round(statistics.median(x - y for x, y in zip(acted, excluded)), 1),
        "median_ratio_by_first": {k: round(v, 4) for k, v in by_order.items()},
        # The second apply of a round tends to be the faster one; the geometric mean of the two
        # orders' medians takes that out.
        "order_balanced_ratio": round((by_order.get("acted", 1.0) * by_order.get("excluded", 1.0)) ** 0.5, 4),
        "acted_pinned_to": acted_pin,
    }
    with open(f"{a.out}/summary.json", "w") as f:
        json.dump(summary, f, indent=1)
    print(
        f"\n{len(rows)} rounds ({len(left_out)} left out): median ratio {summary['median_ratio']:.3f} "
        f"(90% bootstrap interval {summary['median_ratio_90pct_interval'][0]:.3f}-{summary['median_ratio_90pct_interval'][1]:.3f}), p90 ratio {summary['p90_ratio']:.3f}; "
        f"medians acted {summary['median_acted_ms']:.1f} ms, excluded {summary['median_excluded_ms']:.1f} ms "
        f"(median difference {summary['median_difference_ms']:.1f} ms); median ratio when acted went first "
        f"{by_order.get('acted', float('nan')):.3f}, second {by_order.get('excluded', float('nan')):.3f} (order-balanced {summary['order_balanced_ratio']:.3f}); acted pinned to {acted_pin}"
    )


if __name__ == "__main__":
    main()
