//! Grid halo exchange on slabs and 3-D blocks (periodic and not, process grids with
//! dimensions of 1 and 2 ranks, so ranks are their own and double neighbours), ghost widths
//! 1 and 2, several fields, every packing and strategy: every ghost cell holds exactly the
//! value of the global cell it mirrors, every other cell is untouched.

use castack_collectives::{Communicator, ThreadUniverse};
use castack_neighbor::grid::{Block, Halo, Packing, ProcessGrid};
use castack_neighbor::{Mode, Strategy};

/// A value unique to (field, global cell).
fn tag(f: usize, g: [usize; 3]) -> f64 {
    (((f * 1000 + g[2]) * 1000 + g[1]) * 1000 + g[0]) as f64
}

fn check(grid: ProcessGrid, global: [usize; 3], ghost: usize, fields: usize) {
    for &packing in Packing::ALL {
        for &strategy in &[Strategy::Naive, Strategy::Segmented { devices: 3 }] {
            ThreadUniverse::new(grid.size())
                .unwrap()
                .run(|comm| {
                    let r = comm.rank();
                    let own = grid.owned_range(r, global);
                    let owned: [usize; 3] = std::array::from_fn(|d| own[d].len());
                    let block = Block {
                        owned,
                        ghost,
                        fields,
                    };
                    let mut halo =
                        Halo::new(comm, &grid, block, strategy, Mode::Put, packing).unwrap();
                    let h = ghost as isize;
                    let p = block.padded();
                    let mut data = vec![-1.0; block.len()];
                    // Owned cells get their tag.
                    let cell = |x: usize, y: usize, z: usize| {
                        let c = [x, y, z];
                        let g: [isize; 3] =
                            std::array::from_fn(|d| own[d].start as isize + c[d] as isize - h);
                        g
                    };
                    for f in 0..fields {
                        for z in 0..p[2] {
                            for y in 0..p[1] {
                                for x in 0..p[0] {
                                    let g = cell(x, y, z);
                                    let inside = (0..3).all(|d| {
                                        let l = [x, y, z][d] as isize;
                                        l >= h && l < h + owned[d] as isize
                                    });
                                    if inside {
                                        data[block.index(f, x, y, z)] =
                                            tag(f, g.map(|v| v as usize));
                                    }
                                }
                            }
                        }
                    }
                    halo.exchange(comm, &mut data).unwrap();
                    for f in 0..fields {
                        for z in 0..p[2] {
                            for y in 0..p[1] {
                                for x in 0..p[0] {
                                    let l = [x, y, z];
                                    let outside: Vec<usize> = (0..3)
                                        .filter(|&d| {
                                            let v = l[d] as isize;
                                            v < h || v >= h + owned[d] as isize
                                        })
                                        .collect();
                                    let mut g = cell(x, y, z);
                                    let want = match outside.as_slice() {
                                        [] => Some(()),
                                        [d] => {
                                            let n = global[*d] as isize;
                                            if grid.periodic[*d] {
                                                g[*d] = g[*d].rem_euclid(n);
                                                Some(())
                                            } else if g[*d] >= 0 && g[*d] < n {
                                                Some(())
                                            } else {
                                                None
                                            }
                                        }
                                        _ => None,
                                    };
                                    let got = data[block.index(f, x, y, z)];
                                    let expect = match want {
                                        Some(()) => tag(f, g.map(|v| v as usize)),
                                        None => -1.0,
                                    };
                                    assert_eq!(
                                        got, expect,
                                        "rank {r} f {f} cell {l:?} {packing:?} {strategy:?}"
                                    );
                                }
                            }
                        }
                    }
                })
                .unwrap();
        }
    }
}

#[test]
fn slabs_periodic_and_not() {
    for p in 1..=4 {
        check(ProcessGrid::slabs(p, true), [3, 4, 9], 2, 2);
        check(ProcessGrid::slabs(p, false), [3, 4, 9], 1, 3);
    }
}

#[test]
fn blocks_on_3d_process_grids() {
    let periodic = ProcessGrid {
        procs: [2, 1, 3],
        periodic: [true, true, true],
    };
    check(periodic, [5, 4, 7], 2, 2);
    let mixed = ProcessGrid {
        procs: [2, 2, 2],
        periodic: [true, false, true],
    };
    check(mixed, [4, 5, 6], 1, 1);
    let torus = ProcessGrid {
        procs: [3, 3, 1],
        periodic: [true, true, true],
    };
    check(torus, [6, 7, 2], 2, 1);
}
