//! Tidy checks of the algorithm registries: names, parsing, defaults, and that every
//! algorithm file under `src/algo/<op>/` is a registry row (and every row has its file), so
//! an algorithm cannot exist unregistered and therefore untested by the sweep.

use std::collections::BTreeSet;
use std::path::Path;

use castack_collectives::{
    AllgathervAlgo, AllreduceAlgo, AlltoallAlgo, BarrierAlgo, BcastAlgo, GatherAlgo, ReduceAlgo,
    ScatterAlgo, UnknownAlgorithm,
};

/// A registry as the tidy checks see it.
struct Registry {
    /// The operation, also the folder name under `src/algo/`.
    op: &'static str,
    names: Vec<&'static str>,
    displayed: Vec<String>,
    descriptions: Vec<&'static str>,
    default: &'static str,
    parse: fn(&str) -> Result<&'static str, UnknownAlgorithm>,
}

macro_rules! registry {
    ($op:literal, $ty:ty) => {
        Registry {
            op: $op,
            names: <$ty>::ALL.iter().map(|a| a.name()).collect(),
            displayed: <$ty>::ALL.iter().map(|a| a.to_string()).collect(),
            descriptions: <$ty>::ALL.iter().map(|a| a.description()).collect(),
            default: <$ty>::default().name(),
            parse: |s| s.parse::<$ty>().map(|a| a.name()),
        }
    };
}

fn registries() -> Vec<Registry> {
    vec![
        registry!("allgatherv", AllgathervAlgo),
        registry!("allreduce", AllreduceAlgo),
        registry!("barrier", BarrierAlgo),
        registry!("bcast", BcastAlgo),
        registry!("scatter", ScatterAlgo),
        registry!("gather", GatherAlgo),
        registry!("reduce", ReduceAlgo),
        registry!("alltoall", AlltoallAlgo),
    ]
}

#[test]
fn names_are_unique_snake_case_and_parse_back() {
    for reg in registries() {
        let unique: BTreeSet<_> = reg.names.iter().collect();
        assert_eq!(unique.len(), reg.names.len(), "{}: duplicate names", reg.op);
        assert!(
            reg.names.contains(&reg.default),
            "{}: default not in ALL",
            reg.op
        );
        for (i, name) in reg.names.iter().enumerate() {
            assert!(
                !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{}: '{name}' is not snake_case",
                reg.op
            );
            assert_eq!(
                &reg.displayed[i], name,
                "{}: Display differs from name()",
                reg.op
            );
            assert!(
                !reg.descriptions[i].is_empty(),
                "{} {name}: no description",
                reg.op
            );
            assert_eq!(
                (reg.parse)(name),
                Ok(*name),
                "{}: '{name}' does not parse",
                reg.op
            );
        }
    }
}

#[test]
fn unknown_names_list_the_valid_ones() {
    for reg in registries() {
        let err = (reg.parse)("no_such_algorithm").expect_err("parsed a bogus name");
        assert_eq!(err.op, format!("{} algorithm", reg.op));
        let message = err.to_string();
        assert!(message.contains("no_such_algorithm"), "{message}");
        for name in &reg.names {
            assert!(
                message.contains(name),
                "{}: '{message}' omits {name}",
                reg.op
            );
        }
    }
}

#[test]
fn every_algorithm_file_is_registered_and_every_row_has_its_file() {
    let algo_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/algo");
    let regs = registries();
    let mut ops_seen = BTreeSet::new();
    for entry in std::fs::read_dir(&algo_dir).expect("src/algo is readable") {
        let path = entry.expect("directory entry").path();
        if !path.is_dir() {
            continue;
        }
        let op = path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("UTF-8 folder name");
        let reg = regs
            .iter()
            .find(|r| r.op == op)
            .unwrap_or_else(|| panic!("src/algo/{op}/ has no registry in this test's list"));
        ops_seen.insert(op.to_string());
        let mut files = BTreeSet::new();
        for file in std::fs::read_dir(&path).expect("op folder is readable") {
            let file = file.expect("directory entry").path();
            if file.extension().is_some_and(|e| e == "rs") {
                let stem = file
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .expect("UTF-8 file name");
                if stem != "mod" {
                    files.insert(stem.to_string());
                }
            }
        }
        let names: BTreeSet<String> = reg.names.iter().map(|n| n.to_string()).collect();
        assert_eq!(
            files, names,
            "src/algo/{op}/*.rs files vs {op} registry names"
        );
    }
    let ops: BTreeSet<String> = regs.iter().map(|r| r.op.to_string()).collect();
    assert_eq!(ops_seen, ops, "registries without a folder under src/algo/");
}
