//! castack-sparse without the solvers: generate a scrambled 3-D Poisson matrix, write it as
//! Matrix Market, read it back (whole file, then the same file split into line-aligned byte
//! ranges as parallel readers would), check it is an SPD matrix's storage, reorder it with
//! reverse Cuthill-McKee and split its rows over 8 ranks. Every step is asserted.
//!
//! `cargo run -p castack-sparse --example read_reorder_partition`

use std::error::Error;

use castack_sparse::io::range::{part_range, read_coordinate_header, read_range};
use castack_sparse::io::{read_matrix_market_path, write_coordinate_symmetric_lower};
use castack_sparse::reorder::{bandwidth, permute_symmetric, rcm, Permutation};
use castack_sparse::{check, gen, MemBudget, Partition};

fn main() -> Result<(), Box<dyn Error>> {
    let n = 12;
    let a = gen::poisson3d(n)?;
    // Scramble the natural order, as an unstructured mesh's numbering would.
    let rows = a.rows();
    let scramble = Permutation::from_new_to_old((0..rows).map(|i| (i * 1009) % rows).collect())?;
    let a = permute_symmetric(a.view(), &scramble);

    let dir = std::env::temp_dir().join(format!("castack-sparse-example-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("p12.mtx");
    write_coordinate_symmetric_lower(std::fs::File::create(&path)?, &a)?;

    // The whole file.
    let m = read_matrix_market_path(&path)?;
    check::check_spd_storage(&m)?;
    let b = m.to_csr_full()?;
    check::check_symmetric(b.view())?;
    assert_eq!(b, a);

    // The same file in 4 byte ranges: every stored entry lies in exactly one.
    let budget = MemBudget::new(1 << 30);
    let header = read_coordinate_header(&path, 4, budget)?;
    let mut file = std::fs::File::open(&path)?;
    let mut entries = 0;
    for part in 0..4 {
        let range = part_range(&mut file, &header, part, 4)?;
        let got = read_range(&mut file, &header, range, &mut |_, _, _| entries += 1)?;
        assert!(
            got.stop.is_none(),
            "a well-formed file reads to the end of each range"
        );
    }
    assert_eq!(entries, m.nnz_stored());

    // Reorder and partition.
    let perm = rcm(b.view());
    let c = permute_symmetric(b.view(), &perm);
    println!(
        "{rows} rows, {} entries; bandwidth {} scrambled, {} after RCM",
        c.nnz(),
        bandwidth(b.view()),
        bandwidth(c.view())
    );
    assert!(bandwidth(c.view()) * 4 < bandwidth(b.view()));
    let part = Partition::nnz(c.indptr().raw_storage(), 8);
    let counts = part.counts();
    assert_eq!(counts.iter().sum::<usize>(), rows);
    println!("rows per rank (balanced by entries): {counts:?}");
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
