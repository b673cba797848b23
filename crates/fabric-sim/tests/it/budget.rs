//! The memory budget of a fabric config: every topology kind's size is checked against it
//! before anything is built (a 60-byte TOML can declare a billion nodes).

use castack_fabric_sim::config::TopologyConfig;
use castack_fabric_sim::{Fabric, FabricConfig, FabricError, MemBudget, PRESETS};

/// The peach2 preset's TOML with its `[topology]` table replaced by `topology`.
fn peach2_with(topology: &str) -> String {
    let text = PRESETS.iter().find(|(n, _)| *n == "peach2").unwrap().1;
    let start = text.find("[topology]").unwrap();
    let end = start + text[start..].find("\n\n").unwrap();
    format!("{}{topology}{}", &text[..start], &text[end..])
}

const GIB: u64 = 1 << 30;

/// Topologies of every kind that would each take gigabytes to build.
const HUGE: [(&str, &str); 6] = [
    (
        "ring",
        "[topology]\nkind = \"ring\"\nnodes = 1000000000\nnext = \"E\"\nprev = \"W\"",
    ),
    (
        "torus2xn",
        "[topology]\nkind = \"torus2xn\"\ncolumns = 100000000\neast = \"E\"\nwest = \"W\"\nsouth = \"S\"",
    ),
    (
        "torus",
        "[topology]\nkind = \"torus\"\ndims = [1000, 1000, 1000]\nports = [[\"E\", \"W\"], [\"S\", \"N\"]]",
    ),
    (
        "mesh",
        "[topology]\nkind = \"mesh\"\ndims = [1000, 1000, 1000]\nports = [[\"E\", \"W\"], [\"S\", \"N\"]]",
    ),
    (
        "fat-tree",
        "[topology]\nkind = \"fat-tree\"\nnodes = 200000000\nradix = 40000\nport = \"E\"",
    ),
    (
        "crossbar",
        "[topology]\nkind = \"crossbar\"\nnodes = 1000000000\nport = \"E\"",
    ),
];

#[test]
fn every_topology_kind_is_checked_against_the_budget_before_it_is_built() {
    for (kind, topology) in HUGE {
        let text = peach2_with(topology);
        // The budget check comes before the build: the error names the nodes asked for and
        // the budget, on one line, and nothing of that size was allocated (the test would
        // need gigabytes otherwise).
        let e = FabricConfig::from_toml_str_within(&text, MemBudget::new(4 * GIB)).unwrap_err();
        let FabricError::OverBudget { error, .. } = &e else {
            panic!("{kind}: expected OverBudget, got {e}");
        };
        assert!(error.needed > 4 * GIB, "{kind}: {e}");
        assert_eq!(error.budget, 4 * GIB, "{kind}");
        let msg = e.to_string();
        assert!(!msg.contains('\n'), "{kind}: one line: {msg}");
        assert!(
            msg.contains("nodes needs") && msg.contains("over the memory budget of 4.0 GiB"),
            "{kind}: {msg}"
        );
    }
}

#[test]
fn the_torus2xn_of_the_issue_is_over_budget_and_names_its_nodes() {
    let text = peach2_with(HUGE[1].1);
    let e = FabricConfig::from_toml_str_within(&text, MemBudget::new(4 * GIB)).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("fabric config `peach2`: the fabric of 200000000 nodes needs"),
        "{e}"
    );
}

#[test]
fn a_fabric_fits_exactly_its_own_memory_estimate() {
    for (name, _) in PRESETS {
        let cfg = FabricConfig::preset(name).unwrap();
        let bytes = cfg.memory_bytes().unwrap();
        assert!(bytes > 0 && bytes < 64 << 20, "{name}: {bytes}");
        cfg.validate_within(MemBudget::new(bytes)).unwrap();
        Fabric::new_within(cfg.clone(), MemBudget::new(bytes)).unwrap();
        let e = cfg.validate_within(MemBudget::new(bytes - 1)).unwrap_err();
        assert!(matches!(e, FabricError::OverBudget { .. }), "{name}: {e}");
    }
}

#[test]
fn the_estimate_grows_with_the_nodes_of_every_kind() {
    // Doubling the nodes of a kind (about) doubles its estimate: sizes are read from the
    // config, not assumed.
    let small = |t: &str| {
        let cfg = FabricConfig::preset("peach2").unwrap();
        let mut cfg = cfg;
        cfg.topology = toml::from_str::<Wrap>(t).unwrap().topology;
        cfg.memory_bytes().unwrap()
    };
    let pairs = [
        (
            "kind = \"ring\"\nnodes = 1000\nnext = \"E\"\nprev = \"W\"",
            "kind = \"ring\"\nnodes = 2000\nnext = \"E\"\nprev = \"W\"",
        ),
        (
            "kind = \"torus2xn\"\ncolumns = 1000\neast = \"E\"\nwest = \"W\"",
            "kind = \"torus2xn\"\ncolumns = 2000\neast = \"E\"\nwest = \"W\"",
        ),
        (
            "kind = \"torus\"\ndims = [10, 100]\nports = []",
            "kind = \"torus\"\ndims = [20, 100]\nports = []",
        ),
        (
            "kind = \"fat-tree\"\nnodes = 1000\nradix = 64\nport = \"E\"",
            "kind = \"fat-tree\"\nnodes = 2000\nradix = 64\nport = \"E\"",
        ),
        (
            "kind = \"crossbar\"\nnodes = 1000\nport = \"E\"",
            "kind = \"crossbar\"\nnodes = 2000\nport = \"E\"",
        ),
    ];
    for (a, b) in pairs {
        let (x, y) = (
            small(&format!("[topology]\n{a}")),
            small(&format!("[topology]\n{b}")),
        );
        let ratio = y as f64 / x as f64;
        assert!((1.8..=2.2).contains(&ratio), "{a}: {x} -> {y}");
    }
}

#[test]
fn an_overflowing_size_is_over_any_budget() {
    let text = peach2_with(
        "[topology]\nkind = \"torus\"\ndims = [4294967296, 4294967296, 4294967296]\nports = []",
    );
    let e = FabricConfig::from_toml_str_within(&text, MemBudget::unlimited()).unwrap_err();
    let FabricError::OverBudget { error, .. } = &e else {
        panic!("expected OverBudget, got {e}");
    };
    assert_eq!(error.needed, u64::MAX, "{e}");
}

#[derive(serde::Deserialize)]
struct Wrap {
    topology: TopologyConfig,
}
