#!/usr/bin/env python3
"""The import circles between the modules of one crate (issue 25: none
inside a crate either; cargo rules out circles between crates).

usage: host/module-cycles.py SRC_DIR [-v] [-m] [--check]  (make cycles: every host crate)

An edge A -> B is a `crate::`, `super::` or `self::` path (in a `use` or
inline) in A's file naming module B or an item in it, or, in a mod.rs or
lib.rs, a path through one of its child modules; a file's own
`#[cfg(test)] mod tests` is left out, and so is the path of a `pub(in …)`
visibility (it limits who may use an item, it uses nothing). Prints each strongly connected
component of more than one module (-v: with its edges). A parent and a
child that use each other are a circle. Exits 0: a report, not a check
(--check: exits 1 if there is a circle; `make cycles` and `make test` check).

-m (make cycles-methods): also an edge A -> B where A's file calls, on a
receiver named self, c, ctx, caps, child or parent, a method whose name is
defined in B's file only (an approximation: the files of the capability
layer share one context type, Ctx, whose methods are spread over them,
and a call between them is a dependency no `use` shows)."""
import os, re, sys
src = sys.argv[1].rstrip('/'); verbose = '-v' in sys.argv; methods = '-m' in sys.argv
mods = {}
for dp, _, fs in os.walk(src):
    for f in fs:
        if not f.endswith('.rs'): continue
        rel = os.path.relpath(os.path.join(dp, f), src)[:-3].split(os.sep)
        if rel[-1] == 'mod': rel = rel[:-1]
        if rel in (['lib'], ['main']): rel = []
        mods['::'.join(rel)] = os.path.join(dp, f)
def strip(t):
    out = []; i = 0; n = len(t)
    while i < n:
        c = t[i]
        if t.startswith('//', i):
            j = t.find('\n', i); i = n if j < 0 else j; continue
        if t.startswith('/*', i):
            d = 1; i += 2
            while i < n and d:
                if t.startswith('/*', i): d += 1; i += 2
                elif t.startswith('*/', i): d -= 1; i += 2
                else: i += 1
            out.append(' '); continue
        m = re.match(r'b?r(#*)"', t[i:i+40])
        if m and (i == 0 or not (t[i-1].isalnum() or t[i-1] == '_')):
            close = '"' + m.group(1); j = t.find(close, i + m.end()); i = n if j < 0 else j + len(close)
            out.append('""'); continue
        if c == '"':
            i += 1
            while i < n and t[i] != '"':
                i += 2 if t[i] == '\\' else 1
            i += 1; out.append('""'); continue
        if c == "'":
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^'\\])'", t[i:i+16])
            if m: i += m.end(); out.append("' '"); continue
        out.append(c); i += 1
    return ''.join(out)
def expand(tree):
    # expand a use tree "a::{b, c::{d}}" into paths
    tree = tree.strip()
    i = tree.find('{')
    if i < 0: return [tree]
    prefix = tree[:i]; depth = 0; parts = []; cur = ''
    body = tree[i+1:tree.rfind('}')]
    for ch in body:
        if ch == '{': depth += 1
        if ch == '}': depth -= 1
        if ch == ',' and depth == 0: parts.append(cur); cur = ''
        else: cur += ch
    parts.append(cur)
    out = []
    for p in parts:
        if p.strip(): out += [prefix + q for q in expand(p)]
    return out
def resolve(path):
    segs = [s for s in path.split('::') if s and s != 'self' and not s.startswith('*')]
    best = None
    for n in range(len(segs), 0, -1):
        k = '::'.join(segs[:n])
        if k in mods: best = k; break
    return best
edges = {m: set() for m in mods}
for m, f in mods.items():
    t = strip(open(f).read())
    # a file's own `mod tests` (its super:: is the file itself): not the module's imports
    t = re.split(r'#\[cfg\(test\)\]\s*mod\s+tests\b', t)[0]
    # `pub(in crate::a)` restricts who sees an item: no dependency on `a`
    t = re.sub(r'pub\s*\(\s*in\s+[^)]*\)', 'pub', t)
    mparts = m.split('::') if m else []
    is_dir = f.endswith('mod.rs') or f.endswith('lib.rs')
    parent = mparts[:-1] if not is_dir else mparts[:-1]
    here = mparts  # self
    sup = mparts[:-1]
    paths = []
    for u in re.findall(r'\buse\s+([^;]+);', t, flags=re.S):
        for p in expand(re.sub(r'\s+', '', u)):
            paths.append(p)
    for p in re.findall(r'\b((?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)+)', t):
        paths.append(p)
    for p in paths:
        p = re.sub(r'\bas\b.*$', '', p)
        segs = p.split('::')
        if segs[0] == 'crate': full = segs[1:]
        elif segs[0] == 'super':
            base = sup[:]; segs = segs[1:]
            while segs and segs[0] == 'super': base = base[:-1]; segs = segs[1:]
            full = base + segs
        elif segs[0] == 'self': full = here + segs[1:]
        else:
            if is_dir and segs[0] and '::'.join(here + [segs[0]]) in mods: full = here + segs
            else: continue
        r = resolve('::'.join(full))
        if r is not None and r != m and r != '':
            edges[m].add(r)
    if is_dir:
        for p in re.findall(r'\b([a-z_][a-z0-9_]*)::[A-Za-z_]', t):
            k = '::'.join(here + [p])
            if k in mods and k != m: edges[m].add(k)
STD_METHODS = {'clone', 'fmt', 'eq', 'ne', 'default', 'from', 'into', 'drop', 'deref', 'hash', 'cmp', 'partial_cmp', 'next'}
if methods:
    bodies = {m: re.split(r'#\[cfg\(test\)\]\s*mod\s+tests\b', strip(open(f).read()))[0] for m, f in mods.items()}
    defined = {}
    for m, t in bodies.items():
        for name in set(re.findall(r'\bfn ([a-z_][a-z0-9_]*)', t)):
            defined.setdefault(name, set()).add(m)
    for m, t in bodies.items():
        for name in re.findall(r'\b(?:self|c|ctx|caps|child|parent)\.([a-z_][a-z0-9_]*)\(', t):
            if name in STD_METHODS: continue
            owners = defined.get(name, set())
            if len(owners) == 1 and m not in owners:
                edges[m].add(next(iter(owners)))
# tarjan
idx = {}; low = {}; st = []; on = set(); sccs = []; c = [0]
sys.setrecursionlimit(10000)
def sc(v):
    idx[v] = low[v] = c[0]; c[0] += 1; st.append(v); on.add(v)
    for w in edges[v]:
        if w not in idx: sc(w); low[v] = min(low[v], low[w])
        elif w in on: low[v] = min(low[v], idx[w])
    if low[v] == idx[v]:
        comp = []
        while True:
            w = st.pop(); on.discard(w); comp.append(w)
            if w == v: break
        sccs.append(comp)
for v in mods:
    if v not in idx: sc(v)
big = [sorted(s) for s in sccs if len(s) > 1]
print(f"{len(mods)} modules; cycles: {len(big)}")
for s in big:
    print(f"  SCC of {len(s)}: {{{', '.join(s)}}}")
    if verbose:
        ss = set(s)
        for v in s:
            print(f"    {v} -> {sorted(w for w in edges[v] if w in ss)}")
if '--check' in sys.argv and big:
    sys.exit(1)
