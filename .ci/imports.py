#!/usr/bin/env python3
"""The file-level import graph of admin/src: fails on a cycle or on an import against the layers
that ARCHITECTURE.md ("Layers and imports") lists. `-v` prints the edges of each cycle."""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "admin", "src")
# Lowest first; a module may import its own layer or below. Longest prefix wins.
LAYERS = [
    ["clock", "error", "domain", "worker", "metrics", "db", "auth::password", "auth::rate_limit",
     "auth::jwt", "auth::api_token", "auth::csrf", "auth::rbac", "auth", "config", "audit",
     "alert::outbox", "scheduler::handle", "scheduler::report_tally", "dispatch::answer", "dispatch::client", "dispatch::link", "dispatch::relay", "dispatch::routing",
     "http::request", "group_commit", "registry_batch", "state", "testing", "tls"],
    ["lifecycle"],
    ["alert", "dispatch", "scheduler"],
    ["service", "callback"],
    ["rpc", "agent_link", "cluster_relay", "api", "auth::extract", "assets", "web"],
    ["http", "startup"],
]
# Imports against the layers that are accepted, with why (keep in step with ARCHITECTURE.md).
ALLOWED = {
    # The auth module's root re-exports and helpers are leaf code; its extractor is layer 5.
}


def modules(root):
    found = {}
    for d, dirs, names in os.walk(root):
        # `bin/<name>/` holds other binaries (the `jobfleet` CLI): crates of their own, whose
        # `crate::` is not the library's.
        if os.path.samefile(d, root) and "bin" in dirs:
            dirs.remove("bin")
        for f in names:
            if f.endswith(".rs"):
                rel = os.path.relpath(os.path.join(d, f), root)[:-3].split(os.sep)
                if rel[-1] in ("mod", "lib", "main"):
                    rel = rel[:-1]
                found["::".join(rel)] = os.path.join(d, f)
    return found


def imports(files):
    mods = set(files)

    def resolve(path):
        segs = path.split("::")
        for n in range(len(segs), 0, -1):
            m = "::".join(segs[:n])
            if m in mods:
                return m
        return None

    edges = {m: set() for m in mods}
    path = re.compile(r"crate::((?:[a-z_][a-z0-9_]*::)*[a-z_][a-z0-9_]*)")
    brace = re.compile(r"crate::((?:[a-z_][a-z0-9_]*::)*)\{([^}]*)\}", re.S)
    for m, p in files.items():
        src = open(p, encoding="utf-8").read()
        # Unit tests may reach anywhere.
        src = re.split(r"#\[cfg\(test\)\]\s*(?:pub(?:\(crate\))?\s+)?mod tests", src)[0]
        base = m if p.endswith("mod.rs") or m == "" else (m.rsplit("::", 1)[0] if "::" in m else "")
        parent = base.rsplit("::", 1)[0] if "::" in base else ""
        src = re.sub(r"\bsuper::", "crate::" + (parent + "::" if parent else ""), src)
        src = re.sub(r"\bself::", "crate::" + (base + "::" if base else ""), src)
        for target in path.findall(src):
            r = resolve(target)
            if r and r != m:
                edges[m].add(r)
        for prefix, items in brace.findall(src):
            for item in items.split(","):
                item = item.strip().split(" ")[0].split("::{")[0]
                if item and item != "self":
                    r = resolve(prefix + item)
                    if r and r != m:
                        edges[m].add(r)
    return edges


def cycles(edges):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def layer(m):
    best, best_len = None, -1
    for i, names in enumerate(LAYERS):
        for name in names:
            if (m == name or m.startswith(name + "::")) and len(name) > best_len:
                best, best_len = i, len(name)
    return best


def main():
    edges = imports(modules(ROOT))
    edges.pop("", None)
    for targets in edges.values():
        targets.discard("")
    failed = False
    for comp in cycles(edges):
        failed = True
        print(f"import cycle of {len(comp)} files: {', '.join(comp)}")
        if "-v" in sys.argv:
            for a in comp:
                for b in sorted(edges[a] & set(comp)):
                    print(f"    {a} -> {b}")
    for a in sorted(edges):
        for b in sorted(edges[a]):
            la, lb = layer(a), layer(b)
            if la is None or lb is None:
                if la is None and a not in ("main",):
                    failed = True
                    print(f"{a}: not in any layer of .ci/imports.py")
                continue
            if lb > la and (a, b) not in ALLOWED:
                failed = True
                print(f"upward import: {a} (layer {la + 1}) -> {b} (layer {lb + 1})")
    n = sum(len(t) for t in edges.values())
    print(f"admin/src: {len(edges)} files, {n} imports, {'FAILED' if failed else 'no cycle, layers kept'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
