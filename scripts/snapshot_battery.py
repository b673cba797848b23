"""Snapshot battery: the same solves with two `krylov` binaries (an older build and this
tree's); their JSON reports (wall-clock fields dropped where the clock is not modeled; sim's
modeled times kept) and written solutions must be identical, bit for bit.

Usage: python3 scripts/snapshot_battery.py OLD_KRYLOV NEW_KRYLOV
       ONLY="--method cg ,nos7" python3 scripts/snapshot_battery.py ...   (a subset)

Issue 46 used it (540 solves: 6 methods x 4 preconditioners x ranks x threads/sim, mpk,
allgather, segmented exchange, eigs, x0, periodic and automatic replacement, drift restarts
and breakdowns) to show a refactoring changed no bit. Needs ../shared/matrices.
"""
import json,subprocess,sys,os,hashlib,tempfile
old,new=os.path.abspath(sys.argv[1]),os.path.abspath(sys.argv[2])
M=os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)),'..','..','shared','matrices'))
TMP=tempfile.mkdtemp(prefix='battery-')
mats=['494_bus.mtx','bcsstk08.mtx','662_bus.mtx']
cases=[]
for m in mats:
  for meth in ['cg','ccg','pipecg','cbcg','cbcgr','cacg']:
    for pc in ['none','jacobi','chebyshev','bjacobi_ic0']:
      for ranks in ['1','3']:
        for be in ['threads','sim']:
          cases.append([f'{M}/{m}','--method',meth,'--precond',pc,'--ranks',ranks,'--backend',be,'--history'])
  for meth in ['cbcgr','cacg']:
    for be in ['threads','sim']:
      cases.append([f'{M}/{m}','--method',meth,'--mpk','--k','6','--ranks','3','--backend',be])
  for be in ['threads','sim']:
    cases.append([f'{M}/{m}','--spmv','allgather','--ranks','4','--backend',be,'--history'])
    cases.append([f'{M}/{m}','--method','pipecg','--auto-replace=false','--replace-every','50','--ranks','2','--backend',be])
    cases.append([f'{M}/{m}','--method','cacg','--basis','newton','--k','8','--eigs','--ranks','3','--backend',be])
    cases.append([f'{M}/{m}','--method','cg','--eigs','--exchange','segmented','--ranks','4','--backend',be])

for m in mats:
  n=int(open(f'{M}/{m}').read().split('\n')[[i for i,l in enumerate(open(f'{M}/{m}').read().split('\n')) if l and not l.startswith('%')][0]].split()[0])
  xf=f'{TMP}/x0_{m}'
  with open(xf,'w') as f:
    f.write('%%%%MatrixMarket matrix array real general\n%d 1\n'%n)
    for i in range(n): f.write('%.17g\n'%(((i*37)%11)/7.0-0.5))
  for meth in ['cg','ccg','pipecg']:
    for pc in ['none','jacobi','chebyshev','bjacobi_ic0']:
      for be in ['threads','sim']:
        cases.append([f'{M}/{m}','--method',meth,'--precond',pc,'--x0',xf,'--ranks','2','--backend',be,'--history'])
        cases.append([f'{M}/{m}','--method',meth,'--precond',pc,'--replace-every','9','--tol','1e-13','--ranks','3','--backend',be,'--history','--eigs'])

for m in ['nos7.mtx','1138_bus.mtx','bcsstk13.mtx']:
  if not os.path.exists(f'{M}/{m}'): continue
  for meth in ['cg','ccg','pipecg']:
    for pc in ['none','jacobi','chebyshev','bjacobi_ic0']:
      for ar in ['--auto-replace=true','--auto-replace=false']:
        cases.append([f'{M}/{m}','--method',meth,'--precond',pc,ar,'--ranks','3','--backend','sim','--rhs','random:7','--max-iter','3000'])
def run(b,c):
  out=f'{TMP}/x_{os.path.basename(b)}_{hashlib.md5(" ".join(c).encode()).hexdigest()}.mtx'
  p=subprocess.run([b,'solve']+c+['--json','--output',out,'--threads','1'],capture_output=True,text=True)
  try: d=json.loads(p.stdout)
  except Exception: return ('ERR',p.returncode,p.stderr.strip()[-300:])
  d.pop('setup_s',None)
  if not d.get('modeled'):
    for k in ['time_s','time_breakdown','modeled_max_time_s']: d.pop(k,None)
  x=open(out).read() if os.path.exists(out) else None
  if os.path.exists(out): os.remove(out)
  return (d,x)
F=os.environ.get('ONLY')
if F: cases=[c for c in cases if any(w in ' '.join(c) for w in F.split(','))]
bad=0
for c in cases:
  a=run(old,c); b=run(new,c)
  if a!=b:
    bad+=1
    print('DIFF',' '.join(c[0:1]).split('/')[-1],' '.join(c[1:]))
    if isinstance(a[0],dict) and isinstance(b[0],dict):
      for k in a[0]:
        if a[0][k]!=b[0].get(k): print('   ',k,str(a[0][k])[:100],'|',str(b[0].get(k))[:100])
      if a[1]!=b[1]: print('    solution differs')
    else: print('   ',str(a)[:200],'\n   ',str(b)[:200])
print(f'{len(cases)} cases, {bad} differ')
sys.exit(1 if bad else 0)
