#!/usr/bin/env python3
"""Kubernetes objects as a stream of JSON documents (what tests/check's to_json
prints), for the chart checks.

  objects.py list [SKIP_PREFIX...] < stream > list.json
      one v1 List of the objects whose apiVersion starts with none of the
      prefixes; prints on stderr which objects were left out.
"""
import json
import sys


def read_docs(raw):
    """All objects of a stream of JSON documents; List items are flattened."""
    dec, i, docs = json.JSONDecoder(), 0, []
    while True:
        while i < len(raw) and raw[i].isspace():
            i += 1
        if i >= len(raw):
            return docs
        obj, i = dec.raw_decode(raw, i)
        docs.extend(obj.get("items", []) if obj.get("kind") == "List" else [obj])


if __name__ == "__main__":
    if sys.argv[1:2] != ["list"]:
        sys.exit(__doc__)
    skip = tuple(sys.argv[2:])
    keep, left = [], []
    for o in read_docs(sys.stdin.read()):
        # A prefix matches "apiVersion/kind" (a group, a version or one kind).
        (left if skip and f'{o["apiVersion"]}/{o["kind"]}'.startswith(skip) else keep).append(o)
    json.dump({"apiVersion": "v1", "kind": "List", "items": keep}, sys.stdout)
    print("left out: " + (", ".join(f"{o['kind']}/{o['metadata']['name']}" for o in left) or "nothing"),
          file=sys.stderr)
