"""The file-level import graph of one crate and its circles (issue 46's check).

Usage: python3 scripts/import_graph.py crates/krylov [-v]

Edges come from `crate::a::b` and `super::x` paths in code (comment and doc lines are
skipped, and so is everything after a `#[cfg(test)]` at column 0); `crate::Item` resolves
through lib.rs's `pub use` to the file defining it, `crate::a::b` to the deepest file of
the module path. Prints the number of files and of circles (strongly connected components
of more than one file), each with its edges; `-v` prints every file's edges. A text-level
approximation of rustc's view (it does not follow `self::` or glob imports), kept simple
on purpose: a circle it prints is real.
"""
import os,re,sys
root=sys.argv[1]
src=os.path.join(root,'src')
files={}
for d,_,fs in os.walk(src):
    for f in fs:
        if f.endswith('.rs'):
            p=os.path.join(d,f); rel=os.path.relpath(p,src)
            files[rel]=open(p).read()
def modpath(rel):
    parts=rel[:-3].split('/')
    if parts[-1] in('mod','lib','main'): parts=parts[:-1]
    return parts
mods={tuple(modpath(r)):r for r in files}
# item -> module via lib.rs pub use X::{...}
items={}
lib=files.get('lib.rs','')
for m in re.finditer(r'pub use ([a-z_:]+)::\{([^}]*)\}',lib,re.S):
    for it in re.split(r'[,\s]+',m.group(1+1)):
        it=it.split(' as ')[-1].strip()
        if it: items[it]=tuple(m.group(1).split('::'))
for m in re.finditer(r'pub use ([a-z_:]+)::([A-Za-z_0-9]+)( as ([A-Za-z_0-9]+))?;',lib):
    items[m.group(4) or m.group(2)]=tuple(m.group(1).split('::'))
def resolve(path):
    # longest module prefix
    for k in range(len(path),0,-1):
        if tuple(path[:k]) in mods: return mods[tuple(path[:k])]
    return None
def strip(text):
    out=[];skip=False
    for line in text.split('\n'):
        if line.startswith('#[cfg(test)]') or line.startswith('#[cfg(all(test'): skip=True
        if skip: continue
        l=line.strip()
        if l.startswith('//'): continue
        out.append(line)
    return '\n'.join(out)
edges={}
for rel,text in files.items():
    t=strip(text); me=modpath(rel); tg=set()
    # expand use crate::{a, b::c}
    for m in re.finditer(r'crate::\{([^;]*?)\};',t,re.S):
        for part in re.split(r',\s*',m.group(1)):
            part=part.strip().split('::{')[0]
            if part: t+='\ncrate::'+part
    for m in re.finditer(r'crate::((?:[A-Za-z_0-9]+::)*[A-Za-z_0-9]+)',t):
        path=m.group(1).split('::')
        if path[0][0].isupper() or path[0].isupper():
            if path[0] in items: path=list(items[path[0]])
            else: continue
        r=resolve(path)
        if r and r!=rel: tg.add(r)
    for m in re.finditer(r'\bsuper::((?:[A-Za-z_0-9]+::)*[A-Za-z_0-9]+)',t):
        base=me[:-1] if not rel.endswith('mod.rs') else me[:-1]
        base = me[:-1]
        path=base+m.group(1).split('::')
        r=resolve(path)
        if r and r!=rel: tg.add(r)
    edges[rel]=tg
# SCCs
sys.setrecursionlimit(10000)
idx={};low={};st=[];on=set();sccs=[];c=[0]
def sc(v):
    idx[v]=low[v]=c[0];c[0]+=1;st.append(v);on.add(v)
    for w in edges.get(v,()):
        if w not in idx: sc(w);low[v]=min(low[v],low[w])
        elif w in on: low[v]=min(low[v],idx[w])
    if low[v]==idx[v]:
        comp=[]
        while True:
            w=st.pop();on.discard(w);comp.append(w)
            if w==v:break
        sccs.append(comp)
for v in edges:
    if v not in idx: sc(v)
cyc=[s for s in sccs if len(s)>1]
print("files",len(files),"cycles",len(cyc))
for s in cyc:
    print(" SCC:",sorted(s))
    for a in sorted(s):
        print("   ",a,"->",sorted(x for x in edges[a] if x in s))
if '-v' in sys.argv:
    for a in sorted(edges): print(a,'->',sorted(edges[a]))
