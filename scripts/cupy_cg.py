#!/usr/bin/env python3
"""Time CuPy's CG per iteration, the reference for `krylov solve --device cuda` (issue 8).

Solves A x = b with ``cupyx.scipy.sparse.linalg.cg`` on the GPU, on the same problem as
``krylov solve`` with its defaults: b = A * ones (exact solution all ones), x0 = 0, Jacobi
preconditioning (M = diag(A)^-1), relative tolerance 1e-8 on ||b - A x|| / ||b||.

The matrix is either a Matrix Market file (``--mtx``, read with scipy.io.mmread, e.g. one
written by ``krylov gen poisson3d --n 128 -o p128.mtx``) or generated here (``--poisson N``:
the 7-point Laplacian on the N^3 interior grid with Dirichlet boundary, diagonal 6 and
off-diagonals -1, the matrix of ``krylov gen poisson3d --n N``).

It solves once with a callback to count the iterations, then ``--repeats`` times without one,
timed between device synchronisations, and prints one JSON object: iterations, seconds per
solve (best and median) and per iteration, the true relative residual. Needs cupy, scipy and
numpy (installed on the device machine); runs nothing without a GPU.

    python3 scripts/cupy_cg.py --poisson 128
    python3 scripts/cupy_cg.py --mtx ../shared/matrices/bcsstk13.mtx --tol 1e-8
"""

import argparse
import json
import statistics
import sys
import time


def poisson3d(n):
    """7-point Laplacian on n^3 points (x fastest), as scipy CSR."""
    import scipy.sparse as sp

    one = sp.identity(n, format="csr")
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n), format="csr")
    a = (sp.kron(sp.kron(one, one), t) + sp.kron(sp.kron(one, t), one)
         + sp.kron(sp.kron(t, one), one)).tocsr()
    a.sum_duplicates()
    a.eliminate_zeros()
    return a


def cg_call(cg, a, b, m, tol, maxiter, callback=None):
    """cupyx cg with the relative tolerance under its name in this CuPy version."""
    kw = dict(x0=None, maxiter=maxiter, M=m, callback=callback, atol=0.0)
    try:
        return cg(a, b, rtol=tol, **kw)
    except TypeError:
        return cg(a, b, tol=tol, **kw)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--mtx", help="Matrix Market file (SPD)")
    src.add_argument("--poisson", type=int, metavar="N", help="generate the N^3 3-D Poisson matrix")
    p.add_argument("--tol", type=float, default=1e-8)
    p.add_argument("--max-iter", type=int, default=100000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-precond", action="store_true", help="plain CG (M = None)")
    args = p.parse_args()
    if args.repeats < 1 or (args.poisson is not None and args.poisson < 1):
        p.error("--repeats and --poisson must be at least 1")

    import numpy as np
    import scipy.io
    import scipy.sparse as sp
    import cupy as cp
    import cupyx.scipy.sparse as csp
    from cupyx.scipy.sparse.linalg import LinearOperator, cg

    if args.mtx:
        a_host = sp.csr_matrix(scipy.io.mmread(args.mtx)).astype(np.float64)
        name = args.mtx
    else:
        a_host = poisson3d(args.poisson)
        name = f"poisson3d:{args.poisson}"
    n = a_host.shape[0]
    a = csp.csr_matrix(a_host)
    b = a @ cp.ones(n, dtype=cp.float64)
    m = None
    if not args.no_precond:
        dinv = 1.0 / cp.asarray(a_host.diagonal())
        m = LinearOperator((n, n), matvec=lambda v: dinv * v, dtype=cp.float64)

    iters = [0]

    def count(_xk):
        iters[0] += 1

    x, info = cg_call(cg, a, b, m, args.tol, args.max_iter, count)
    cp.cuda.Device().synchronize()
    times = []
    for _ in range(args.repeats):
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        x, info = cg_call(cg, a, b, m, args.tol, args.max_iter)
        cp.cuda.Device().synchronize()
        times.append(time.perf_counter() - t0)
    relres = float(cp.linalg.norm(b - a @ x) / cp.linalg.norm(b))
    best = min(times)
    print(json.dumps({
        "schema_version": 1,
        "tool": "cupyx.scipy.sparse.linalg.cg",
        "cupy": cp.__version__,
        "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
        "matrix": name,
        "n": n,
        "nnz": int(a_host.nnz),
        "precond": "none" if args.no_precond else "jacobi",
        "tol": args.tol,
        "info": int(info),
        "iterations": iters[0],
        "relres_true": relres,
        "solve_seconds_best": best,
        "solve_seconds_median": statistics.median(times),
        "seconds_per_iteration": best / max(iters[0], 1),
    }))
    return 0 if info == 0 and relres <= args.tol * 1.0000001 else 1


if __name__ == "__main__":
    sys.exit(main())
